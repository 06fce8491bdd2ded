"""What the recipe lab (``bench/recipe.py``) measured: τ per CPU minute for each lever of the demo's recipe, the
strongest levers checked at a second budget, and the best recipe's τ against minutes. Notebook 06 draws the frontier
and marks its own run on it; ``doctor --why-tau`` names the strongest lever that held at both budgets. Nothing here
forecasts GPU-scale τ: the rows are CPU-scale runs of the demo verifier, scored on MT-bench's first turns and on
held-out ShareGPT prompts.

The package reads the lab's summary, :data:`SUMMARY` (package data, written by ``bench/recipe.py``): each row's τ
with its interval and its Δ paired against the reference at the same budget. The per-prompt records behind them stay
with the bench (``bench/results/recipe.json``); :meth:`LabRow.from_result` reads those.
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

SUMMARY = Path(__file__).with_name("recipe_lab.json")
REFERENCE = "base"  # the row every Δ is taken against, at each budget
SETS = ("mt-bench", "held-out")
# what ``frontier_before`` is: round 1's frontier, made with another recipe and the dense step
BEFORE_HOST = "a CPU with native bf16, with the older dense training step and its own recipe"
BEFORE_LABEL = "the lab's first round: older step, own recipe, a CPU with native bf16"


@dataclass(frozen=True)
class Tau:
    mean: float
    low: float
    high: float

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"

    @property
    def signed(self) -> str:
        """A paired Δ with its 95 % interval, signed: an interval that holds 0 is no measured effect."""
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"

    @property
    def above_zero(self) -> bool:
        return self.low > 0


@dataclass(frozen=True)
class LabRow:
    """One recipe as the lab ran it: its budget and minutes (data, training), steps and τ on each set; ``delta``:
    τ against the reference at the same budget, paired over the same prompts."""

    name: str
    lever: str
    what: str
    data_minutes: float
    train_minutes: float
    steps: int
    epochs: float
    tau: dict[str, Tau]
    train_measured: float = float("nan")  # the training's wall minutes as measured (more when the machine was busy)
    budget: float | None = None
    delta: dict[str, Tau] = field(default_factory=dict)
    prompts: dict[str, int] = field(default_factory=dict)  # set -> prompts scored
    per_prompt: dict = field(default_factory=dict, compare=False)  # set -> {prompt id: τ} (raw results only)
    conversations: int | None = None  # the verifier's replies it trained on (None: a summary written before)

    @property
    def minutes(self) -> float:
        return self.data_minutes + self.train_minutes

    @classmethod
    def from_result(cls, r: dict) -> LabRow:
        """A row of the bench's raw results (every prompt's record)."""
        taus, per_prompt = {}, {}
        for name, records in r["records"].items():
            scored = [PromptScore(x["id"], x["category"], x["rounds"], x["accepted"]) for x in records]
            overall = summarise(scored).iloc[-1]
            taus[name] = Tau(float(overall["tau"]), float(overall["low"]), float(overall["high"]))
            per_prompt[name] = {x.id: x.tau for x in scored if x.rounds}
        minutes = r["minutes"]  # training: the steps at the calibrated seconds a step (what the budget counts)
        return cls(r["name"], r["lever"], r["what"], minutes["data"], minutes.get("train_planned", minutes["train"]),
                   r["steps"], r["epochs"], taus, minutes["train"], r.get("budget"),
                   prompts={name: len(records) for name, records in r["records"].items()}, per_prompt=per_prompt,
                   conversations=r.get("data", {}).get("n_conversations"))

    def with_delta(self, ref: LabRow | None) -> LabRow:
        """This row with its paired Δ against ``ref`` on every set both scored."""
        if ref is None or ref is self:
            return self
        gains = {s: g for s in self.tau if (g := paired_gain(self, ref, s)) is not None}
        return LabRow(**{**self.__dict__, "delta": gains})

    def to_summary(self) -> dict:
        return {"name": self.name, "lever": self.lever, "what": self.what, "budget": self.budget,
                "data_minutes": round(self.data_minutes, 2), "train_minutes": round(self.train_minutes, 2),
                "train_measured": round(self.train_measured, 2), "steps": self.steps, "epochs": self.epochs,
                "tau": {s: [round(t.mean, 4), round(t.low, 4), round(t.high, 4)] for s, t in self.tau.items()},
                "delta": {s: [round(t.mean, 4), round(t.low, 4), round(t.high, 4)] for s, t in self.delta.items()},
                "prompts": self.prompts, "conversations": self.conversations}

    @classmethod
    def from_summary(cls, d: dict) -> LabRow:
        taus = {s: Tau(*v) for s, v in d["tau"].items()}
        return cls(d["name"], d["lever"], d["what"], d["data_minutes"], d["train_minutes"], d["steps"], d["epochs"],
                   taus, d.get("train_measured", float("nan")), d.get("budget"),
                   {s: Tau(*v) for s, v in d.get("delta", {}).items()}, d.get("prompts", {}),
                   conversations=d.get("conversations"))


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


@dataclass
class Lab:
    """The lab's rows at its budget, the strongest levers again at a second budget (``checks``, with the reference),
    the best recipe at several budgets (``frontier``), the frontier before this round (``frontier_before``) and
    levers on top of the best recipe at a frontier budget (``beside``, each Δ paired against that point)."""

    rows: list[LabRow]
    checks: list[LabRow] = field(default_factory=list)
    frontier: list[LabRow] = field(default_factory=list)
    frontier_before: list[LabRow] = field(default_factory=list)
    context: dict = field(default_factory=dict)
    beside: list[LabRow] = field(default_factory=list)

    def to_summary(self) -> dict:
        return {"context": self.context, **{k: [r.to_summary() for r in getattr(self, k)]
                                            for k in ("rows", "checks", "frontier", "frontier_before", "beside")}}

    @classmethod
    def from_summary(cls, d: dict) -> Lab:
        return cls(*([LabRow.from_summary(r) for r in d.get(k, [])]
                     for k in ("rows", "checks", "frontier", "frontier_before")), context=d.get("context", {}),
                   beside=[LabRow.from_summary(r) for r in d.get("beside", [])])

    @property
    def frontier_machine(self) -> dict:
        """The CPU the frontier was measured on (``bench/recipe.py --keep-rows`` runs it apart from the rows)."""
        return self.context.get("frontier_machine") or self.context.get("machine", {})

    def held(self, on: str = "held-out") -> list[tuple[LabRow, LabRow]]:
        """(row, its check) for each lever whose paired gain over the reference was above zero at both budgets."""
        checks = {r.name: r for r in self.checks}
        return [(r, checks[r.name]) for r in self.rows
                if r.name in checks and on in r.delta and on in checks[r.name].delta
                and r.delta[on].above_zero and checks[r.name].delta[on].above_zero]


def with_deltas(rows: list[LabRow], reference: str = REFERENCE) -> list[LabRow]:
    """``rows`` with each one's paired Δ against the reference row of the same budget."""
    refs = {r.budget: r for r in rows if r.name == reference}
    return [r.with_delta(refs.get(r.budget)) for r in rows]


def table(rows: list[LabRow]) -> pd.DataFrame:
    """One row per recipe: lever, minutes, steps, epochs, τ per set with its interval, its paired Δ."""
    out = []
    for r in rows:
        line = {"recipe": r.name, "lever": r.lever, "what": r.what, "minutes": round(r.minutes, 1),
                "data min": round(r.data_minutes, 1), "steps": r.steps, "epochs": r.epochs,
                "train min measured": round(r.train_measured, 1)}
        for s in [s for s in SETS if s in r.tau] + [s for s in r.tau if s not in SETS]:
            line[f"τ {s}"] = str(r.tau[s])
            gain = r.delta.get(s)
            line[f"Δ {s} [95% CI, paired]"] = gain.signed if gain else ""
        out.append(line)
    return pd.DataFrame(out).fillna("")


def write_summary(lab: Lab, path: str | os.PathLike = SUMMARY) -> None:
    write_text(Path(path), json.dumps(lab.to_summary(), indent=1) + "\n")


def read_lab(path: str | os.PathLike = SUMMARY) -> Lab:
    """The lab's summary; ``FileNotFoundError`` names the bench to run."""
    if not Path(path).exists():
        raise FileNotFoundError(f"No recipe-lab summary at {path}; run `python bench/recipe.py`.")
    return Lab.from_summary(json.loads(Path(path).read_text()))


def frontier_line(frontier: list[LabRow], on: str = "held-out", beside: list[LabRow] | None = None) -> str | None:
    """One sentence: τ of the lab's frontier recipe against the CPU minutes spent on it (its data growing with them),
    and of each lever run on top of it (``beside``) at the same minutes."""
    points = sorted((r for r in frontier if on in r.tau), key=lambda r: r.minutes)
    if len(points) < 2:
        return None
    taus = " / ".join(f"{r.tau[on].mean:.3f}" for r in points)
    minutes = " / ".join(f"{round(r.minutes, 1):g}" for r in points)
    name = points[-1].name.split("*")[0]  # a point with its data scaled is named NAME*CONVERSATIONS
    line = f"The lab's frontier recipe ({name}) reached τ on {on} {taus} at {minutes} CPU minutes"
    first, last = points[0].tau[on], points[-1].tau[on]
    close = sum(a.tau[on].high >= b.tau[on].low for a, b in zip(points, points[1:], strict=False))
    if close:  # a trend is read across the range, not from one step to the next
        line += (f" (the intervals of {close} of its {len(points) - 1} neighbouring pairs overlap; the first and the "
                 f"last {'separate' if first.high < last.low else 'overlap too'})")
    for lever, rows in _levers_on_top(beside or [], on).items():
        line += (f"; with `{lever}` on top, {' / '.join(f'{r.tau[on].mean:.3f}' for r in rows)} at "
                 f"{' / '.join(f'{r.budget:g}' for r in rows)}")
    return line + " (bench/results/recipe.md)."


def _levers_on_top(beside: list[LabRow], on: str) -> dict[str, list[LabRow]]:
    """The lab's levers run on top of its frontier, by lever name (``NAME+LEVER*N`` -> ``LEVER``), each by budget."""
    out: dict[str, list[LabRow]] = {}
    for r in sorted((r for r in beside if on in r.tau and r.budget), key=lambda r: r.budget):
        out.setdefault(r.name.split("*")[0].split("+")[-1], []).append(r)
    return out


def strongest_lever(lab: Lab, on: str = "held-out") -> str | None:
    """One sentence: the lever with the largest paired gain over the reference among those that held at both
    budgets, with its measured effect at each; or that none held; None without checks at a second budget. Then each
    lever on top of the frontier whose gain over the frontier point of its minutes held at every budget it ran."""
    if not lab.checks:
        return None
    held = lab.held(on)
    budgets = sorted({r.budget for r in lab.rows + lab.checks if r.budget})
    if not held:
        line = (f"No lever of the recipe lab beat its base recipe on {on} with an interval above zero at both "
                f"{' and '.join(f'{b:g}' for b in budgets)} CPU minutes (bench/results/recipe.md).")
    else:
        row, check = max(held, key=lambda pair: pair[0].delta[on].mean)
        both = f"at both {row.budget:g} and {check.budget:g} CPU minutes"
        which = (f"the only one that held {both} was" if len(held) == 1 else
                 f"of the {len(held)} that held {both}, the largest mean gain (no ordering where intervals "
                 "overlap) was")
        line = (f"Of the recipe lab's levers, each against its base recipe, {which} {row.lever} ({row.what}): "
                f"τ on {on} "
                f"{row.delta[on].signed} and {check.delta[on].signed}, paired over "
                "the same prompts (bench/results/recipe.md).")
    for lever, rows in _levers_on_top(lab.beside, on).items():
        if all(r.delta.get(on) and r.delta[on].above_zero for r in rows):
            line += (f" On top of the frontier, against its point of the same minutes, `{lever}` held at every budget "
                     f"it ran: " + "; ".join(f"{r.delta[on].signed} at {r.budget:g}" for r in rows) + " minutes.")
    return line + " Measured on the demo verifier at CPU scale, not a forecast for a GPU run."


def evidence(lab: Lab, name: str, on: str = "held-out") -> str | None:
    """The lab's measurement of recipe ``name`` against its base, at each budget it ran (a clause), or None."""
    found = [r for r in lab.rows + lab.checks if r.name == name and on in r.delta]
    if not found:
        return None
    parts = [f"{r.delta[on].signed} at {r.budget:g} CPU minutes" for r in found]
    return (f"the recipe lab (bench/recipe.py: this verifier's draft trained many ways at equal CPU minutes) measured "
            f"`{name}`: τ on {on} {' and '.join(parts)} against its base recipe, the reference each of its levers "
            "changes in one thing (bench/results/recipe.md)")


def plot_frontier(frontier: list[LabRow], here: tuple[float, float] | None = None, bar: float | None = None,
                  on: str = "held-out", before: list[LabRow] | None = None, before_label: str = "before",
                  beside: list[LabRow] | None = None) -> Figure:
    """τ (``on`` and MT-bench, with intervals) against the minutes that made the draft, for the best recipe at
    several budgets; ``before``: the same recipe's frontier before (drawn faint); ``beside``: levers on top of it (a
    diamond each, named); ``here`` = (minutes, τ on MT-bench) of this run, on the lab's own prompts; ``bar`` = the τ a
    planned GPU run needs to pay."""
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax = fig.subplots()
    for points, suffix, alpha in ((before or [], f", {before_label}", 0.35), (frontier, "", 1.0)):
        pts = sorted(points, key=lambda r: r.minutes)
        for s, style in ((on, "o-"), ("mt-bench", "s--")):
            shown = [r for r in pts if s in r.tau]
            if not shown:
                continue
            ax.errorbar([r.minutes for r in shown], [r.tau[s].mean for r in shown],
                        yerr=[[r.tau[s].mean - r.tau[s].low for r in shown],
                              [r.tau[s].high - r.tau[s].mean for r in shown]],
                        fmt=style, capsize=3, alpha=alpha, label=f"best recipe, {s}{suffix}")
    for r in beside or []:
        lever = r.name.split("*")[0].split("+")[-1]
        for s, color in ((on, "tab:blue"), ("mt-bench", "tab:orange")):
            if s in r.tau:
                ax.errorbar([r.minutes], [r.tau[s].mean], yerr=[[r.tau[s].mean - r.tau[s].low],
                                                               [r.tau[s].high - r.tau[s].mean]],
                            fmt="D", color=color, mfc="white", capsize=3, label=f"+ {lever}, {s}")
    if here is not None:
        ax.plot([here[0]], [here[1]], "*", markersize=14, color="tab:purple",
                label="this run on MT-bench (the lab's prompts, this CPU's minutes)")
    if bar is not None:
        ax.axhline(bar, color="tab:green", ls=":", label=f"τ the planned GPU run needs ({bar:.2f})")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="CPU minutes to make the draft (data + training)", ylabel="τ (tokens per verifier step)",
           title="τ against minutes: the recipe lab's best recipe")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside the data, not on it
    return fig
