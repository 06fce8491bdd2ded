"""τ per benchmark category, the way the field prints it: per-prompt records, then the mean over prompts with a 95 %
interval from bootstrapping prompts, per category and overall, for each engine that measured it.

A prompt's τ is 1 + accepted draft tokens / speculative rounds over its reply (the bonus token counted, as vLLM's
"mean acceptance length"). A category's τ is the mean of its prompts' τ; ``pooled`` is all its accepted tokens over
all its rounds, which is what vLLM's aggregate counters give. Prompts whose reply ended before a first round (the
verifier answered with its end token at once) have no τ and are left out of both, and counted.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eagle3kit.atomic import write_text
from eagle3kit.evaluate.acceptance import Acceptance
from eagle3kit.evaluate.benchmarks import BenchPrompt

OVERALL = "overall"
BOOTSTRAP = 2000  # resamples of the prompts for each interval
LEVEL = 0.95


@dataclass(frozen=True)
class PromptScore:
    """One prompt's speculative rounds and the draft tokens accepted over them, as one engine measured them."""

    id: str
    category: str
    rounds: int
    accepted: int

    @property
    def tau(self) -> float:
        return 1.0 + self.accepted / self.rounds if self.rounds else float("nan")


def from_simulation(prompts: list[BenchPrompt], parts: list[Acceptance]) -> list[PromptScore]:
    """Records from :func:`eagle3kit.evaluate.acceptance.simulate_each` (the decode walk of each prompt)."""
    return [PromptScore(p.id, p.category, len(a.walk_accepted), sum(a.walk_accepted))
            for p, a in zip(prompts, parts, strict=True)]


def from_vllm(prompts: list[BenchPrompt], histograms: list[list[int]]) -> list[PromptScore]:
    """Records from vLLM's per-request speculative-decoding metrics: ``histograms[i][j]`` = rounds of prompt i in
    which j draft tokens were accepted (``per_request_spec_decode_metrics="summary"``)."""
    return [PromptScore(p.id, p.category, sum(h), sum(j * n for j, n in enumerate(h)))
            for p, h in zip(prompts, histograms, strict=True)]


def interval(values: np.ndarray, seed: int = 0, n: int = BOOTSTRAP, level: float = LEVEL) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (prompts resampled with replacement)."""
    if len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n, len(values)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def pooled_interval(rounds: list[int], accepted: list[int], seed: int = 0, n: int = BOOTSTRAP,
                    level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` bootstrap interval of the pooled τ (1 + all accepted / all rounds), the prompts resampled: the
    interval of the τ vLLM's aggregate counters state."""
    r, a = np.asarray(rounds, dtype=float), np.asarray(accepted, dtype=float)
    if len(r) < 2 or not r.sum():
        return float("nan"), float("nan")
    pick = np.random.default_rng(seed).integers(0, len(r), size=(n, len(r)))
    taus = 1.0 + a[pick].sum(axis=1) / np.maximum(r[pick].sum(axis=1), 1.0)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(taus, tail)), float(np.percentile(taus, 100 - tail))


def _row(records: list[PromptScore], seed: int) -> dict[str, float]:
    scored = [r for r in records if r.rounds]
    taus = np.array([r.tau for r in scored])
    low, high = interval(taus, seed)
    rounds = sum(r.rounds for r in scored)
    return {"prompts": len(scored), "unscored": len(records) - len(scored),
            "tau": float(taus.mean()) if len(taus) else float("nan"), "low": low, "high": high,
            "pooled": 1.0 + sum(r.accepted for r in scored) / rounds if rounds else float("nan")}


def summarise(records: list[PromptScore], seed: int = 0) -> pd.DataFrame:
    """One row per category (in order of appearance) and ``overall``: prompts, τ, its interval, pooled τ."""
    order = list(dict.fromkeys(r.category for r in records))
    rows = {c: _row([r for r in records if r.category == c], seed) for c in order}
    if len(order) > 1:
        rows[OVERALL] = _row(records, seed)
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("category")


def score_table(by_engine: dict[str, list[PromptScore]], seed: int = 0) -> pd.DataFrame:
    """:func:`summarise` for each engine, side by side: columns ``<engine> τ``, ``<engine> low`` ... (numbers)."""
    parts = []
    for engine, records in by_engine.items():
        table = summarise(records, seed)
        parts.append(table.drop(columns=["prompts", "unscored"]).add_prefix(f"{engine} "))
    first = summarise(next(iter(by_engine.values())), seed)[["prompts"]]
    return pd.concat([first, *parts], axis=1)


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """``τ [low, high]`` strings per engine, for a terminal or a notebook."""
    out = table[["prompts"]].copy()
    for engine in dict.fromkeys(c.rsplit(" ", 1)[0] for c in table.columns if c != "prompts"):
        out[f"τ {engine} [95% CI]"] = [f"{t:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{t:.3f}"
                                       for t, lo, hi in table[[f"{engine} tau", f"{engine} low",
                                                               f"{engine} high"]].itertuples(index=False)]
        out[f"pooled {engine}"] = table[f"{engine} pooled"].round(3)
    return out


def half_split(records: list[PromptScore], splits: int = 1000, seed: int = 0) -> dict[str, float]:
    """How far the set's τ moves between two halves of its prompts: over random halvings (each category split in
    two, the prompts a category leaves over split together), the median and the 95th percentile of
    |τ(half A) - τ(half B)|. Fewer than two scored prompts: no halves (nan)."""
    rng = np.random.default_rng(seed)
    by_category: dict[str, list[float]] = {}
    for r in records:
        if r.rounds:
            by_category.setdefault(r.category, []).append(r.tau)
    n = sum(map(len, by_category.values()))
    if n < 2:
        return {"prompts": n, "median": float("nan"), "p95": float("nan")}
    gaps = []
    for _ in range(splits):
        a, b, left = [], [], []
        for taus in by_category.values():
            order = rng.permutation(len(taus))
            half = len(taus) // 2
            a += [taus[i] for i in order[:half]]
            b += [taus[i] for i in order[half:2 * half]]
            left += [taus[i] for i in order[2 * half:]]
        order = rng.permutation(len(left))
        a += [left[i] for i in order[:len(left) // 2]]
        b += [left[i] for i in order[len(left) // 2:2 * (len(left) // 2)]]
        gaps.append(abs(np.mean(a) - np.mean(b)))
    return {"prompts": n, "median": float(np.median(gaps)), "p95": float(np.percentile(gaps, 95))}


def plot_scores(table: pd.DataFrame, title: str = "τ per category") -> Figure:
    """Bars per category (and overall), one per engine, with the 95 % intervals as error bars."""
    engines = list(dict.fromkeys(c.rsplit(" ", 1)[0] for c in table.columns if c != "prompts"))
    fig = Figure(figsize=(max(6.0, 0.9 * len(table) + 2), 3.4))
    ax = fig.subplots()
    xs = np.arange(len(table))
    width = 0.8 / len(engines)
    for n, engine in enumerate(engines):
        tau, low, high = (table[f"{engine} {c}"].to_numpy() for c in ("tau", "low", "high"))
        err = np.nan_to_num(np.vstack([tau - low, high - tau]))
        ax.bar(xs + (n - (len(engines) - 1) / 2) * width, tau - 1, width, bottom=1, yerr=err, capsize=3,
               label=engine)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(xs, [f"{c}\n({int(p)})" for c, p in zip(table.index, table["prompts"], strict=True)], fontsize=8)
    ax.set_ylabel("τ (tokens per verifier step)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ordering(table: pd.DataFrame, engine: str, high: tuple[str, ...] = ("coding", "math"),
             low: tuple[str, ...] = ("writing", "roleplay")) -> str | None:
    """Whether the draft shows the published EAGLE-3 shape (τ higher on code and math than on writing and roleplay),
    as one sentence; an ordering is claimed only where the 95 % intervals separate (every ``high`` category's interval
    above every ``low`` one's, or below); None when the table lacks those categories."""
    if not all(c in table.index for c in high + low):
        return None
    top, bottom = (float(table.loc[list(cs), f"{engine} tau"].mean()) for cs in (high, low))
    lows, highs = table[f"{engine} low"], table[f"{engine} high"]
    said = f"{engine}: mean τ on {' and '.join(high)} {top:.3f}, on {' and '.join(low)} {bottom:.3f}"
    if lows[list(high + low)].isna().any():
        return f"{said}: too few prompts a category for an interval, so no ordering is claimed."
    if lows[list(high)].min() > highs[list(low)].max():
        return f"{said}: the intervals separate, the published EAGLE-3 ordering (higher on code and math)."
    if highs[list(high)].max() < lows[list(low)].min():
        return f"{said}: the intervals separate the other way (lower on code and math than the published ordering)."
    return f"{said}: the 95 % intervals overlap, so no ordering is claimed."


def write_sets(path: str | os.PathLike, results: dict[str, dict[str, list[PromptScore]]], settings: dict,
               seed: int = 0, **extra: object) -> Path:
    """Per set: the per-prompt records of each engine and the table recomputed from them; with how they were
    measured (``settings``: k, temperature, lengths, verifier), as JSON."""
    sets = {name: {"records": {e: [{**asdict(r), "tau": r.tau} for r in rs] for e, rs in by_engine.items()},
                   "table": json.loads(score_table(by_engine, seed).reset_index().to_json(orient="records"))}
            for name, by_engine in results.items()}
    write_text(path, json.dumps({**settings, "bootstrap": BOOTSTRAP, "seed": seed, "sets": sets, **extra},
                                indent=1) + "\n")
    return Path(path)


def read_sets(path: str | os.PathLike) -> dict[str, dict[str, list[PromptScore]]]:
    """The per-prompt records of a file :func:`write_sets` wrote: {set: {engine: records}}."""
    raw = json.loads(Path(path).read_text())
    return {name: {e: [PromptScore(r["id"], r["category"], r["rounds"], r["accepted"]) for r in rs]
                   for e, rs in s["records"].items()} for name, s in raw["sets"].items()}


def simulated_scores(verifier_model, tokenizer, drafts: dict, prompts: list[BenchPrompt], max_new_tokens: int,
                     k: int, progress: bool = True, conts: list[list[int]] | None = None,
                     ids: list[list[int]] | None = None, states: dict | None = None
                     ) -> tuple[list[list[int]], list[list[int]], dict]:
    """Render the prompts (:func:`eagle3kit.evaluate.benchmarks.render`; or take their ``ids``), write the verifier's
    greedy continuations once (or take ``conts``: e.g. vLLM's greedy outputs of the same prompts), and score each
    named draft on them by simulation: (prompt ids, continuations, {draft: records}). ``states``: the verifier's
    hidden states kept across drafts (and for a token view of the same prompts)."""
    import torch

    from eagle3kit.evaluate.acceptance import continuations, simulate_each
    from eagle3kit.evaluate.benchmarks import render

    ids = render(tokenizer, prompts, verifier_model) if ids is None else ids
    tensors = [torch.tensor([i]) for i in ids]
    if conts is None:
        conts = continuations(verifier_model, tensors, max_new_tokens, tokenizer.eos_token_id, progress)
    return ids, conts, {name: from_simulation(prompts, simulate_each(verifier_model, d, tensors, conts, k, progress,
                                                                     states))
                        for name, d in drafts.items()}
