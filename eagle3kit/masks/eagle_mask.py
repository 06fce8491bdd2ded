"""Build and inspect the EAGLE-3 training mask exactly as speculators' ``Eagle3DraftModel`` does.

Nothing here re-implements the mask: the mask_mod comes from speculators' ``create_combined_mask_mod``, the base
BlockMask from torch's ``create_block_mask`` and each TTT step from ``extend_mask_for_draft_tokens`` (the dense
sdpa / eager masks: :mod:`eagle3kit.masks.stats`).

Views never materialise the dense ``Q x KV`` mask of a long sequence: the BlockMask's own tables say which 128x128
blocks are empty, full or partial, and the mask_mod is evaluated only inside partial blocks, tile by tile
(:mod:`eagle3kit.masks.pooling` does the counting).

Fast path: ``create_block_mask`` evaluates the whole Q x KV grid. Uncompiled (what speculators calls) it costs
~0.6 s / 200 MB at 4,096 tokens, 2.8 s / 650 MB at 8,192 and 27 s / 10 GB at 32,768 on a 2-core CPU; compiled with
``torch.compile`` it costs ~1-2.5 s / <100 MB at 32,768 once warm, plus a one-off compile (5-45 s) per process.
So :func:`build_mask` compiles only above ``COMPILE_ABOVE`` = 4,096 tokens (``compile=`` overrides).
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from speculators.models.eagle3.attention import create_combined_mask_mod, extend_mask_for_draft_tokens
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from eagle3kit import validate
from eagle3kit.errors import UserError
from eagle3kit.masks.pooling import block_table, grid_counts, sum_pool

BLOCK = 128  # torch's default flex block size, the one speculators uses (Q and KV blocks alike)
COMPILE_ABOVE = 4096  # tokens; longer sequences use torch.compile(create_block_mask)
TOKEN_VIEW_LIMIT = 1 << 26  # elements of a token-level view (64 MB as bool); larger regions: use tile_counts
EMPTY, PARTIAL, FULL = 0, 1, 2  # block classes
GRID_SUB = 32  # resolution of the cached whole-mask count grid (12 MB of int32 at 32k tokens x 3 steps)


class MaskInputError(UserError):
    """A mask layout that speculators would reject or silently get wrong."""


def round_up_to_block(n: int, multiple: int = BLOCK) -> int:
    """``n`` rounded up to a whole number of flex blocks (:data:`BLOCK` tokens, or ``multiple``)."""
    return -(-n // multiple) * multiple


def block_size_problem(total_seq_len: int, ttt_steps: int) -> str | None:
    """Why a padded length cannot work with speculators' flex attention over ``ttt_steps`` TTT steps (one sentence),
    or None when it can: the one statement of the block-size rule (masks, ``eagle3kit launch`` and the doctor)."""
    if ttt_steps <= 1 or total_seq_len % BLOCK == 0:
        return None
    fit = round_up_to_block(total_seq_len)
    return (f"total_seq_len={total_seq_len} is not a multiple of {BLOCK} with ttt_steps={ttt_steps}: speculators' "
            f"flex path extends the BlockMask by one {BLOCK}-token block per query block at each TTT step, so it "
            f"fails at TTT step 1 ('block_mask was created for a larger length'); its collator pads every batch to "
            f"--total-seq-len, so use a multiple of {BLOCK} such as {fit} (`--total-seq-len {fit}`), or "
            f"attn_implementation='sdpa' (`--attn sdpa`).")


def check_block_size(total_seq_len: int, ttt_steps: int) -> None:
    """Raise :func:`block_size_problem`'s sentence when there is one."""
    problem = block_size_problem(total_seq_len, ttt_steps)
    if problem:
        raise MaskInputError(problem)


def check_layout(total_seq_len: int, ttt_steps: int, sliding_window: int | None) -> None:
    """Raise one clear sentence for a sequence length, TTT step count or window that cannot work."""
    if not isinstance(total_seq_len, int) or total_seq_len < 1:  # a mask of any length (training needs more)
        raise MaskInputError(f"total_seq_len must be a positive integer, got {total_seq_len!r}.")
    if why := validate.problem("ttt_steps", ttt_steps):
        raise MaskInputError(f"{why}.")
    if sliding_window is not None and (not isinstance(sliding_window, int) or sliding_window < 1):
        raise MaskInputError(f"sliding_window must be a positive integer or None, got {sliding_window!r}.")
    check_block_size(total_seq_len, ttt_steps)


def check_lengths(lengths: Sequence[int]) -> list[int]:
    """Document lengths as Python ints; one clear sentence for a zero, negative or non-integer length."""
    out = []
    for i, n in enumerate(lengths):
        try:
            value = operator.index(n) if not isinstance(n, bool) else -1
        except TypeError:
            value = -1
        if value < 1:
            raise MaskInputError(f"Document lengths must be positive integers; length #{i} is {n!r}.")
        out.append(value)
    return out


def document_ids_from_lengths(lengths: Sequence[int], total_seq_len: int) -> torch.Tensor:
    """Packed document ids as speculators' collator makes them: 0,0,..,1,1,..,-1 (padding) up to total_seq_len."""
    lengths = check_lengths(lengths)
    used = sum(lengths)
    if used > total_seq_len:
        raise MaskInputError(
            f"The document lengths sum to {used} tokens but total_seq_len is {total_seq_len} (speculators' collator "
            f"would truncate the last one): drop or shorten documents, or raise total_seq_len to "
            f"{round_up_to_block(used)}."
        )
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths, dtype=torch.long))
    return torch.cat([ids, torch.full((total_seq_len - used,), -1, dtype=torch.long)])


def segments(document_ids: torch.Tensor) -> list[tuple[int, int, int]]:
    """Runs of equal document id as ``(doc_id, start, end)``; doc_id -1 is padding."""
    values, counts = torch.unique_consecutive(document_ids, return_counts=True)
    ends = torch.cumsum(counts, 0).tolist()
    starts = [0, *ends[:-1]]
    return [(int(v), s, e) for v, s, e in zip(values.tolist(), starts, ends, strict=True)]


@dataclass
class EagleMask:
    """The masks of one packed batch at every TTT step (step ``k`` attends to ``(k + 1) * total_seq_len`` keys)."""

    document_ids: torch.Tensor
    ttt_steps: int
    sliding_window: int | None
    block_masks: list[BlockMask]
    compiled: bool
    build_seconds: float
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.mask_mod = self.block_masks[0].mask_mod

    @property
    def total_seq_len(self) -> int:
        return int(self.document_ids.shape[0])

    def kv_len(self, step: int = -1) -> int:
        return self.total_seq_len * (self.step_index(step) + 1)

    def segments(self) -> list[tuple[int, int, int]]:
        return segments(self.document_ids)

    def step_index(self, step: int) -> int:
        """``step`` (negative counts from the last) as 0..ttt_steps-1; one clear sentence when out of range."""
        if not -self.ttt_steps <= step < self.ttt_steps:
            raise MaskInputError(f"step must be in 0..{self.ttt_steps - 1} (ttt_steps={self.ttt_steps}), got {step}.")
        return step % self.ttt_steps

    def block_classes(self, step: int = -1) -> torch.Tensor:
        """[q_blocks, kv_blocks] int8: EMPTY / PARTIAL / FULL, read from the BlockMask's own block tables."""
        step = self.step_index(step)
        if step not in self._cache:
            bm = self.block_masks[step]
            kv_blocks = -(-self.kv_len(step) // BLOCK)
            classes = block_table(bm.kv_num_blocks, bm.kv_indices, kv_blocks).to(torch.int8)
            if bm.full_kv_num_blocks is not None:
                full = block_table(bm.full_kv_num_blocks, bm.full_kv_indices, kv_blocks)
                classes = torch.where(full, torch.tensor(FULL, dtype=torch.int8), classes)
            self._cache[step] = classes
        return self._cache[step]

    def evaluate(self, q_idx: torch.Tensor, kv_idx: torch.Tensor, step: int = -1) -> torch.Tensor:
        """speculators' mask_mod at (broadcast) indices; positions past the sequence are False."""
        q_len, kv_len = self.total_seq_len, self.kv_len(step)
        zero = torch.zeros((), dtype=torch.long)
        if int(q_idx.max()) < q_len and int(kv_idx.max()) < kv_len:
            return self.mask_mod(zero, zero, q_idx, kv_idx)
        valid = (q_idx < q_len) & (kv_idx < kv_len)
        return self.mask_mod(zero, zero, q_idx.clamp(max=q_len - 1), kv_idx.clamp(max=kv_len - 1)) & valid

    def region(self, step: int = -1, region: Sequence[int] | None = None) -> tuple[int, int, int, int]:
        """``(q0, q1, kv0, kv1)`` clipped to the step's mask; None = all of it."""
        q_len, kv_len = self.total_seq_len, self.kv_len(step)
        q0, q1, k0, k1 = region if region is not None else (0, q_len, 0, kv_len)
        q0, q1, k0, k1 = max(0, q0), min(q_len, q1), max(0, k0), min(kv_len, k1)
        if q0 >= q1 or k0 >= k1:
            raise MaskInputError(f"The region {tuple(region)} is empty inside the {q_len} x {kv_len} mask of "
                                 f"step {step}.")
        return q0, q1, k0, k1

    def token_view(self, step: int = -1, region: Sequence[int] | None = None) -> torch.Tensor:
        """Bool [q, kv] of what flex attends to: full blocks, plus the mask_mod inside partial blocks."""
        q0, q1, k0, k1 = self.region(step, region)
        if (q1 - q0) * (k1 - k0) > TOKEN_VIEW_LIMIT:
            raise MaskInputError(
                f"A token view of {q1 - q0} x {k1 - k0} is too large to hold densely; pass a smaller region or "
                "use tile_counts(), which aggregates tile by tile."
            )
        q, kv = torch.arange(q0, q1), torch.arange(k0, k1)
        classes = self.block_classes(step)[q // BLOCK][:, kv // BLOCK]
        return (classes == FULL) | ((classes == PARTIAL) & self.evaluate(q[:, None], kv[None, :], step))

    def tile_counts(self, step: int = -1, region: Sequence[int] | None = None,
                    tile: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int, int, int]]:
        """Attended pairs and valid pairs per ``tile x tile`` tile (a power of two), and the region snapped to tiles.

        Full blocks count whole, empty ones zero; the mask_mod runs only inside partial blocks, a chunk of blocks at
        a time, so memory stays small whatever the length. Tiles of ``GRID_SUB`` tokens or more come from one cached
        pass over the last step's mask (earlier steps are its column prefixes, as the block tables confirm).
        """
        if tile < 1 or tile & (tile - 1):
            raise MaskInputError(f"tile must be a power of two, got {tile}.")
        step = self.step_index(step)
        q0, q1, k0, k1 = self.region(step, region)
        q0, k0 = q0 // tile * tile, k0 // tile * tile
        q1 = min(round_up_to_block(q1, tile), self.total_seq_len)
        k1 = min(round_up_to_block(k1, tile), self.kv_len(step))
        whole_tiles = k1 % tile == 0 or k1 == self.kv_len(-1)  # a ragged last tile would take later steps' columns
        if tile >= GRID_SUB and whole_tiles and self._is_prefix(step):  # crop the cached whole-mask grid
            counts, area = self._whole_grid(tile)
            rows, cols = slice(q0 // tile, -(-q1 // tile)), slice(k0 // tile, -(-k1 // tile))
            return counts[rows, cols], area[rows, cols], (q0, q1, k0, k1)
        sub = min(tile, BLOCK)
        qb0, kb0 = q0 // BLOCK, k0 // BLOCK
        counts, area = self._grid(step, (qb0, -(-q1 // BLOCK), kb0, -(-k1 // BLOCK)), sub)
        i0, j0 = (q0 - qb0 * BLOCK) // sub, (k0 - kb0 * BLOCK) // sub
        i1, j1 = i0 + -(-(q1 - q0) // sub), j0 + -(-(k1 - k0) // sub)
        counts, area = counts[i0:i1, j0:j1], area[i0:i1, j0:j1]
        if tile > sub:
            counts, area = sum_pool(counts, tile // sub), sum_pool(area, tile // sub)
        return counts, area, (q0, q1, k0, k1)

    def _whole_grid(self, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Counts and valid pairs per tile over the last step's whole mask (cached; one mask_mod pass in all)."""
        if ("grid", tile) not in self._cache:
            if tile == GRID_SUB:
                last = self.ttt_steps - 1
                blocks = (0, -(-self.total_seq_len // BLOCK), 0, -(-self.kv_len(last) // BLOCK))
                self._cache["grid", tile] = self._grid(last, blocks, GRID_SUB)
            else:
                counts, area = self._whole_grid(GRID_SUB)
                self._cache["grid", tile] = sum_pool(counts, tile // GRID_SUB), sum_pool(area, tile // GRID_SUB)
        return self._cache["grid", tile]

    def _is_prefix(self, step: int) -> bool:
        """Whether this step's block tables are the first columns of the last step's (what the extension does)."""
        key = ("prefix", step)
        if key not in self._cache:
            mine, last = self.block_classes(step), self.block_classes(-1)
            self._cache[key] = bool(torch.equal(mine, last[:, : mine.shape[1]]))
        return self._cache[key]

    def _grid(self, step: int, blocks: tuple[int, int, int, int], sub: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Attended and valid pairs per ``sub x sub`` sub-tile over a range of blocks ``(qb0, qb1, kb0, kb1)``."""
        qb0, qb1, kb0, kb1 = blocks
        q_len, kv_len = self.total_seq_len, self.kv_len(step)
        classes = self.block_classes(step)[qb0:qb1, kb0:kb1]
        inside = qb1 * BLOCK <= q_len and kb1 * BLOCK <= kv_len  # no ragged block: the fused counter applies
        return grid_counts(classes == FULL, classes == PARTIAL, (qb0, kb0), (q_len, kv_len), sub,
                           lambda q, kv: self.evaluate(q, kv, step),
                           self.mask_mod if self.compiled and inside else None, BLOCK)

    def fractions(self, step: int = -1, region: Sequence[int] | None = None, tile: int = BLOCK) -> torch.Tensor:
        """Fraction of attended pairs per tile (what a heatmap pixel shows)."""
        counts, area, _ = self.tile_counts(step, region, tile)
        return counts.double() / area.clamp(min=1)


@functools.cache
def compiled_create_block_mask():
    """torch.compile(create_block_mask), compiled once per process on first use."""
    return torch.compile(create_block_mask)


def build_mask(lengths: Sequence[int] | None = None, total_seq_len: int | None = None, ttt_steps: int = 3,
               sliding_window: int | None = None, document_ids: torch.Tensor | None = None,
               compile: bool | None = None) -> EagleMask:
    """The BlockMask of every TTT step for packed ``lengths`` (padded with -1 to ``total_seq_len``) or ``document_ids``.

    ``total_seq_len`` defaults to the lengths' sum rounded up to a multiple of 128. ``compile=None`` compiles
    ``create_block_mask`` only above ``COMPILE_ABOVE`` tokens (see the module docstring).
    """
    if document_ids is None:
        if lengths is None:
            raise MaskInputError("Pass either document lengths or a document_ids tensor.")
        lengths = check_lengths(lengths)
        if total_seq_len is None:
            total_seq_len = round_up_to_block(max(1, sum(lengths)))
        check_layout(total_seq_len, ttt_steps, sliding_window)
        document_ids = document_ids_from_lengths(lengths, total_seq_len)
    else:
        document_ids = torch.as_tensor(document_ids).reshape(-1).long()
        if document_ids.numel() == 0 or int(document_ids.min()) < -1:
            raise MaskInputError("document_ids must be a non-empty [1, T] or [T] tensor of ids >= 0, -1 for padding.")
        check_layout(int(document_ids.numel()), ttt_steps, sliding_window)
    seq_len = int(document_ids.numel())
    compile = seq_len > COMPILE_ABOVE if compile is None else compile
    t0 = time.perf_counter()
    # exactly Eagle3DraftModel._build_attn_mask + its per-step extension (speculators 0.9.0 core.py)
    mask_mod = create_combined_mask_mod(document_ids, seq_len, sliding_window=sliding_window)
    try:
        create = compiled_create_block_mask() if compile else create_block_mask
        base = create(mask_mod, B=None, H=None, Q_LEN=seq_len, KV_LEN=seq_len, device="cpu")
    except Exception as exc:  # torch.compile needs a working C++ toolchain
        if not compile:
            raise
        raise RuntimeError(
            f"torch.compile(create_block_mask) failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); "
            f"pass compile=False (slow and memory-hungry above {COMPILE_ABOVE} tokens) or fix the compiler setup."
        ) from exc
    block_masks = [base]
    for _ in range(ttt_steps - 1):
        block_masks.append(extend_mask_for_draft_tokens(block_masks[-1]))
    return EagleMask(document_ids, ttt_steps, sliding_window, block_masks, compile, time.perf_counter() - t0)
