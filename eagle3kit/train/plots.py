"""Figures of a training run: loss, full and conditional accuracy per TTT step, and τ when it was measured live
(a batch's layout: :func:`eagle3kit.data.plots.plot_batch`).

Each function returns a ``matplotlib.figure.Figure`` built without pyplot (safe from a widget's worker thread) and
never calls ``plt.show``. ``full_acc_k``: share of loss-masked positions whose step-k draft token equals the
verifier's; ``cond_acc_k``: the same among positions whose steps 0..k-1 were all right (speculators' names).
Curves are drawn as TensorBoard draws them: a debiased exponential moving average over the raw values, faint behind.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from eagle3kit.train.live_tau import TAU_PROMPTS, tau_points

PANELS = (("loss", "KL loss"), ("full_acc", "full accuracy"), ("cond_acc", "conditional accuracy"))
SMOOTHING = 0.9  # EMA weight of the running value (TensorBoard's slider); 0 draws the raw values only
RAW_ALPHA = 0.25  # the raw values behind the smoothed line


def ttt_steps_in(history: Sequence[dict]) -> int:
    """How many TTT steps the records carry (``loss_0``, ``loss_1``, ...)."""
    if not history:
        return 0
    return sum(1 for k in history[0] if k.startswith("loss_") and k[5:].isdigit())


def ema(values: Sequence[float], weight: float = SMOOTHING) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average debiased for its zero start, so the first point is
    the first value (``s_t = weight * s_{t-1} + (1 - weight) * v_t``, shown as ``s_t / (1 - weight ** t)``).
    Non-finite values pass through and do not enter the average."""
    out = np.empty(len(values))
    last, n = 0.0, 0
    for i, v in enumerate(values):
        if not np.isfinite(v):
            out[i] = v
            continue
        last, n = weight * last + (1 - weight) * v, n + 1
        out[i] = last / (1 - weight ** n)
    return out


def plot_metrics(history: Sequence[dict], smoothing: float = SMOOTHING, title: str | None = None) -> Figure:
    """Loss, full accuracy and conditional accuracy per TTT step against the training step: per TTT step a line
    smoothed by :func:`ema` (``smoothing`` = its weight; 0: raw values only) over the raw values drawn faint."""
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing is the EMA weight, in [0, 1) (TensorBoard's slider), got {smoothing!r}.")
    tau_steps, taus = tau_points(list(history))
    fig = Figure(figsize=(14 if taus else 11, 3.2), layout="constrained")
    axes = fig.subplots(1, 4 if taus else 3, sharex=True)  # τ on the same steps as the loss: the whole run
    steps = np.array([r["step"] for r in history])
    if taus:
        _plot_tau(axes[3], tau_steps, taus, next((r.get(TAU_PROMPTS) for r in history if r.get(TAU_PROMPTS)), None))
    for ax, (key, label) in zip(axes, PANELS, strict=False):
        for k in range(ttt_steps_in(history)):
            values = np.array([r[f"{key}_{k}"] for r in history], dtype=float)
            name = f"TTT step {k}"
            raw, = ax.plot(steps, values, marker="." if len(steps) < 40 else None, lw=1,
                           alpha=RAW_ALPHA if smoothing else 1.0, label=f"_{name} raw" if smoothing else name)
            if smoothing:
                ax.plot(steps, ema(values, smoothing), color=raw.get_color(), lw=2, label=name)
        ax.set_title(label + (f" (EMA {smoothing:g})" if smoothing and history else ""))
        ax.set_xlabel("step")
        if key != "loss":
            ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    if history:
        axes[0].legend(fontsize=8)
    else:
        for ax in axes:
            ax.text(0.5, 0.5, "no steps yet", ha="center", va="center", transform=ax.transAxes, color="gray")
    if title:
        fig.suptitle(title)
    return fig


def _plot_tau(ax, steps: list[int], taus: list[float], prompts: int | None = None) -> None:
    """The live τ (:mod:`eagle3kit.train.live_tau`): simulated on ``prompts`` held-out prompts at the steps it was
    measured (a few: the run's headline τ is measured on more)."""
    from eagle3kit.evaluate.conventions import TAU_LABEL

    ax.plot(steps, taus, marker="o", color="tab:purple")
    said = f"{prompts} held-out prompt" + ("s" if prompts != 1 else "") if prompts else "held-out prompts"
    ax.set_title(f"{TAU_LABEL}\nlive, on {said}")
    ax.set_xlabel("step")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.grid(alpha=0.3)


def plot_step(record: dict) -> Figure:
    """One step's metrics as bars per TTT step (loss; full and conditional accuracy)."""
    n = ttt_steps_in([record])
    fig = Figure(figsize=(7, 2.8), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    x = np.arange(n)
    ax_loss.bar(x, [record[f"loss_{k}"] for k in range(n)], color="tab:red")
    ax_loss.set_title(f"step {record['step']}: loss")
    width = 0.38
    ax_acc.bar(x - width / 2, [record[f"full_acc_{k}"] for k in range(n)], width, label="full")
    ax_acc.bar(x + width / 2, [record[f"cond_acc_{k}"] for k in range(n)], width, label="conditional")
    ax_acc.set_ylim(0, 1)
    ax_acc.set_title("accuracy")
    ax_acc.legend(fontsize=8)
    for ax in (ax_loss, ax_acc):
        ax.set_xticks(x, [f"TTT {k}" for k in range(n)])
    return fig
