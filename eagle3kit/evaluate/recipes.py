"""What the recipe lab (``bench/recipe.py``) measured: τ per CPU minute for each lever of the demo's recipe, and the
best recipe's τ against minutes. Notebook 06 draws the frontier and marks its own run on it; ``doctor --why-tau``
names the strongest lever with its measured effect. Nothing here forecasts GPU-scale τ: the rows are CPU-scale runs
of the demo verifier, scored on MT-bench's first turns and on held-out ShareGPT prompts.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eagle3kit.atomic import write_text
from eagle3kit.evaluate.scores import PromptScore, interval, summarise
from eagle3kit.tables import markdown_table

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "recipe.json"
REFERENCE = "demo-before"  # the row every Δ is taken against: the demo's recipe before the lab
SETS = ("mt-bench", "held-out")


@dataclass(frozen=True)
class Tau:
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


@dataclass(frozen=True)
class LabRow:
    """One recipe as the lab ran it: its minutes (data, training), steps and τ on each set."""

    name: str
    lever: str
    what: str
    data_minutes: float
    train_minutes: float
    steps: int
    epochs: float
    tau: dict[str, Tau]
    train_measured: float = float("nan")  # the training's wall minutes as measured (more when the machine was busy)
    per_prompt: dict = field(default_factory=dict, compare=False)  # set -> {prompt id: τ}, for paired differences

    @property
    def minutes(self) -> float:
        return self.data_minutes + self.train_minutes

    @classmethod
    def from_result(cls, r: dict) -> LabRow:
        taus, per_prompt = {}, {}
        for name, records in r["records"].items():
            scored = [PromptScore(x["id"], x["category"], x["rounds"], x["accepted"]) for x in records]
            overall = summarise(scored).iloc[-1]
            taus[name] = Tau(float(overall["tau"]), float(overall["low"]), float(overall["high"]))
            per_prompt[name] = {x.id: x.tau for x in scored if x.rounds}
        minutes = r["minutes"]  # training: the steps at the calibrated seconds a step (what the budget counts)
        return cls(r["name"], r["lever"], r["what"], minutes["data"], minutes.get("train_planned", minutes["train"]),
                   r["steps"], r["epochs"], taus, minutes["train"], per_prompt)


def paired_gain(row: LabRow, ref: LabRow, on: str) -> Tau | None:
    """Mean τ(row) - τ(ref) over the prompts both scored, with a 95 % interval from bootstrapping those prompts (the
    same prompts for both recipes, so the difference is measured tighter than either τ)."""
    a, b = row.per_prompt.get(on, {}), ref.per_prompt.get(on, {})
    both = sorted(set(a) & set(b))
    if len(both) < 2:
        return None
    diffs = np.array([a[i] - b[i] for i in both])
    low, high = interval(diffs)
    return Tau(float(diffs.mean()), low, high)


def row_line(row: LabRow) -> str:
    return (f"{row.name:<14} {row.minutes:5.1f} min ({row.data_minutes:.1f} data, {row.steps} steps, "
            f"{row.epochs:.1f} epochs): " + ", ".join(f"{s} τ {t}" for s, t in row.tau.items()))


def table(rows: list[LabRow], reference: str = REFERENCE) -> pd.DataFrame:
    """One row per recipe: lever, minutes, steps, epochs, τ per set with its interval, Δ against ``reference``."""
    ref = next((r for r in rows if r.name == reference), None)
    out = []
    for r in rows:
        line = {"recipe": r.name, "lever": r.lever, "what": r.what, "minutes": round(r.minutes, 1),
                "data min": round(r.data_minutes, 1), "steps": r.steps, "epochs": r.epochs,
                "train min measured": round(r.train_measured, 1)}
        for s in SETS:
            if s in r.tau:
                line[f"τ {s}"] = str(r.tau[s])
                gain = paired_gain(r, ref, s) if ref is not None and r is not ref else None
                line[f"Δ {s} [95% CI, paired]"] = f"{gain.mean:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}]" if gain \
                    else ""
        out.append(line)
    return pd.DataFrame(out)


def write_lab(path: str | os.PathLike, results: list[dict], frontier: list[dict], **context: object) -> None:
    """The lab's raw results (per-prompt records included) as JSON, and its table as Markdown beside it."""
    path = Path(path)
    write_text(path, json.dumps({"context": context, "rows": results, "frontier": frontier}) + "\n")
    rows = [LabRow.from_result(r) for r in results]
    shown = {k: v for k, v in context.items() if k != "regeneration"}
    md = ["# The recipe lab (`bench/recipe.py`)", "",
          f"Context: {json.dumps(shown)}. τ: mean over prompts with a 95 % bootstrap interval (k = 3, greedy, "
          f"64 new tokens); Δ against `{REFERENCE}`.", "", markdown_table(table(rows))]
    regen = context.get("regeneration")
    if regen:
        md += ["", "## Who writes the replies (`bench/regeneration_engines.py`)", "",
               f"{regen['prompts']} prompts of the demo's regeneration; this CPU's matmul peak: "
               f"{regen['peak_gflops']} GFLOP/s.", "", markdown_table(pd.DataFrame(regen["rows"]))]
    if frontier:
        md += ["", "## The best recipe against minutes", "",
               markdown_table(table([LabRow.from_result(r) for r in frontier], reference=""))]
    write_text(path.with_suffix(".md"), "\n".join(md) + "\n")


def read_lab(path: str | os.PathLike = RESULTS) -> tuple[list[LabRow], list[LabRow], dict]:
    """(rows, frontier, context) of a lab run; ``FileNotFoundError`` names the bench to run."""
    if not Path(path).exists():
        raise FileNotFoundError(f"No recipe-lab results at {path}; run `python bench/recipe.py`.")
    raw = json.loads(Path(path).read_text())
    return ([LabRow.from_result(r) for r in raw["rows"]], [LabRow.from_result(r) for r in raw["frontier"]],
            raw.get("context", {}))


def frontier_line(frontier: list[LabRow], on: str = "held-out") -> str | None:
    """One sentence: τ of the lab's best recipe against the CPU minutes spent on it (its data growing with them)."""
    points = sorted((r for r in frontier if on in r.tau), key=lambda r: r.minutes)
    if len(points) < 2:
        return None
    taus = " / ".join(f"{r.tau[on].mean:.3f}" for r in points)
    minutes = " / ".join(f"{round(r.minutes, 1):g}" for r in points)
    return (f"The lab's best recipe, its data and steps growing with the budget, reached τ on {on} {taus} at "
            f"{minutes} CPU minutes (bench/results/recipe.md).")


def strongest_lever(rows: list[LabRow], on: str = "held-out", base: str = "base") -> str | None:
    """One sentence: the lever whose recipe gained most τ over ``base`` at the same budget, with its measured effect
    (and the interval it sits in), or None without a base row."""
    ref = next((r for r in rows if r.name == base), None)
    if ref is None or on not in ref.tau:
        return None
    peers = [r for r in rows if r.lever not in ("reference", "best") and on in r.tau]
    if not peers:
        return None
    top = max(peers, key=lambda r: r.tau[on].mean)
    gain = top.tau[on].mean - ref.tau[on].mean
    return (f"The recipe lab's strongest lever at {ref.minutes:.0f} CPU minutes was {top.lever} ({top.what}): τ on "
            f"{on} {top.tau[on]} against {ref.tau[on].mean:.3f} for the lab's base recipe at the same budget "
            f"({gain:+.3f}; bench/results/recipe.md). Measured on the demo verifier at CPU scale, not a forecast "
            "for a GPU run.")


def plot_frontier(frontier: list[LabRow], here: tuple[float, float] | None = None, bar: float | None = None,
                  on: str = "held-out") -> Figure:
    """τ (``on`` and MT-bench, with intervals) against the minutes that made the draft, for the best recipe at
    several budgets; ``here`` = (minutes, τ) of this run, ``bar`` = the τ a planned GPU run needs to pay."""
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    pts = sorted(frontier, key=lambda r: r.minutes)
    for s, style in ((on, "o-"), ("mt-bench", "s--")):
        shown = [r for r in pts if s in r.tau]
        if not shown:
            continue
        xs = [r.minutes for r in shown]
        ax.errorbar(xs, [r.tau[s].mean for r in shown],
                    yerr=[[r.tau[s].mean - r.tau[s].low for r in shown], [r.tau[s].high - r.tau[s].mean
                                                                         for r in shown]],
                    fmt=style, capsize=3, label=f"best recipe, {s}")
    if here is not None:
        ax.plot([here[0]], [here[1]], "*", markersize=14, color="tab:red", label="this run")
    if bar is not None:
        ax.axhline(bar, color="tab:green", ls=":", label=f"τ the planned GPU run needs ({bar:.2f})")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="CPU minutes to make the draft (data + training)", ylabel="τ (tokens per verifier step)",
           title="τ against minutes: the recipe lab's best recipe")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
