"""What a BlockMask asks of one attention call, as gather indices: the plan :mod:`.block_sparse` computes from.

speculators' EAGLE-3 BlockMask over ``N`` queries holds, per query block, the key blocks of the first ``N`` keys
(partial ones, whose mask_mod is evaluated here, and full ones), and at TTT step ``t`` one more block per step,
added by ``extend_mask_for_draft_tokens``, whose only kept entries are the diagonal ``(q, j * N + q)``. A plan
keeps the first kind as gathered key positions with their mask and the second as ``N x t`` per-position flags: the
TTT keys are computed as the per-position products they are, never as ``N x N`` blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn.attention.flex_attention import BlockMask

from eagle3kit.errors import UserError


class BlockMaskMismatch(UserError):
    """A BlockMask that does not describe the query and key lengths it is used with."""


@dataclass(frozen=True)
class Plan:
    """One attention call's work: ``n`` queries in ``blocks`` query blocks of ``size``; ``kv_pos[i]`` the base key
    positions query block ``i`` reads (``slots`` blocks of ``size``); ``allowed[i, r, s]`` whether query
    ``i * size + r`` attends to key ``kv_pos[i, s]``; ``diagonal[q, j]`` whether it attends to its own TTT key of
    step ``j + 1`` (position ``(j + 1) * n + q``)."""

    n: int
    size: int
    blocks: int
    slots: int
    kv_pos: torch.Tensor  # [blocks, slots * size] long
    allowed: torch.Tensor  # [blocks, size, slots * size] bool
    diagonal: torch.Tensor  # [n, ttt] bool

    @property
    def ttt(self) -> int:
        return self.diagonal.shape[1]

    def scores(self) -> tuple[int, int]:
        """(computed, kept) query-key scores per head: what the plan multiplies and what the mask keeps."""
        computed = self.blocks * self.size * self.slots * self.size + self.n * self.ttt
        return computed, int(self.allowed.sum()) + int(self.diagonal.sum())


def _tables(block_mask: BlockMask) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(partial count, partial indices, full count, full indices) of batch 0, head 0, as int64."""
    partial_n, partial = block_mask.kv_num_blocks[0, 0].long(), block_mask.kv_indices[0, 0].long()
    if block_mask.full_kv_num_blocks is None:
        return partial_n, partial, torch.zeros_like(partial_n), partial[:, :0]
    return partial_n, partial, block_mask.full_kv_num_blocks[0, 0].long(), block_mask.full_kv_indices[0, 0].long()


def _kinds(counts: torch.Tensor, indices: torch.Tensor, columns: int) -> torch.Tensor:
    """[rows, columns] bool: which columns each row's first ``counts[row]`` indices name."""
    rows, width = indices.shape
    used = torch.arange(width, device=indices.device)[None, :] < counts[:, None]
    table = torch.zeros(rows, columns + 1, dtype=torch.bool, device=indices.device)
    table.scatter_(1, torch.where(used, indices.clamp(max=columns), columns), True)  # unused -> spare column
    return table[:, :columns]


def make_plan(block_mask: BlockMask, n: int, kv_len: int) -> Plan:
    """The plan of ``block_mask`` for ``n`` queries and ``kv_len`` keys (``n`` base keys, then one group of ``n``
    per TTT step); one clear error when the mask cannot describe them."""
    size_q, size_kv = block_mask.BLOCK_SIZE
    if size_q != size_kv:
        raise BlockMaskMismatch(f"block_sparse_cpu needs square blocks (speculators' {size_q} x {size_q}); this "
                                f"BlockMask has {size_q} x {size_kv}.")
    if block_mask.kv_num_blocks.shape[:2] != (1, 1):
        raise BlockMaskMismatch("block_sparse_cpu takes one sequence and one mask for all heads (B=None, H=None), "
                                f"as speculators builds it; this BlockMask is {tuple(block_mask.shape)}.")
    if kv_len % n:
        raise BlockMaskMismatch(f"{kv_len} keys for {n} queries: the keys must be the queries' own plus one group "
                                "of the same length per TTT step, as speculators' draft passes them.")
    size, ttt = size_q, kv_len // n - 1
    blocks = -(-n // size)
    base_cols = blocks  # key blocks of the first n keys
    partial_n, partial, full_n, full = _tables(block_mask)
    if partial_n.shape[0] != blocks:
        raise BlockMaskMismatch(f"The BlockMask has {partial_n.shape[0]} query blocks of {size}; {n} queries need "
                                f"{blocks}: it was built for another length.")
    device = partial.device
    columns = max(int(partial.shape[1]), int(full.shape[1]), base_cols + ttt * blocks)
    is_partial, is_full = _kinds(partial_n, partial, columns), _kinds(full_n, full, columns)
    kind = (is_partial | is_full)[:, :base_cols]
    slots = max(int(kind.sum(1).max()), 1)
    order = torch.argsort((~kind).to(torch.int8), dim=1, stable=True)[:, :slots]  # kept blocks first, ascending
    slot_kept, slot_full = kind.gather(1, order), is_full[:, :base_cols].gather(1, order)

    offsets = torch.arange(size, device=device)
    kv_pos = (order[:, :, None] * size + offsets).reshape(blocks, slots * size)
    q_pos = torch.arange(blocks, device=device)[:, None] * size + offsets  # [blocks, size]
    inside = (q_pos < n)[:, :, None] & (kv_pos < n)[:, None, :] & slot_kept.repeat_interleave(size, 1)[:, None, :]
    full_slot = slot_full.repeat_interleave(size, 1)[:, None, :]
    zero = torch.zeros((), dtype=torch.long, device=device)
    kv_safe, q_safe = kv_pos.clamp(max=n - 1), q_pos.clamp(max=n - 1)
    by_mod = block_mask.mask_mod(zero, zero, q_safe[:, :, None], kv_safe[:, None, :])
    allowed = inside & (full_slot | by_mod)
    allowed[:, :, 0] |= (q_pos >= n)  # padded query rows get one key, so their (discarded) softmax stays finite

    queries = torch.arange(n, device=device)
    diag = []
    for step in range(1, ttt + 1):
        column = base_cols + (step - 1) * blocks + queries // size  # the block the extension added for this step
        diag.append(_diagonal(block_mask, is_partial | is_full, column, queries, step * n + queries, size))
    diagonal = torch.stack(diag, 1) if diag else torch.zeros(n, 0, dtype=torch.bool, device=device)
    return Plan(n, size, blocks, slots, kv_pos, allowed, diagonal)


def _diagonal(block_mask: BlockMask, kept: torch.Tensor, column: torch.Tensor, queries: torch.Tensor,
              keys: torch.Tensor, size: int) -> torch.Tensor:
    """[n] bool: query q attends to its TTT key ``keys[q]``: its block is listed and the mask_mod keeps it."""
    listed = kept[queries // size, column]
    zero = torch.zeros((), dtype=torch.long, device=queries.device)
    return listed & block_mask.mask_mod(zero, zero, queries, keys)
