"""Figures of the probe's measured matrix (:func:`eagle3kit.doctor.probe.matrix.probe`); each returns a Figure."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from eagle3kit.doctor.probe.recommend import warm_ups


def plot_timings(matrix: pd.DataFrame) -> Figure:
    """Horizontal bars of seconds per cell (the median of its repeats); failed cells are labelled with their status
    instead of a bar. A cell whose repeats lie far apart (:func:`warm_ups`: a flex kernel's first call compiles) is
    hatched, and where the same kernel ran warm in another cell a black tick marks that cell's time on its bar."""
    warm = warm_ups(matrix)
    fig = Figure(figsize=(9 if warm else 8, 0.9 + 0.32 * len(matrix)))
    ax = fig.subplots()
    first_len = matrix.seq_len.iloc[0]
    labels = [f"{r.backend} · {r.mode}" + (f" · {r.seq_len} tok" if r.seq_len != first_len else "")
              for r in matrix.itertuples()]
    secs = [r.seconds if r.status == "ok" else 0.0 for r in matrix.itertuples()]
    ys = list(range(len(matrix))[::-1])
    bars = ax.barh(ys, secs, color=["tab:green" if r.status == "ok" else "tab:red" for r in matrix.itertuples()])
    for bar, y, (i, r) in zip(bars, ys, matrix.iterrows(), strict=True):
        text = f"{r.seconds:.2f}s" if r.status == "ok" else r.status
        if i in warm:
            bar.set(hatch="//", facecolor="none", edgecolor="tab:green")
            text += " with the first call's compile" if warm[i].compiles else " (repeats far apart)"
            if warm[i].warm is not None:
                ax.plot([warm[i].warm_seconds] * 2, [y - 0.4, y + 0.4], color="black", lw=2)
                text += f"\nwarm, as {warm[i].warm} (tick): {warm[i].warm_seconds:.2f}s"
        ax.text(max(secs) * 0.01 + (r.seconds if r.status == "ok" else 0), y, text, va="center", fontsize=8,
                color="black" if r.status == "ok" else "tab:red")
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlabel("seconds per draft step (median of the repeats)"
                  + ("\nhatched: repeats far apart (a flex kernel's compile, or a busy machine)" if warm else ""))
    ax.set_xlim(0, max(secs + [1e-3]) * (1.7 if warm else 1.2))
    ax.set_title("Attention backends on this device (green: ran; red label: failed)")
    fig.tight_layout()
    return fig
