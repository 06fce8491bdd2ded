"""What notebook 06 reports: a draft scored on a named benchmark beside its held-out prompts (simulated, and by vLLM
when it ran), how stable each set's τ is, and the run's summary numbers."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from eagle3kit.evaluate import scores
from eagle3kit.evaluate.acceptance import Acceptance, DecodeRun
from eagle3kit.evaluate.benchmarks import BenchPrompt
from eagle3kit.evaluate.conventions import TAU_CONVENTION
from eagle3kit.evaluate.vllm.gate import VllmGate
from eagle3kit.evaluate.vllm.serve import VllmCheck


@dataclass
class BenchScores:
    """One draft on one named set: per-prompt records by engine ("simulated", and "vLLM" when it ran)."""

    name: str
    records: dict[str, list[scores.PromptScore]]
    continuations_from: str  # whose greedy continuations the simulation read
    continuations: list[list[int]] | None = None  # those continuations (vLLM's plain outputs when not simulated)

    def table(self) -> pd.DataFrame:
        return scores.score_table(self.records)

    def display(self) -> pd.DataFrame:
        return scores.display_table(self.table()).reset_index()

    def plot(self) -> Figure:
        return scores.plot_scores(self.table(), f"{self.name}: τ per category (95% intervals)")

    def overall(self, engine: str) -> dict[str, float] | None:
        if engine not in self.records:
            return None
        row = scores.summarise(self.records[engine]).iloc[-1]
        scored = [r for r in self.records[engine] if r.rounds]
        pooled_low, pooled_high = scores.pooled_interval([r.rounds for r in scored], [r.accepted for r in scored])
        return {"tau": round(float(row["tau"]), 3), "low": round(float(row["low"]), 3),
                "high": round(float(row["high"]), 3), "pooled": round(float(row["pooled"]), 3),
                "pooled_low": round(pooled_low, 3), "pooled_high": round(pooled_high, 3)}

    def per_category(self, engine: str) -> dict[str, float]:
        table = scores.summarise(self.records.get(engine, []))
        return {c: round(float(t), 3) for c, t in table["tau"].items()} if len(table) else {}

    def orderings(self) -> list[str]:
        """For each engine, whether the draft shows the published ordering (higher on code and math)."""
        table = self.table()
        return [line for e in self.records if (line := scores.ordering(table, e))]


def score_named(verifier_model, tokenizer, draft, prompts: list[BenchPrompt], max_new_tokens: int, k: int,
                vllm: VllmCheck | None = None, progress: bool = True, simulate: bool = True) -> BenchScores:
    """The draft's τ on a named set by simulation, and vLLM's per-request τ when ``vllm`` checked the same prompts.
    With vLLM, the simulation reads vLLM's greedy outputs without the draft (the verifier's continuations, float32,
    no second generation here); without it, transformers writes them. ``simulate=False`` keeps vLLM's alone (one
    forward of the verifier and the draft per prompt saved: ~0.5 s a prompt on 2 cores)."""
    if not simulate and vllm is None:
        raise ValueError("simulate=False needs vLLM's per-request counters (vllm_check=True): nothing would score it.")
    records: dict[str, list[scores.PromptScore]] = {}
    conts = [list(o) for o in vllm.outputs_plain] if vllm is not None else None
    if simulate:
        _ids, conts, by_draft = scores.simulated_scores(verifier_model, tokenizer, {"simulated": draft}, prompts,
                                                        max_new_tokens, k, progress, conts)
        records.update(by_draft)
    if vllm is not None:
        records["vLLM"] = scores.from_vllm(prompts, vllm.histograms)
    source = ("vLLM (float32, without the draft)" if vllm is not None else "transformers (float32)") if simulate \
        else "vLLM (its counters only, not simulated)"
    return BenchScores(prompts[0].id.split("/")[0] if prompts else "", records, source, conts)


def stability_line(named: BenchScores, held_out: list[scores.PromptScore], engine: str = "simulated") -> str:
    """How far each set's overall τ moves between two halves of its prompts (median and 95th percentile over
    random halvings)."""
    a, b = scores.half_split(named.records[engine]), scores.half_split(held_out)
    return (f"Stability: between two halves of its prompts, {named.name}'s τ ({engine}, {a['prompts']} prompts) "
            f"moves by {a['median']:.3f} (median; 95th percentile {a['p95']:.3f}), the held-out set's "
            f"(simulated, {b['prompts']} prompts) by {b['median']:.3f} ({b['p95']:.3f}).")


def vllm_interval(vllm: VllmCheck) -> tuple[float, float]:
    """The 95 % interval of vLLM's pooled τ, its prompts resampled (from the per-request histograms)."""
    return scores.pooled_interval([sum(h) for h in vllm.histograms],
                                  [sum(i * n for i, n in enumerate(h)) for h in vllm.histograms])


def mean_over_prompts(vllm: VllmCheck) -> tuple[float, float, float]:
    """τ as the mean over prompts of each prompt's τ (from vLLM's per-request histograms), with its 95 % bootstrap
    interval: how the recipe lab and the per-category table count a named set."""
    records = [scores.PromptScore(str(i), "", sum(h), sum(j * n for j, n in enumerate(h)))
               for i, h in enumerate(vllm.histograms)]
    row = scores.summarise(records).iloc[-1]  # one category: the set's own row, counted as the table counts it
    return float(row["tau"]), float(row["low"]), float(row["high"])


def vllm_headline(vllm: VllmCheck, simulated: float, groups: dict[str, VllmCheck] | None = None) -> str:
    """Notebook 06's headline τ in one line: vLLM's counters on the held-out prompts with its interval, the simulation
    of the same prompts beside it, and whether the draft left the output unchanged; then each named set of the same
    run (``groups``), as the recipe lab counts it (:func:`mean_over_prompts`), its pooled τ beside."""
    n = len(vllm.outputs_plain)
    low, high = vllm_interval(vllm)
    line = (f"headline: τ {vllm.tau:.3f} [{low:.3f}, {high:.3f}] on {n} held-out prompts, by vLLM's own counters "
            f"(k = {vllm.k}; all rounds pooled; 95 % interval over the prompts); simulated on the same prompts: "
            f"{simulated:.3f}; the output with the draft equals the output without on {vllm.lossless}/{n}")
    for name, group in (groups or {}).items():
        mean, low, high = mean_over_prompts(group)
        m = len(group.outputs_plain)
        line += (f"\n          τ {mean:.3f} [{low:.3f}, {high:.3f}] on {name}'s {m} prompts in the same run, the mean "
                 f"over its prompts as the recipe lab and the table below count it (all rounds pooled: "
                 f"{group.tau:.3f}); output unchanged on {group.lossless}/{m}")
    return line


def summary_numbers(sim: dict[str, Acceptance], real: dict[str, DecodeRun], gate: VllmGate,
                    named: BenchScores | None) -> dict[str, object]:
    """Notebook 06's headline numbers, each with what it measured: τ simulated, the decode loop's correctness check
    (its prompts counted apart: it is no τ measurement of its own; the untrained draft's only where it ran) and
    vLLM's τ with the batch it decoded (None where it did not run), on the held-out prompts and on the named set."""
    vllm = gate.check
    out: dict[str, object] = {
        "tau_convention": TAU_CONVENTION,
        "tau_untrained": round(sim["untrained"].tau, 3), "tau_trained": round(sim["trained"].tau, 3),
        "tau_decode_untrained": round(real["untrained"].tau, 3) if "untrained" in real else None,
        "tau_decode_trained": round(real["trained"].tau, 3),
        "decode_prompts_untrained": real["untrained"].prompts if "untrained" in real else 0,
        "decode_prompts_trained": real["trained"].prompts,
        "lossless": all(r.lossless == r.prompts for r in real.values()),
        "tau_vllm": None if vllm is None else round(vllm.tau, 3),
        "vllm_prompts": None if vllm is None else len(vllm.outputs_plain),
        "vllm_batch": None if vllm is None else vllm.decoded_together,
        "vllm_version": None if vllm is None else vllm.vllm_version,
        "vllm_lossless": None if vllm is None else vllm.lossless == len(vllm.outputs_plain),
        "tokens_per_s_vllm": None if vllm is None else {r: round(v, 3) for r, v in vllm.tokens_per_s.items()},
        "tokens_per_s_vllm_alone": None if vllm is None or not vllm.tokens_per_s_alone else {
            r: round(v, 3) for r, v in vllm.tokens_per_s_alone.items()},  # to 3 decimals: their ratio as measured
        "vllm_alone_prompts": None if vllm is None or not vllm.tokens_per_s_alone else vllm.alone["draft"]["prompts"],
        "tau_vllm_interval": None if vllm is None or not vllm.histograms else [
            round(x, 3) for x in vllm_interval(vllm)]}
    if named is not None:
        for engine, key in (("simulated", "sim"), ("vLLM", "vllm")):
            out[f"{named.name}_{key}"] = named.overall(engine)
            out[f"{named.name}_{key}_categories"] = named.per_category(engine) or None
        group = gate.groups.get(named.name)
        out[f"{named.name}_prompts"] = len(next(iter(named.records.values()), []))
        out[f"{named.name}_continuations"] = named.continuations_from
        out[f"{named.name}_vllm_lossless"] = None if group is None else group.lossless == len(group.outputs_plain)
    return out
