"""The rehearsal's figure: speculators' trainer and the session, loss per TTT step, one line each (a ``Figure``,
built without pyplot)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def plot_side_by_side(table: pd.DataFrame, title: str | None = None) -> Figure:
    """Left: the loss of each TTT step against the step, speculators' trainer as lines, the session as markers on
    them. Right: |Δloss| per step and TTT step (log scale; an exact match is drawn at the axis floor)."""
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    floor = 1e-12
    for k, rows in table.groupby("ttt_step"):
        line, = left.plot(rows["step"], rows["speculators"], label=f"speculators, TTT step {k}")
        left.plot(rows["step"], rows["eagle3kit"], "o", mfc="none", color=line.get_color(),
                  label=f"TrainSession, TTT step {k}")
        right.plot(rows["step"], rows["abs_diff"].clip(lower=floor), "o-", color=line.get_color(),
                   label=f"TTT step {k}")
    left.set(xlabel="step", ylabel="KL loss", title="loss per TTT step")
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.legend(fontsize=7, ncol=2)
    right.set(xlabel="step", ylabel="|Δ loss|", yscale="log", ylim=(floor / 2, None),
              title="difference (exact match at the floor)")
    right.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return fig
