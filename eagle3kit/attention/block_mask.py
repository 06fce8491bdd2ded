"""speculators' EAGLE-3 BlockMask, built without vmap.

speculators builds it with torch's ``create_block_mask``, which evaluates the mask_mod through ``vmap`` over the
whole ``Q x KV`` grid. Its mask_mods (``create_combined_mask_mod``: documents, causal, sliding window, the TTT
diagonal) are plain tensor expressions, so one broadcast call over ``q[:, None]`` and ``kv[None, :]`` gives the
same dense mask; the block tables are then made by torch's own conversion, so they are ``create_block_mask``'s.
"""

from __future__ import annotations

import torch
from speculators.models.eagle3.attention import create_combined_mask_mod
from torch.nn.attention import flex_attention as fa
from torch.nn.attention.flex_attention import BlockMask

BLOCK = 128  # torch's default flex block, the one speculators uses


def dense_mask(mask_mod, q_len: int, kv_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """[q_len, kv_len] bool: ``mask_mod`` evaluated by broadcasting, not vmap."""
    zero = torch.zeros((), dtype=torch.long, device=device)
    q = torch.arange(q_len, device=device)[:, None]
    kv = torch.arange(kv_len, device=device)[None, :]
    return mask_mod(zero, zero, q, kv).expand(q_len, kv_len)


def block_mask_from_mod(mask_mod, n: int, device: torch.device | str = "cpu") -> BlockMask:
    """The BlockMask ``create_block_mask(mask_mod, None, None, n, n, device)`` returns, from one broadcast call."""
    mask = dense_mask(mask_mod, n, n, device)[None, None]
    partial, full = fa._convert_mask_to_block_mask(mask, BLOCK, BLOCK, separate_full_blocks=True)  # noqa: SLF001
    return fa._create_sparse_block_from_block_mask((partial, full), mask_mod, (n, n), BLOCK, BLOCK)  # noqa: SLF001


def eagle_block_mask(document_ids: torch.Tensor, sliding_window: int | None = None) -> BlockMask:
    """The base (TTT step 0) BlockMask speculators' draft builds for a packed batch's ``document_ids`` ([N])."""
    n = int(document_ids.shape[0])
    return block_mask_from_mod(create_combined_mask_mod(document_ids, n, sliding_window=sliding_window), n,
                               document_ids.device)
