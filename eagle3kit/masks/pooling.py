"""Counting attended pairs tile by tile: BlockMask block tables decoded, hits pooled into sub-tiles, tiles summed.

These are the tensor pieces behind :meth:`~eagle3kit.masks.eagle_mask.EagleMask.tile_counts`; they know nothing of
documents or TTT steps. The fused counter is ``torch.compile`` of the plain one (same pairs, fewer temporaries).
"""

from __future__ import annotations

import functools

import torch

def block_table(num: torch.Tensor, indices: torch.Tensor, kv_blocks: int) -> torch.Tensor:
    """Decode a (num_blocks, indices) pair of BlockMask tables into a [q_blocks, kv_blocks] bool matrix."""
    num, indices = num[0, 0].long(), indices[0, 0].long()
    listed = torch.arange(indices.shape[-1]) < num[:, None]
    dense = torch.zeros(indices.shape[0], kv_blocks + 1, dtype=torch.bool)
    dense.scatter_(1, torch.where(listed, indices, kv_blocks), True)
    return dense[:, :kv_blocks]


def pool_hits(hit: torch.Tensor, r: int, sub: int) -> torch.Tensor:
    """[n, block, block] bools (block = ``r * sub``) -> attended pairs per ``sub x sub`` sub-tile, [n, r, r] int32."""
    n, block = hit.shape[0], hit.shape[1]
    per_row = hit.view(n, block, r, sub).sum(3, dtype=torch.int32)
    return per_row.view(n, r, sub, r).sum(2, dtype=torch.int32)


def count_partial(qi: torch.Tensor, ki: torch.Tensor, mask_mod, r: int, sub: int) -> torch.Tensor:
    """The mask_mod over n blocks (query rows ``qi``, key columns ``ki``, all in range), pooled by :func:`pool_hits`."""
    zero = torch.zeros((), dtype=torch.long)
    return pool_hits(mask_mod(zero, zero, qi[:, :, None], ki[:, None, :]), r, sub)


@functools.cache
def compiled_counter():
    """:func:`count_partial` fused by torch.compile (dynamic shapes: one compile per process and window on/off)."""
    return torch.compile(count_partial, dynamic=True)


def sum_pool(t: torch.Tensor, f: int) -> torch.Tensor:
    """Sum ``f x f`` tiles of a 2-D tensor (zero-padded to a multiple of ``f``)."""
    rows, cols = -(-t.shape[0] // f) * f, -(-t.shape[1] // f) * f
    padded = torch.nn.functional.pad(t, (0, cols - t.shape[1], 0, rows - t.shape[0]))
    return padded.view(rows // f, f, cols // f, f).sum(3).sum(1)
