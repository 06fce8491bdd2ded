"""From τ to speed: what a draft buys, from the cost of one draft step and one verifier step.

One round of chain speculation with ``k`` draft tokens, for a batch of ``B`` sequences:

* without the draft, one verifier step reads ``B`` tokens and commits ``B``: it costs ``t_plain``;
* with it, ``k`` draft steps (``t_draft`` each) and one verifier step over ``B (k + 1)`` tokens (``t_verify``), plus
  what the engine does besides the two models (``t_other``: scheduling, sampling, input preparation), commit
  ``B τ`` tokens, τ = 1 + Σ_i p_i with p_i the share of rounds whose draft token i was accepted.

So the speedup is ``S = τ · t_plain / (t_verify + k · t_draft + t_other)`` and the draft pays when τ exceeds the
break-even ``(t_verify + k · t_draft + t_other) / t_plain``. The costs come from a measurement (vLLM's CPU build here:
:func:`step_costs` of :mod:`eagle3kit.evaluate.vllm.worker`'s step records) or from counted bytes and FLOPs
(:mod:`eagle3kit.plan.serving_speed`, for a GPU).

Tokens/s side by side are only compared when they were measured the same way (:class:`Measured`,
:func:`speed_table`): same engine, batch, prompts, tokens and warmth.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure


def tau_from_positions(accepted_per_position: list[float]) -> float:
    """τ = 1 + Σ_i p_i from the cumulative acceptance per draft position (vLLM's per-position counters / drafts)."""
    return 1.0 + float(sum(accepted_per_position))


def round_seconds(k: int, verify_s: float, draft_s: float, other_s: float = 0.0) -> float:
    """One speculative round: the verifier over k + 1 tokens a sequence, k draft steps, the engine's other work."""
    return verify_s + k * draft_s + other_s


def speedup(tau: float, plain_s: float, verify_s: float, draft_s: float, k: int, other_s: float = 0.0) -> float:
    """Tokens per second with the draft over tokens per second without it: τ · t_plain / t_round."""
    return tau * plain_s / round_seconds(k, verify_s, draft_s, other_s)


def break_even_tau(plain_s: float, verify_s: float, draft_s: float, k: int, other_s: float = 0.0) -> float:
    """The τ at which the draft neither helps nor hurts (above k + 1 it can never pay)."""
    return round_seconds(k, verify_s, draft_s, other_s) / plain_s


# ----------------------------------------------------------------------------------------------- measured costs
@dataclass(frozen=True)
class StepCosts:
    """Median costs (seconds) of an engine's decode steps at its full batch, from per-step records."""

    batch: int  # sequences in the step
    tokens: int  # tokens the verifier read (batch x (k + 1) with a draft)
    step_s: float  # the whole engine step
    verifier_s: float  # verifier forward + logits
    draft_s: float  # the drafter's k forwards, logits and input preparation
    draft_forwards: int
    n_steps: int  # decode steps the medians are taken over

    @property
    def other_s(self) -> float:
        """What the engine spends besides the two models: scheduling, sampling, verification bookkeeping."""
        return self.step_s - self.verifier_s - self.draft_s

    @property
    def draft_step_s(self) -> float:
        """One draft step (a draft forward with its share of the preparation)."""
        return self.draft_s / self.draft_forwards if self.draft_forwards else 0.0


def step_costs(steps: list[dict], k: int = 0) -> StepCosts:
    """Medians over the decode steps that ran the full batch (no prompt tokens: ``tokens <= reqs * (k + 1)``).

    ``steps``: the records of :class:`eagle3kit.evaluate.vllm.worker.StepTimer` (reqs, tokens, step_s, verifier_s,
    draft_s, draft_forwards); ``k``: draft tokens per round (0 without a draft).
    """
    decode = [s for s in steps if 0 < s["tokens"] <= s["reqs"] * (k + 1)]
    if not decode:
        raise ValueError("no decode steps in the records (every step read prompt tokens)")
    full = max(s["reqs"] for s in decode)
    rows = [s for s in decode if s["reqs"] == full]

    def med(key: str) -> float:
        return statistics.median(s[key] for s in rows)

    return StepCosts(batch=full, tokens=round(med("tokens")), step_s=med("step_s"), verifier_s=med("verifier_s"),
                     draft_s=med("draft_s"), draft_forwards=round(med("draft_forwards")), n_steps=len(rows))


@dataclass(frozen=True)
class CpuPrediction:
    """The speedup the measured step costs and τ imply, beside the speedup measured end to end."""

    tau: float
    k: int
    plain: StepCosts
    draft: StepCosts
    measured_tokens_per_s: dict[str, float]  # "draft" / "plain", the whole generation
    plain_seconds: float  # the plain run's whole generation
    plain_decode_s: float  # of which its decode steps (the rest: prompts, the engine between steps)

    @property
    def predicted(self) -> float:
        """τ · t_plain / (t_verify(k+1) + k · t_draft + t_other): the decode speedup the step costs imply."""
        return speedup(self.tau, self.plain.step_s, self.draft.verifier_s, self.draft.draft_step_s, self.k,
                       self.draft.other_s)

    @property
    def predicted_tokens_per_s(self) -> float:
        """Tokens/s with the draft the costs predict for the whole generation: the plain run's decode steps sped up
        by :attr:`predicted`, the rest (prompt steps, the engine between steps) as measured without the draft."""
        tokens = self.measured_tokens_per_s["plain"] * self.plain_seconds
        rest = self.plain_seconds - self.plain_decode_s
        return tokens / (rest + self.plain_decode_s / self.predicted)

    @property
    def measured(self) -> float:
        return self.measured_tokens_per_s["draft"] / self.measured_tokens_per_s["plain"]

    @property
    def break_even(self) -> float:
        return break_even_tau(self.plain.step_s, self.draft.verifier_s, self.draft.draft_step_s, self.k,
                              self.draft.other_s)

    @property
    def verify_ratio(self) -> float:
        """A verifier step over k + 1 tokens a sequence against one over 1 token (1 when memory bound)."""
        return self.draft.verifier_s / self.plain.verifier_s

    def table(self) -> pd.DataFrame:
        """Each cost and the speedup they imply, in milliseconds, labelled measured or derived."""
        p, d = self.plain, self.draft
        rows = [
            (f"verifier step, {p.batch} x 1 tokens (no draft)", p.verifier_s * 1e3, "measured"),
            (f"verifier step, {d.batch} x {self.k + 1} tokens (checks k = {self.k})", d.verifier_s * 1e3, "measured"),
            ("draft step (one draft forward)", d.draft_step_s * 1e3, "measured"),
            ("engine's other work per step (no draft: scheduling, sampling, outputs)", p.other_s * 1e3, "measured"),
            ("engine's other work per round (with the draft: the same, plus checking each sequence's k draft "
             "tokens against the verifier's and its bookkeeping; neither model's forward)", d.other_s * 1e3,
             "measured"),
            ("plain step", p.step_s * 1e3, "measured"),
            ("speculative round", d.step_s * 1e3, "measured"),
            ("τ (vLLM's counters, 1 + Σ per-position acceptance)", self.tau, "measured"),
            ("break-even τ", self.break_even, "derived"),
            ("decode speedup the step costs and τ imply", self.predicted, "derived"),
            ("tokens/s with the draft, predicted (whole generation)", self.predicted_tokens_per_s, "derived"),
            ("tokens/s with the draft, measured", self.measured_tokens_per_s["draft"], "measured"),
            ("tokens/s without it, measured", self.measured_tokens_per_s["plain"], "measured"),
        ]
        return pd.DataFrame(rows, columns=["what", "value (ms, or as named)", "kind"]).round(3)

    def why(self, elsewhere_break_even: float | None = None, elsewhere: str = "",
            one_at_a_time: dict | None = None, measured_alone: tuple[float, int] | None = None) -> str:
        """Two sentences: why the draft does (not) pay here, and what would have to change. ``one_at_a_time``: the
        batch-1 row of this CPU in bench/speedup.py's results (:func:`bench_row`), ``elsewhere``: a GPU prediction.
        ``measured_alone`` = (speedup, prompts): this run's own batch-1 measurement, said instead of the bench's row
        (a run that measured batch 1 is not told what another run measured there)."""
        p, d = self.plain, self.draft
        extra = (self.k * d.draft_step_s + d.other_s) / p.step_s
        beyond = (f"more than the k + 1 = {self.k + 1} a round can give" if self.break_even > self.k + 1
                  else f"of at most {self.k + 1}")
        first = (f"Here a verifier step over k + 1 = {self.k + 1} tokens of {d.batch} sequences costs "
                 f"{self.verify_ratio:.1f}x a plain step, and the k draft steps with the round's bookkeeping add "
                 f"{extra:.1f} plain steps more, so the draft pays only above τ {self.break_even:.2f} ({beyond}); "
                 f"this one reaches τ {self.tau:.2f}.")
        cases = []
        if one_at_a_time and not measured_alone:
            cases.append(f"one sequence at a time on this same CPU (bench/speedup.py's draft, at τ "
                         f"{one_at_a_time['τ']:.2f}, measured {one_at_a_time['published']:.2f}x plain speed there; "
                         f"break-even τ {one_at_a_time['break-even τ']:.2f})")
        if elsewhere_break_even is not None:
            cases.append(f"{elsewhere} (break-even τ {elsewhere_break_even:.2f})")
        where = f": memory-bound decoding, as {' or '.join(cases)}" if cases else " (memory-bound decoding)"
        second = (f"For it to pay, a round must cost less than τ plain steps, so the verifier must check k + 1 tokens "
                  f"for about the price of one{where}, not {d.batch} sequences on these compute-bound cores.")
        if not measured_alone:
            return f"{first} {second}"
        ratio, n = measured_alone
        third = (f"One sequence at a time on this CPU, this run measured {ratio:.2f}x plain speed ({n} prompts, a "
                 "first look with no interval)")
        return f"{first} {second} {third}."


CPU_POINTS = Path(__file__).with_name("speedup_cpu.json")  # package data: this CPU's rows, written by bench/speedup.py
MEASURED_HERE = "measured here"  # the ``source`` of those rows


def write_cpu_points(rows: list[dict], path: str | os.PathLike = CPU_POINTS) -> None:
    """Keep bench/speedup.py's rows measured on this CPU (``source`` :data:`MEASURED_HERE`) as package data."""
    mine = [r for r in rows if r.get("source") == MEASURED_HERE]
    Path(path).write_text(json.dumps({"rows": mine}, indent=1, default=str) + "\n")


def bench_row(batch: int, path: str | os.PathLike = CPU_POINTS) -> dict | None:
    """This CPU's row at ``batch`` in bench/speedup.py's measurements (medians over its repeats), None when absent."""
    if not Path(path).exists():
        return None
    rows = json.loads(Path(path).read_text())["rows"]
    return next((r for r in rows if r.get("source") == MEASURED_HERE and r.get("batch") == batch), None)


def cpu_prediction(steps: dict[str, list[dict]], k: int, accepted_per_position: list[float],
                   tokens_per_s: dict[str, float], seconds: dict[str, float]) -> CpuPrediction:
    """:class:`CpuPrediction` from a vLLM check's step records (``"draft"``/``"plain"``), counters and times."""
    decode = sum(s["step_s"] for s in steps["plain"] if 0 < s["tokens"] <= s["reqs"])
    return CpuPrediction(tau_from_positions(accepted_per_position), k, step_costs(steps["plain"], 0),
                         step_costs(steps["draft"], k), dict(tokens_per_s), seconds["plain"], decode)


def plot_round(pred: CpuPrediction) -> Figure:
    """A plain step against a speculative round, by part, each divided by the tokens it commits per sequence."""
    fig = Figure(figsize=(8, 2.6))
    ax = fig.subplots()
    p, d = pred.plain, pred.draft
    bars = {"plain step (1 token)": [p.verifier_s, 0.0, p.other_s],
            f"round, k={pred.k} (τ = {pred.tau:.2f} tokens)": [d.verifier_s, d.draft_s, d.other_s]}
    for row, parts in enumerate(bars.values()):
        left = 0.0
        for j, (name, value) in enumerate(zip(("verifier", "draft", "engine's other work"), parts, strict=True)):
            ax.barh(row, value * 1e3, left=left, color=f"C{j}", label=name if row == 1 else None)
            left += value * 1e3
        per = left / (1 if row == 0 else pred.tau)
        ax.text(left, row, f"  {per:.0f} ms a token a sequence", va="center", fontsize=8)
    ax.set_yticks(range(len(bars)), list(bars), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.5 * max(d.step_s, p.step_s) * 1e3)
    ax.set_xlabel(f"ms per engine step, batch {d.batch} (medians)")
    ax.set_title("Where a step goes in vLLM's CPU build")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------- equal footing
@dataclass(frozen=True)
class Measured:
    """A tokens/s figure and how it was measured: only figures of the same kind stand side by side."""

    tokens_per_s: float
    engine: str  # e.g. "vLLM 0.32 (CPU build)", "eagle3kit decode loop"
    batch: int  # sequences decoded together
    prompts: int
    new_tokens: int  # per prompt, at most
    warm: bool = True  # engine built and warmed before the clock started

    @property
    def kind(self) -> tuple:
        return self.engine, self.batch, self.prompts, self.new_tokens, self.warm


SPEED_COLUMNS = ["measurement", "engine", "batch", "prompts", "new tokens", "tokens/s with the draft",
                 "tokens/s without it", "speedup"]


def speed_table(rows: dict[str, tuple[Measured, Measured]]) -> pd.DataFrame:
    """One row per measurement pair (with the draft, without it), refusing a pair measured two different ways."""
    out = []
    for name, (draft, plain) in rows.items():
        if draft.kind != plain.kind:
            raise ValueError(f"{name}: tokens/s with the draft {draft.kind} and without it {plain.kind} were not "
                             "measured the same way (engine, batch, prompts, tokens, warm); they cannot stand side "
                             "by side")
        out.append({"measurement": name, "engine": draft.engine, "batch": draft.batch, "prompts": draft.prompts,
                    "new tokens": draft.new_tokens, "tokens/s with the draft": round(draft.tokens_per_s, 1),
                    "tokens/s without it": round(plain.tokens_per_s, 1),
                    "speedup": round(draft.tokens_per_s / plain.tokens_per_s, 3)})
    return pd.DataFrame(out, columns=SPEED_COLUMNS)
