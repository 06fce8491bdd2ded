"""The demos' document layouts: real ShareGPT lengths (through the data stage's reader) and packing."""

from __future__ import annotations

import pytest

from eagle3kit.data.conversations import ordered, read_sharegpt
from eagle3kit.masks.eagle_mask import MaskInputError
from eagle3kit.data.layouts import exchange_lengths, pack, sharegpt_lengths
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


def test_exchange_lengths_are_first_exchanges_cut_as_the_demos_samples(tiny_verifier):
    """A first user turn cut to `prompt_tokens` and its reply to `reply_tokens`, through the chat template: never
    longer than the two cuts and the template's own tokens, and shorter cuts give shorter samples."""
    tokenizer = load_tokenizer(tiny_verifier)
    overhead = len(tokenizer.apply_chat_template([{"role": "user", "content": ""}, {"role": "assistant",
                                                                                     "content": ""}], tokenize=True,
                                                 return_dict=False))
    lengths = exchange_lengths(tokenizer, n=8, seed=3, prompt_tokens=40, reply_tokens=30)
    assert len(lengths) == 8 and all(overhead < n <= overhead + 40 + 30 + 4 for n in lengths)
    assert max(lengths) > overhead + 40  # the reply is there, not just the prompt
    shorter = exchange_lengths(tokenizer, n=8, seed=3, prompt_tokens=10, reply_tokens=10)
    assert all(s <= n for s, n in zip(shorter, lengths, strict=True)) and sum(shorter) < sum(lengths)


def test_the_blocks_line_counts_what_flex_skips_and_computes():
    from eagle3kit.masks.eagle_mask import build_mask
    from eagle3kit.masks.stats import blocks_line

    one_long = build_mask([512], 512, 3)  # one causal document: the 6 blocks below the diagonal are full, the 4 on
    said = blocks_line(one_long)  # it partial, and each TTT step's keys add 4 partial (the diagonal) and 12 empty
    assert said.startswith("TTT step 2: 4 query blocks × 12 key blocks = 48 blocks")
    assert "runs the 6 full ones" in said and "in the 12 partial ones" in said and "skips the 30 empty" in said
    assert "computes 18 of 48 (38%)" in said
    short = blocks_line(build_mask([100, 100, 100, 100, 100], 512, 3), step=0)  # no block is whole
    assert "(none is full)" in short and short.startswith("TTT step 0: 4 query blocks × 4 key blocks = 16")
