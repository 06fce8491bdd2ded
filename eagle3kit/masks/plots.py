"""Figures of an :class:`~eagle3kit.masks.eagle_mask.EagleMask`.

Each function returns a Figure and never calls ``plt.show``.

Token heatmaps show the fraction of attended pairs per pixel, computed tile by tile (see ``EagleMask.tile_counts``),
so a 32k x 3-step mask is drawn without ever holding its dense 32768 x 98304 form. A TTT block holds one pair per
query, so at full length its tiles are 1/tile attended: every tile with any attended pair is drawn at least at the
shade of :data:`FLOOR` (the colour bar says so), and a panel holds no more image rows than it has pixels (a thinner
line would be dropped or aliased when drawn).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import torch
from matplotlib.colors import ListedColormap, Normalize, PowerNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from eagle3kit.masks.eagle_mask import BLOCK, EagleMask, build_mask, round_up_to_block
from eagle3kit.masks.stats import stats

ATTENDED_CMAP = "Blues"
BLOCK_COLORS = ("#ffffff", "#f5a623", "#1f5fa8")  # empty, partial, full
MAX_GRID_LINES = 48  # draw the 128-token block grid only when it is this sparse or sparser
GAMMA = 0.35  # aggregated tiles: a power scale, so sparse tiles stand apart from empty ones
FLOOR = 0.2  # aggregated tiles: one holding any attended pair is drawn at least at this fraction's shade


def _norm(tile: int):
    return Normalize(0, 1) if tile == 1 else PowerNorm(GAMMA, 0, 1)


def shade(counts: torch.Tensor, area: torch.Tensor, tile: int) -> torch.Tensor:
    """Fraction attended per tile; aggregated (``tile > 1``), a tile with an attended pair at least :data:`FLOOR`."""
    frac = counts.double() / area.clamp(min=1)
    return frac if tile == 1 else torch.where(counts > 0, frac.clamp(min=FLOOR), frac)


def _shade_label(tile: int) -> str:
    if tile == 1:
        return "attended (1) or masked (0) per token pair"
    return (f"fraction attended per {tile}x{tile}-token tile\n(power scale; a tile with any attended pair is "
            f"shown at ≥ {FLOOR:.0%})")


def choose_tile(height: int, width: int, max_pixels: int) -> int:
    """Smallest power-of-two tile that keeps both sides of a region within ``max_pixels`` pixels."""
    tile = 1
    while -(-height // tile) > max_pixels or -(-width // tile) > max_pixels:
        tile *= 2
    return tile


def _figure(width: float, height: float, ncols: int = 1, right: float = 0.97, wspace: float = 0.08, **kw):
    """A Figure with fixed margins (constrained layout would double the drawing time of a 32k view)."""
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(1, ncols, squeeze=False, **kw)[0]
    fig.subplots_adjust(left=0.75 / width, right=right, bottom=0.55 / height, top=1 - 0.5 / height, wspace=wspace)
    return fig, axes


def _boundaries(mask: EagleMask) -> tuple[list[int], list[tuple[int, int]]]:
    """Document starts (excluding 0) and padding spans."""
    segs = mask.segments()
    starts = [s for _, s, _ in segs if s > 0]
    padding = [(s, e) for doc, s, e in segs if doc == -1]
    return starts, padding


def _decorate(ax, mask: EagleMask, q: tuple[int, int], kv: tuple[int, int], offset: int, tile: int) -> None:
    """Document boundaries, padding rows and the block grid on one panel (kv axis shifted by ``offset``)."""
    starts, padding = _boundaries(mask)
    (q0, q1), (k0, k1) = q, kv
    rows = [s for s in starts if q0 < s < q1]
    cols = [s + offset for s in starts if k0 < s + offset < k1]
    ax.hlines(rows, k0, k1, colors="#c0392b", linewidths=0.6, label="document boundary")
    ax.vlines(cols, q0, q1, colors="#c0392b", linewidths=0.6)
    for s, e in padding:
        if s < q1 and e > q0:
            ax.axhspan(max(s, q0), min(e, q1), color="0.5", alpha=0.25, lw=0)
        if s + offset < k1 and e + offset > k0:
            ax.axvspan(max(s + offset, k0), min(e + offset, k1), color="0.5", alpha=0.25, lw=0)
    if (q1 - q0) / BLOCK <= MAX_GRID_LINES and (k1 - k0) / BLOCK <= MAX_GRID_LINES and tile == 1:
        ax.hlines(range(round_up_to_block(q0), q1, BLOCK), k0, k1, colors="0.55", linewidths=0.5, linestyles=":")
        ax.vlines(range(round_up_to_block(k0), k1, BLOCK), q0, q1, colors="0.55", linewidths=0.5, linestyles=":")


def _key_ticks(ax, k0: int, k1: int) -> None:
    """Three key ticks on a panel: its first key, its middle and its end, the outer labels aligned inwards, so that
    neither labels within a panel nor those of neighbouring panels run into each other."""
    ticks = [k0, (k0 + k1) // 2, k1]
    ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=8)
    for label, align in zip(ax.get_xticklabels(), ("left", "center", "right"), strict=True):
        label.set_horizontalalignment(align)


def around(position: int, half: int = 96) -> tuple[int, int, int, int]:
    """A ``region`` for :func:`plot_token_mask`: ``half`` tokens either side of ``position``, queries and keys."""
    lo = max(0, position - half)
    return lo, position + half, lo, position + half


def corner(total_seq_len: int, size: int) -> tuple[int, int, int, int]:
    """A ``region`` for :func:`plot_token_mask`: the first ``size`` queries and keys (at most the whole mask)."""
    n = min(total_seq_len, size)
    return 0, n, 0, n


def plot_token_mask(mask: EagleMask, region: Sequence[int] | None = None, step: int = -1,
                    max_pixels: int = 256) -> Figure:
    """Token heatmap of TTT step ``step``: one panel per block of keys (the step-0 keys, then one per extension).

    ``region`` = ``(q0, q1, kv0, kv1)`` in step-0 coordinates zooms every panel to the same window. ``max_pixels``:
    image rows and columns at most (fewer than a panel's pixels at 100 dpi, so no row is dropped when drawn).
    """
    step = mask.step_index(step)
    n = mask.total_seq_len
    q0, q1, k0, k1 = region if region is not None else (0, n, 0, n)
    q0, q1, k0, k1 = mask.region(0, (q0, q1, k0, k1))
    tile = choose_tile(q1 - q0, k1 - k0, max_pixels)
    width = min(4.2 * (step + 1), 14) + 1
    fig, axes = _figure(width, 4.2, step + 1, right=1 - 1.1 / width, sharey=True)
    image = None
    for copy, ax in enumerate(axes):
        offset = copy * n
        counts, area, (sq0, sq1, sk0, sk1) = mask.tile_counts(step, (q0, q1, k0 + offset, k1 + offset), tile)
        image = ax.imshow(shade(counts, area, tile).numpy(), cmap=ATTENDED_CMAP, norm=_norm(tile),
                          interpolation="nearest", aspect="auto", extent=(sk0, sk1, sq1, sq0))
        _decorate(ax, mask, (sq0, sq1), (sk0, sk1), offset, tile)
        title = "step-0 keys: causal & same document" if copy == 0 else f"keys added at TTT step {copy}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key position")
        _key_ticks(ax, sk0, sk1)
    axes[0].set_ylabel("query position")
    bar = fig.add_axes((1 - 0.9 / width, 0.15, 0.12 / width, 0.7))
    fig.colorbar(image, cax=bar).set_label(_shade_label(tile), fontsize=8)
    fig.suptitle(f"EAGLE-3 mask at TTT step {step}: {n} queries x {mask.kv_len(step)} keys", fontsize=10)
    return fig


def plot_block_map(mask: EagleMask, step: int = -1) -> Figure:
    """The BlockMask's 128x128 blocks coloured empty / partial (mask_mod evaluated) / full (skipped)."""
    step = mask.step_index(step)
    classes = mask.block_classes(step)
    fig, (ax,) = _figure(min(3 + 2.5 * (step + 1), 14), 3.8)
    ax.imshow(classes.numpy(), cmap=ListedColormap(BLOCK_COLORS), vmin=0, vmax=2, interpolation="nearest",
              aspect="auto", extent=(0, classes.shape[1], classes.shape[0], 0))
    q_blocks = classes.shape[0]
    ax.vlines([c * q_blocks for c in range(1, step + 1)], 0, q_blocks, colors="k", linewidths=1.2)
    counts = [int((classes == c).sum()) for c in range(3)]
    ax.legend(handles=[Patch(facecolor=col, edgecolor="0.4", label=f"{name} ({k})") for col, name, k in
                       zip(BLOCK_COLORS, ("empty", "partial", "full"), counts, strict=True)],
              loc="upper right", fontsize=8, framealpha=0.9)
    ax.set_xlabel("key block (128 tokens)")
    ax.set_ylabel("query block")
    for axis in (ax.xaxis, ax.yaxis):  # block numbers, never halves
        axis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"BlockMask block tables at TTT step {step} (black lines: one block of keys per step)", fontsize=9)
    return fig


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}"
        n /= 1024
    return ""


def plot_stats(mask: EagleMask, table=None) -> Figure:
    """Sparsity per TTT step (axis from 0 %) and the bytes of the BlockMask beside dense bool (sdpa) / float (eager)
    masks; each bar is labelled with its own value."""
    table = stats(mask) if table is None else table
    fig, (left, right) = _figure(10, 3.4, 2, wspace=0.3)
    steps = table["step"].to_numpy()
    bars = left.bar(steps, table["sparsity"] * 100, color="#1f5fa8")
    left.bar_label(bars, [f"{v:.1%}" for v in table["sparsity"]], fontsize=8)
    left.set_ylim(0, 110)
    left.set_yticks(range(0, 101, 20))
    left.set_xticks(steps)
    left.set_xlabel("TTT step")
    left.set_ylabel("masked pairs (%)")
    left.set_title("sparsity per TTT step", fontsize=9)
    width = 0.27
    for i, (col, label, colour) in enumerate((("blockmask_bytes", "BlockMask (flex)", "#1f5fa8"),
                                              ("dense_bool_bytes", "dense bool (sdpa)", "#f5a623"),
                                              ("dense_float_bytes", "dense bf16 (eager)", "#c0392b"))):
        bars = right.bar(steps + (i - 1) * width, table[col], width, label=label, color=colour)
        right.bar_label(bars, [_bytes(v) for v in table[col]], fontsize=6, padding=1)
    right.set_yscale("log")
    right.set_ylim(top=float(table["dense_float_bytes"].max()) * 1000)
    right.set_xticks(steps)
    right.set_xlabel("TTT step")
    right.set_ylabel("bytes")
    right.set_title("mask memory", fontsize=9)
    right.legend(fontsize=7, loc="upper left")
    return fig


def plot_layout_thumbnail(document_ids: torch.Tensor, ttt_steps: int = 3, sliding_window: int | None = None,
                          max_pixels: int = 256, mask: EagleMask | None = None) -> Figure:
    """A small figure of one batch: its packed documents (top strip) over its mask at the last TTT step.

    ``document_ids`` is the collator's ``[1, T]`` (or ``[T]``) tensor, -1 marking padding.
    """
    mask = mask or build_mask(document_ids=document_ids, ttt_steps=ttt_steps, sliding_window=sliding_window)
    n, kv = mask.total_seq_len, mask.kv_len(-1)
    tile = choose_tile(n, kv, max_pixels)
    counts, area, _ = mask.tile_counts(-1, None, tile)
    frac = shade(counts, area, tile)
    fig = Figure(figsize=(6, 2.6))
    strip, ax = fig.subplots(2, 1, height_ratios=(1, 6), sharex=True)
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.17, top=0.9, hspace=0.08)
    colours = matplotlib.colormaps["tab20"]
    for doc, s, e in mask.segments():
        for copy in range(mask.ttt_steps):
            face = "0.75" if doc == -1 else colours(doc % 20)
            strip.broken_barh([(s + copy * n, e - s)], (0, 1), facecolors=face, hatch="//" if doc == -1 else None)
    strip.set_yticks([])
    docs = len({d for d, _, _ in mask.segments() if d >= 0})
    padding = int((mask.document_ids == -1).sum())
    strip.set_title(f"{docs} documents, {padding} padding tokens, {n} tokens x {mask.ttt_steps} TTT steps",
                    fontsize=8)
    ax.imshow(frac.numpy(), cmap=ATTENDED_CMAP, norm=_norm(tile), interpolation="nearest", aspect="auto",
              extent=(0, frac.shape[1] * tile, frac.shape[0] * tile, 0))
    ax.vlines([c * n for c in range(1, mask.ttt_steps)], 0, n, colors="k", linewidths=0.8)
    ax.set_xlim(0, kv)
    ax.set_xlabel("key position (one block of keys per TTT step)", fontsize=8)
    ax.set_ylabel("query", fontsize=8)
    ax.tick_params(labelsize=7)
    return fig
