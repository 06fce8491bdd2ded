"""Figures of the probe's measured matrix (:func:`eagle3kit.doctor.probe.matrix.probe`); each returns a Figure."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure


def plot_timings(matrix: pd.DataFrame) -> Figure:
    """Horizontal bars of seconds per cell; failed cells are labelled with their status instead of a bar."""
    fig = Figure(figsize=(8, 0.9 + 0.32 * len(matrix)))
    ax = fig.subplots()
    first_len = matrix.seq_len.iloc[0]
    labels = [f"{r.backend} · {r.mode}" + (f" · {r.seq_len} tok" if r.seq_len != first_len else "")
              for r in matrix.itertuples()]
    secs = [r.seconds if r.status == "ok" else 0.0 for r in matrix.itertuples()]
    ys = range(len(matrix))[::-1]
    ax.barh(list(ys), secs, color=["tab:green" if r.status == "ok" else "tab:red" for r in matrix.itertuples()])
    for y, r in zip(ys, matrix.itertuples(), strict=True):
        text = f"{r.seconds:.2f}s" if r.status == "ok" else r.status
        ax.text(max(secs) * 0.01 + (r.seconds if r.status == "ok" else 0), y, text, va="center", fontsize=8,
                color="black" if r.status == "ok" else "tab:red")
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.set_xlabel("seconds per draft step (median)")
    ax.set_xlim(0, max(secs + [1e-3]) * 1.2)
    ax.set_title("Attention backends on this device (green: ran; red label: failed)")
    fig.tight_layout()
    return fig
