"""The demos' document layouts: real ShareGPT lengths (through the data stage's reader) and packing."""

from __future__ import annotations

import pytest

from eagle3kit.data.conversations import ordered, read_sharegpt
from eagle3kit.masks.eagle_mask import MaskInputError
from eagle3kit.data.layouts import pack, sharegpt_lengths
from eagle3kit.verifier import load_tokenizer


def test_sharegpt_lengths_are_the_data_stages_conversations_through_the_chat_template(tiny_verifier):
    tokenizer = load_tokenizer(tiny_verifier)
    lengths = sharegpt_lengths(tokenizer, n=4, seed=3)
    first = next(ordered(read_sharegpt(), seed=3))
    assert len(lengths) == 4 and all(n > 0 for n in lengths)
    assert lengths[0] == len(tokenizer.apply_chat_template(first, tokenize=True, return_dict=False))
    assert sharegpt_lengths(tokenizer, n=4, seed=4) != lengths
    assert sharegpt_lengths(tokenizer, n=4, seed=3, max_len=64) == [min(n, 64) for n in lengths]


def test_pack_takes_whole_documents_in_order_and_pads_the_rest():
    assert pack([300, 500, 100], 1024) == [300, 500, 100, 100]  # cycles while a document still fits
    assert pack([0, 2000, 600], 1024) == [600]  # empty and too-long documents are left out
    with pytest.raises(MaskInputError, match="No document fits into total_seq_len=128"):
        pack([300, 500], 128)
