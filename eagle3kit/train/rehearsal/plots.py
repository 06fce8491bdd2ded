"""The rehearsal's figure: speculators' trainer and the session, loss per TTT step, one line each (a ``Figure``,
built without pyplot)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator


def plot_side_by_side(table: pd.DataFrame, title: str | None = None) -> Figure:
    """Left: the loss of each TTT step against the step, speculators' trainer as lines, the session as circles on
    them (the legend beside the axes, off the data). Right, only where some difference is not 0: |Δ loss| per step
    and TTT step on a log scale (an exact match, 0, has no place on it: the title counts those). Where every loss is
    bit-identical there is no right panel; the title says so."""
    differ = table[table["abs_diff"] > 0]
    fig = Figure(figsize=(11 if len(differ) else 7.5, 3.4), layout="constrained")
    axes = fig.subplots(1, 2 if len(differ) else 1, squeeze=False)[0]
    left = axes[0]
    colours = {}
    for k, rows in table.groupby("ttt_step"):
        line, = left.plot(rows["step"], rows["speculators"], marker=".", label=f"TTT step {k}")
        colours[k] = line.get_color()
        left.plot(rows["step"], rows["eagle3kit"], "o", mfc="none", ms=9, color=line.get_color())
    left.set(xlabel="step", ylabel="KL loss", title="loss per TTT step")
    how = [Line2D([], [], color="black", marker=".", label="speculators' trainer"),
           Line2D([], [], color="black", marker="o", mfc="none", ms=9, ls="none", label="TrainSession")]
    left.legend(handles=[*left.get_legend_handles_labels()[0], *how], fontsize=7, loc="upper left",
                bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    steps = sorted(table["step"].unique())
    for ax in axes:
        if len(steps) <= 12:  # a short rehearsal: every step its tick (one step would get fractional ticks)
            ax.set_xticks(steps)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    exact = len(table) - len(differ)
    if len(differ):
        right = axes[1]
        for k, rows in differ.groupby("ttt_step"):
            right.plot(rows["step"], rows["abs_diff"], "o-", color=colours[k], label=f"TTT step {k}")
        right.set(xlabel="step", ylabel="|Δ loss|", yscale="log",
                  title=f"difference where not 0 ({exact} of {len(table)} exactly equal)")
    verdict = "every loss bit-identical (|Δ loss| = 0)" if not len(differ) else None
    if title or verdict:
        fig.suptitle(": ".join(filter(None, [title, verdict])))
    return fig
