"""τ against the CPU minutes spent making the draft: the points ``bench/quality.py`` measures, and their plot.

A point is one run of the demo recipe (the verifier writes the replies, its hidden states are stored, the draft
trains, starting from the verifier's last layer) at one budget: ``n_conversations`` replies and ``steps`` steps.
Its minutes count everything that made the draft (data included); evaluation is timed apart.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

CURVE = Path(__file__).resolve().parents[2] / "bench" / "results" / "quality.json"  # what bench/quality.py wrote


@dataclass
class BudgetPoint:
    n_conversations: int
    steps: int
    tau: float  # simulated, with the bonus token, on the bench's fixed held-out prompts
    acceptance_per_pos: list[float]  # share of rounds whose draft token i was accepted
    seconds: dict[str, float] = field(default_factory=dict)  # regenerate / hidden_states / train (and evaluate)

    @property
    def minutes(self) -> float:
        """Minutes that made the draft: data generation and training (evaluation left out)."""
        return sum(v for k, v in self.seconds.items() if k != "evaluate") / 60

    @property
    def tau_gain_per_minute(self) -> float:
        """(τ - 1) per minute: the accepted tokens per verifier step each minute of CPU bought."""
        return (self.tau - 1) / self.minutes if self.minutes else float("nan")


def write_curve(points: list[BudgetPoint], path: str | os.PathLike, **context: object) -> None:
    """The points and how they were measured (machine, load, prompts) as JSON."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"context": context, "points": [asdict(p) for p in points]}, indent=2) + "\n")


def read_curve(path: str | os.PathLike = CURVE) -> tuple[list[BudgetPoint], dict]:
    """(points, context) from a file :func:`write_curve` wrote; ``FileNotFoundError`` names the bench to run."""
    if not Path(path).exists():
        raise FileNotFoundError(f"No τ-vs-budget curve at {path}; measure one with `python bench/quality.py`.")
    raw = json.loads(Path(path).read_text())
    return [BudgetPoint(**p) for p in raw["points"]], raw.get("context", {})


def best_per_minute(points: list[BudgetPoint]) -> BudgetPoint:
    """The point with the most τ gained per minute."""
    return max(points, key=lambda p: p.tau_gain_per_minute)


def plot_tau_vs_budget(points: list[BudgetPoint], here: tuple[float, float] | None = None,
                       here_label: str = "this run") -> Figure:
    """τ against minutes (left) and where the minutes went per point (right); ``here`` = (minutes, τ) of a run to
    place on the curve (e.g. the demo's)."""
    fig = Figure(figsize=(11, 3.6))
    ax, bars = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    pts = sorted(points, key=lambda p: p.minutes)
    ax.plot([p.minutes for p in pts], [p.tau for p in pts], "o-", label="bench/quality.py")
    for p in pts:
        ax.annotate(f"{p.n_conversations} conv\n{p.steps} steps", (p.minutes, p.tau), textcoords="offset points",
                    xytext=(4, -18), fontsize=7)
    if here is not None:
        ax.plot([here[0]], [here[1]], "*", markersize=14, color="tab:red", label=here_label)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="CPU minutes to make the draft (data + training)", ylabel="τ (tokens per verifier step)",
           title="acceptance length against budget")
    ax.legend(fontsize=8)
    stages = [k for k in ("regenerate", "hidden_states", "train") if any(k in p.seconds for p in pts)]
    bottom = [0.0] * len(pts)
    labels = [f"{p.n_conversations}/{p.steps}" for p in pts]
    for stage in stages:
        minutes = [p.seconds.get(stage, 0.0) / 60 for p in pts]
        bars.bar(labels, minutes, bottom=bottom, label=stage)
        bottom = [b + m for b, m in zip(bottom, minutes, strict=True)]
    bars.set(xlabel="conversations / steps", ylabel="minutes", title="where the time went")
    bars.legend(fontsize=8)
    fig.tight_layout()
    return fig
