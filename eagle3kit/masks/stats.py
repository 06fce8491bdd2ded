"""Numbers about an :class:`~eagle3kit.masks.eagle_mask.EagleMask`: sparsity and bytes per TTT step, backend check.

The equivalence check builds the dense masks the way ``Eagle3DraftModel`` does for sdpa (``create_mask``) and eager
(speculators' ``create_float_mask``, bfloat16 by default), extends them per step with
``extend_dense_mask_for_draft_tokens``, and compares them with the token mask that flex reads from the BlockMask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd
import torch
from speculators.models.attention import create_float_mask
from speculators.models.eagle3.attention import extend_dense_mask_for_draft_tokens
from torch.nn.attention.flex_attention import BlockMask, create_mask

from eagle3kit.masks.eagle_mask import EMPTY, FULL, GRID_SUB, PARTIAL, EagleMask, MaskInputError, build_mask

DENSE_CHECK_LIMIT = 1 << 26  # Q x KV elements of the last step the equivalence check may build densely
FLOAT_MASK_DTYPE = torch.bfloat16  # create_float_mask's default, what Eagle3DraftModel gets for eager


def blockmask_bytes(block_mask: BlockMask) -> int:
    """Bytes held by a BlockMask's tensors (block tables, their transposes and orderings)."""
    total = 0
    for name in BlockMask._TENSOR_ATTRS:
        value = getattr(block_mask, name, None)
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return total


def stats(mask: EagleMask) -> pd.DataFrame:
    """One row per TTT step: keys, attended pairs, sparsity, block classes, BlockMask vs dense mask bytes."""
    rows = []
    float_size = torch.tensor([], dtype=FLOAT_MASK_DTYPE).element_size()
    for step in range(mask.ttt_steps):
        q_len, kv_len = mask.total_seq_len, mask.kv_len(step)
        counts, _, _ = mask.tile_counts(step, tile=GRID_SUB)
        classes = mask.block_classes(step)
        attended = int(counts.sum())
        pairs = q_len * kv_len
        rows.append({
            "step": step, "q_len": q_len, "kv_len": kv_len, "attended_pairs": attended,
            "sparsity": 1 - attended / pairs,
            "full_blocks": int((classes == FULL).sum()), "partial_blocks": int((classes == PARTIAL).sum()),
            "empty_blocks": int((classes == EMPTY).sum()),
            "blockmask_bytes": blockmask_bytes(mask.block_masks[step]),
            "dense_bool_bytes": pairs, "dense_float_bytes": pairs * float_size,
        })
    return pd.DataFrame(rows)


def blocks_line(mask: EagleMask, step: int = -1) -> str:
    """What flex attention does with TTT step ``step``'s blocks, in one sentence: how many it skips (empty), runs
    whole (full) and evaluates the ``mask_mod`` in (partial), out of all query blocks × key blocks."""
    step = mask.step_index(step)
    classes = mask.block_classes(step)
    full, partial, empty = (int((classes == c).sum()) for c in (FULL, PARTIAL, EMPTY))
    total = classes.numel()
    runs = f"runs the {full} full ones without the mask_mod and " if full else ""
    return (f"TTT step {step}: {classes.shape[0]} query blocks × {classes.shape[1]} key blocks = {total} blocks of "
            f"128×128; flex skips the {empty} empty ones, {runs}evaluates the mask_mod in the {partial} partial "
            f"ones{'' if full else ' (none is full)'}: it computes {full + partial} of {total} "
            f"({(full + partial) / total:.0%}); sdpa or eager over the dense mask compute all {total}.")


def _check_dense_size(mask: EagleMask) -> None:
    elements = mask.total_seq_len * mask.kv_len(-1)
    if elements > DENSE_CHECK_LIMIT:
        raise MaskInputError(
            f"The dense masks of this layout have {elements:,} elements at the last step (what the BlockMask avoids); "
            f"check equivalence on a layout with at most {DENSE_CHECK_LIMIT:,} (e.g. total_seq_len <= 4096 at 3 steps)."
        )


def dense_masks(mask: EagleMask, kind: str = "bool") -> Iterator[torch.Tensor]:
    """The dense [1, 1, Q, KV] mask of each TTT step as Eagle3DraftModel builds it for sdpa (bool) or eager (float)."""
    if kind not in ("bool", "float"):
        raise MaskInputError(f"kind must be 'bool' (sdpa) or 'float' (eager), got {kind!r}.")
    _check_dense_size(mask)
    n = mask.total_seq_len
    create = create_mask if kind == "bool" else create_float_mask
    dense = create(mask.mask_mod, B=None, H=None, Q_LEN=n, KV_LEN=n, device="cpu")
    for step in range(mask.ttt_steps):
        if step:
            dense = extend_dense_mask_for_draft_tokens(dense, n)
        yield dense


def check_equivalence(mask: EagleMask) -> pd.DataFrame:
    """Per step and backend: does its mask equal what flex attends to (from the BlockMask)? Mismatching pairs."""
    _check_dense_size(mask)
    flex = [mask.token_view(step) for step in range(mask.ttt_steps)]
    rows = []
    for kind, backend in (("bool", "sdpa"), ("float", "eager")):
        for step, dense in enumerate(dense_masks(mask, kind)):
            attends = dense[0, 0] if kind == "bool" else dense[0, 0] == 0
            if attends.shape != flex[step].shape:
                mismatches = -1
            else:
                mismatches = int((attends != flex[step]).sum())
            rows.append({"step": step, "backend": backend, "shape": tuple(attends.shape),
                         "equal_to_flex": mismatches == 0, "mismatched_pairs": mismatches})
    return pd.DataFrame(rows)



def equivalence(lengths: Sequence[int], total_seq_len: int, ttt_steps: int, sliding_window: int) -> pd.DataFrame:
    """:func:`check_equivalence` of ``lengths`` packed into ``total_seq_len``, with full attention (``window`` "off")
    and with ``sliding_window``: every backend's mask against flex's, per step."""
    return pd.concat([
        check_equivalence(build_mask(lengths, total_seq_len, ttt_steps)).assign(window="off"),
        check_equivalence(build_mask(lengths, total_seq_len, ttt_steps, sliding_window)).assign(window=sliding_window),
    ], ignore_index=True)


def window_pairs(full: EagleMask, windowed: EagleMask) -> pd.DataFrame:
    """The query-key pairs each TTT step's mask lets attend, without and with the sliding window (thousands
    separated), and the share the window keeps: notebook 03's sliding-window table."""
    pairs = pd.DataFrame({"full attention": stats(full)["attended_pairs"],
                          f"window {windowed.sliding_window}": stats(windowed)["attended_pairs"]})
    kept = (pairs.iloc[:, 1] / pairs.iloc[:, 0]).map("{:.0%}".format)
    return pairs.map("{:,}".format).assign(**{"the window keeps": kept}).rename_axis("TTT step")
