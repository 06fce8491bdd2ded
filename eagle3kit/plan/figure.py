"""The plan as a figure: GPU memory per rank by part (the step as planned and with the other loss implementation)
against the GPU's usable memory, and the disk the hidden states take."""

from __future__ import annotations

import dataclasses

from matplotlib import colormaps
from matplotlib.figure import Figure

from eagle3kit.plan import memory
from eagle3kit.plan.gpu_plan import Plan


def plan_figure(plans: list[Plan]) -> Figure:
    """Stacked GPU memory per rank for each plan (planned loss and the other one) and its disk, side by side."""
    fig = Figure(figsize=(12, 0.9 * max(3, 2 * len(plans))))  # no pyplot: safe from a widget's thread, shown once
    ax, ax_disk = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    labels, stacks = [], []
    for p in plans:
        other = "eager" if p.step.loss_implementation == "fused" else "fused"
        for impl in (p.step.loss_implementation, other):
            parts = memory.memory_parts(p.dshape, dataclasses.replace(p.step, loss_implementation=impl))
            labels.append(f"{p.verifier}\n{impl} loss, T={p.step.total_seq_len}")
            stacks.append({k.replace(f" ({impl})", ""): v / 1e9 for k, v in parts.items()})
    names = list(stacks[0])
    colors = colormaps["tab10"].colors
    for row, stack in enumerate(stacks):
        left = 0.0
        for j, name in enumerate(names):
            ax.barh(row, stack[name], left=left, color=colors[j % 10], label=name if row == 0 else None)
            left += stack[name]
    for p in {p.gpu.name: p for p in plans}.values():
        ax.axvline(p.capacity / 1e9, color="k", ls="--", lw=1)
        ax.text(p.capacity / 1e9, -0.6, f"{p.gpu.name} usable ", fontsize=8, ha="right", va="bottom")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -1)
    ax.set_xlabel("GB per training rank")
    ax.set_title("GPU memory of one training step, by part")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    ax_disk.barh(range(len(plans)), [p.disk.total / 1e12 for p in plans], color="tab:gray")
    ax_disk.set_yticks(range(len(plans)), [f"{p.verifier}\n{p.samples:,} x {p.stats.mean_tokens:,.0f} tok"
                                           for p in plans], fontsize=8)
    ax_disk.invert_yaxis()
    ax_disk.set_xlabel("TB of hidden states (bf16)")
    ax_disk.set_title("disk")
    fig.tight_layout()
    return fig
