"""The mask in miniature (notebook 03's first figure): 8 tokens, 2 documents, 3 TTT steps, every cell labelled, and
the sentence that reads one query's row: what it sees at step 0 (its document's earlier tokens) and at each later
step (one key a block: its own hidden state from that step, the diagonal)."""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

import numpy as np

from eagle3kit.masks.eagle_mask import BLOCK, EagleMask, build_mask

TINY_LENGTHS = (3, 5)  # two documents in 8 tokens
TINY_QUERY, TINY_STEP = 5, 2  # the row the sentence reads


def tiny_mask(lengths: Sequence[int] = TINY_LENGTHS, ttt_steps: int = 3) -> EagleMask:
    """speculators' mask for ``lengths``, padded to one 128-token block as its collator pads (the TTT extension works
    in whole blocks); :func:`tiny_view` reads the documents' tokens out of it."""
    return build_mask(lengths, total_seq_len=BLOCK, ttt_steps=ttt_steps)


def used(mask: EagleMask) -> int:
    """The tokens the documents fill (the padding after them left out of the views)."""
    return int((mask.document_ids >= 0).sum())


def tiny_view(mask: EagleMask, step: int) -> np.ndarray:
    """Bool [n, n * (step + 1)]: the documents' queries against their positions in every block of keys of ``step``."""
    n, total = used(mask), mask.total_seq_len
    return np.concatenate([mask.token_view(step, (0, n, b * total, b * total + n)).numpy()
                           for b in range(mask.step_index(step) + 1)], axis=1)


def seen(mask: EagleMask, query: int, step: int) -> dict[int, list[int]]:
    """Per block of keys (0: the verifier-fed positions, s: TTT step s's keys, made from the states step s - 1
    produced), the positions ``query`` sees."""
    n, row = used(mask), tiny_view(mask, step)[query]
    return {block: [int(k) - block * n for k in np.flatnonzero(row) if k // n == block]
            for block in range(mask.step_index(step) + 1)}


def sees(mask: EagleMask, query: int = TINY_QUERY, step: int = TINY_STEP) -> str:
    """What ``query`` attends to at TTT ``step``, read off the mask: a head line, then one bullet a block of keys."""
    doc = int(mask.document_ids[query])
    by_block = seen(mask, query, step)
    first = ", ".join(map(str, by_block[0]))
    lines = [f"Query {query} at step {step} sees:",
             f"- block 0: tokens {first} (itself and the earlier tokens of its own document {doc}: causal; nothing "
             "of the other document)"]
    for block, keys in list(by_block.items())[1:]:
        lines.append(f"- block {block}: position {', '.join(map(str, keys))} only (the key of TTT step {block}, made "
                     f"from the hidden state step {block - 1} produced there and fed back: the diagonal)")
    return "\n".join(lines)


def plot_tiny(mask: EagleMask, query: int = TINY_QUERY, step: int = TINY_STEP) -> Figure:
    """The mask of ``step`` cell by cell, labelled: rows are queries, columns keys by block and position; the row of
    ``query`` is outlined, document boundaries are red lines."""
    n = used(mask)
    view = tiny_view(mask, step).astype(int)
    blocks = mask.step_index(step) + 1
    fig = Figure(figsize=(1.2 + 0.32 * n * blocks, 0.9 + 0.32 * n))
    ax = fig.subplots()
    ax.imshow(view, cmap=ListedColormap(["#f2f2f2", "#1f77b4"]), vmin=0, vmax=1, aspect="equal")
    ax.set_xticks(range(n * blocks), [str(k % n) for k in range(n * blocks)], fontsize=7)
    ax.set_yticks(range(n), [str(q) for q in range(n)], fontsize=7)
    ax.set_xticks([x - 0.5 for x in range(n * blocks + 1)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(n + 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    for block in range(1, blocks):
        ax.axvline(block * n - 0.5, color="black", linewidth=1.5)
    starts = [s for d, s, _e in mask.segments() if d >= 0][1:]
    for s in starts:
        ax.axhline(s - 0.5, color="tab:red", linewidth=1)
        for block in range(blocks):
            ax.axvline(block * n + s - 0.5, color="tab:red", linewidth=1)
    ax.add_patch(Rectangle((-0.5, query - 0.5), n * blocks, 1, fill=False, edgecolor="tab:orange", linewidth=2))
    for block in range(blocks):
        ax.text(block * n + (n - 1) / 2, -0.9, "block 0: tokens" if block == 0 else f"block {block}: step-{block} "
                "states", ha="center", fontsize=8)
    ax.set_xlabel("key position within its block")
    ax.set_ylabel("query position")
    ax.set_title(f"{n} tokens, {len(starts) + 1} documents, TTT step {mask.step_index(step)} (blue: attended)",
                 fontsize=9, pad=26)
    fig.tight_layout()
    return fig
