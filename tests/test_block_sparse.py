"""block_sparse_cpu against sdpa on the dense mask speculators builds, at the attention call (forward and backward),
and the BlockMask built without vmap against ``create_block_mask``. Random q / k / v, real speculators masks."""

from __future__ import annotations

import pytest
import torch
from speculators.models.eagle3.attention import (create_combined_mask_mod, extend_dense_mask_for_draft_tokens,
                                                 extend_mask_for_draft_tokens)
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from eagle3kit.attention.block_mask import dense_mask, eagle_block_mask
from eagle3kit.attention.block_sparse import NAME, DenseMaskRefused, block_sparse_attention
from eagle3kit.attention.plan import make_plan
from eagle3kit.masks.eagle_mask import document_ids_from_lengths


class Attention(torch.nn.Module):
    """What the attention functions read off the module: SmolLM2's 9 query heads over 3 key/value heads."""

    num_key_value_groups = 3
    is_causal = True


def documents(n: int, lengths=(200, 180, 250, 150, 120, 80)) -> torch.Tensor:
    fitting, used = [], 0
    for length in lengths:
        if used + length <= n:
            fitting.append(length)
            used += length
    return document_ids_from_lengths(fitting, n)


def both(n: int, ttt: int, window: int | None = None, drop: tuple[int, int] | None = None, seed: int = 0):
    """(outputs, gradients) of block_sparse_cpu and of sdpa at TTT step ``ttt``; ``drop`` removes one kept
    (query block, key block) from the BlockMask only."""
    doc = documents(n)
    block_mask = eagle_block_mask(doc, window)
    dense = dense_mask(create_combined_mask_mod(doc, n, window), n, n)[None, None]
    for _ in range(ttt):
        block_mask, dense = extend_mask_for_draft_tokens(block_mask), extend_dense_mask_for_draft_tokens(dense, n)
    if drop is not None:
        block_mask = without_block(block_mask, *drop)
    generator = torch.Generator().manual_seed(seed)
    shapes = [(1, 9, n, 64), (1, 3, (ttt + 1) * n, 64), (1, 3, (ttt + 1) * n, 64)]
    q, k, v = (torch.randn(s, generator=generator, requires_grad=True) for s in shapes)
    results = []
    for fn, mask in ((block_sparse_attention, block_mask), (sdpa_attention_forward, dense)):
        out, _ = fn(Attention(), q, k, v, mask, scaling=0.125)
        results.append((out.detach(), torch.autograd.grad(out.square().sum(), (q, k, v))))
    return results


def without_block(block_mask: BlockMask, q_block: int, kv_block: int) -> BlockMask:
    """``block_mask`` with key block ``kv_block`` struck from query block ``q_block``'s partial and full lists."""
    lists = []
    for num, idx in ((block_mask.kv_num_blocks, block_mask.kv_indices),
                     (block_mask.full_kv_num_blocks, block_mask.full_kv_indices)):
        num, idx = num.clone(), idx.clone()
        row = idx[0, 0, q_block, : num[0, 0, q_block]].tolist()
        if kv_block in row:
            row.remove(kv_block)
            idx[0, 0, q_block, : len(row)] = torch.tensor(row, dtype=idx.dtype)
            num[0, 0, q_block] -= 1
        lists += [num, idx]
    return BlockMask.from_kv_blocks(*lists, BLOCK_SIZE=block_mask.BLOCK_SIZE, mask_mod=block_mask.mask_mod,
                                    seq_lengths=block_mask.seq_lengths)


def worst_relative(results) -> float:
    (out, grads), (ref_out, ref_grads) = results
    pairs = [(out, ref_out), *zip(grads, ref_grads, strict=True)]
    return max(float((a - b).norm() / b.norm()) for a, b in pairs)


@pytest.mark.parametrize("ttt", [0, 1, 2, 6])
def test_equals_sdpa_on_the_dense_mask_forward_and_backward(ttt):
    assert worst_relative(both(1024, ttt)) <= 1e-5


@pytest.mark.parametrize(("n", "window"), [(1024, 64), (1000, None), (1000, 100), (384, None)])
def test_windows_and_lengths_that_are_not_whole_blocks(n, window):
    for ttt in (0, 2):
        assert worst_relative(both(n, ttt, window)) <= 1e-5, (n, window, ttt)


@pytest.mark.parametrize(("ttt", "drop"), [(0, (1, 0)), (2, (1, 1)), (2, (3, 8 + 3))])
def test_a_block_dropped_from_the_mask_is_a_different_attention(ttt, drop):
    """The broken direction: strike one kept block (a base block, a diagonal one, a TTT block of step 1) from the
    BlockMask alone and the output no longer matches the dense mask the mask_mod gives."""
    assert worst_relative(both(1024, ttt, drop=drop)) > 1e-3


def test_a_dense_mask_is_refused_in_one_sentence():
    q = torch.randn(1, 9, 128, 64)
    k = v = torch.randn(1, 3, 128, 64)
    dense = torch.ones(1, 1, 128, 128, dtype=torch.bool)
    with pytest.raises(DenseMaskRefused, match=f"attn_implementation='{NAME}' takes speculators' BlockMask") as err:
        block_sparse_attention(Attention(), q, k, v, dense, scaling=0.125)
    assert "\n" not in str(err.value) and "(1, 1, 128, 128)" in str(err.value)


def test_the_plan_computes_a_fraction_of_the_dense_scores():
    """At 1024 tokens of ~200-token documents, 3 TTT steps: the plan multiplies under a third of what sdpa does on
    the dense mask (4 x 1024 x 1024 scores a head) and keeps every score the mask keeps."""
    n, doc = 1024, documents(1024)
    block_mask = eagle_block_mask(doc)
    for _ in range(3):
        block_mask = extend_mask_for_draft_tokens(block_mask)
    computed, kept = make_plan(block_mask, n, 4 * n).scores()
    dense = dense_mask(create_combined_mask_mod(doc, n), n, n)
    assert kept == int(dense.sum()) + 3 * n
    assert computed < 4 * n * n / 3


@pytest.mark.parametrize("window", [None, 100])
def test_the_blockmask_without_vmap_is_create_block_masks(window):
    doc = documents(1024)
    ours = eagle_block_mask(doc, window)
    theirs = create_block_mask(create_combined_mask_mod(doc, 1024, window), None, None, 1024, 1024, device="cpu")
    for table in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(ours, table), getattr(theirs, table)), table
