"""Counting attended pairs tile by tile: BlockMask block tables decoded, hits pooled into sub-tiles, tiles summed.

These are the tensor pieces behind :meth:`~eagle3kit.masks.eagle_mask.EagleMask.tile_counts`; they know nothing of
documents or TTT steps. The fused counter is ``torch.compile`` of the plain one (same pairs, fewer temporaries).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

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


def grid_counts(full: torch.Tensor, partial: torch.Tensor, origin: tuple[int, int], lengths: tuple[int, int],
                sub: int, evaluate: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], mask_mod=None,
                block: int = 128, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Attended and valid pairs per ``sub x sub`` sub-tile over a grid of ``block``-token blocks.

    ``full`` / ``partial``: bool [q_blocks, kv_blocks], the grid's block classes (the rest empty); ``origin``: the
    grid's first query and key block; ``lengths``: (q_len, kv_len), pairs past them are not valid. Full blocks count
    whole, empty ones zero; partial blocks are counted with ``evaluate(q_idx, kv_idx)`` (broadcast indices -> bool),
    ``chunk`` blocks at a time, or with :func:`compiled_counter` over ``mask_mod`` when one is given (every block
    in range) and a compiler works.
    """
    (qb0, kb0), (q_len, kv_len), r = origin, lengths, block // sub
    qb1, kb1 = qb0 + full.shape[0], kb0 + full.shape[1]
    rows = (q_len - torch.arange(qb0 * block, qb1 * block, sub)).clamp(0, sub).int()
    cols = (kv_len - torch.arange(kb0 * block, kb1 * block, sub)).clamp(0, sub).int()
    area = rows[:, None] * cols[None, :]
    counts = torch.where(full.repeat_interleave(r, 0).repeat_interleave(r, 1), area, 0)
    grid = counts.view(qb1 - qb0, r, kb1 - kb0, r)
    pq, pk = torch.nonzero(partial, as_tuple=True)
    offsets = torch.arange(block)
    fused = mask_mod is not None
    for i in range(0, len(pq), chunk * 64):
        bq, bk = pq[i:i + chunk * 64], pk[i:i + chunk * 64]
        if fused:
            try:
                grid[bq, :, bk, :] = compiled_counter()((qb0 + bq)[:, None] * block + offsets,
                                                         (kb0 + bk)[:, None] * block + offsets, mask_mod, r, sub)
                continue
            except Exception:  # noqa: BLE001 - no working compiler: count the same pairs unfused
                fused = False
        for j in range(0, len(bq), chunk):  # unfused: chunk blocks at a time bound the temporaries
            sq, sk = bq[j:j + chunk], bk[j:j + chunk]
            qi, ki = (qb0 + sq)[:, None] * block + offsets, (kb0 + sk)[:, None] * block + offsets
            grid[sq, :, sk, :] = pool_hits(evaluate(qi[:, :, None], ki[:, None, :]), r, sub)
    return counts, area
