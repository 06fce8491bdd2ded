"""vLLM's view of a draft beside eagle3kit's, on the same prompts: τ, per-position acceptance, lossless; and speed,
each engine's tokens/s with the draft beside its own without it, measured the same way (:func:`speed_rows`,
:func:`measured_line`)."""

from __future__ import annotations

import pandas as pd

from eagle3kit.evaluate.acceptance import Acceptance, DecodeRun
from eagle3kit.evaluate.round_speed import CpuPrediction, Measured, speed_table
from eagle3kit.evaluate.vllm.serve import VllmCheck

DECODE_LOOP = "transformers, one prompt at a time (eagle3kit's decode loop: a correctness tool)"


def same_as_greedy(check: VllmCheck, continuations: list[list[int]]) -> int:
    """Prompts whose vLLM output (without the draft) equals eagle3kit's greedy continuation (transformers) over the
    tokens vLLM wrote; a difference is a floating-point near tie between the two engines, not a draft error."""
    return sum(c[: len(o)] == o for c, o in zip(continuations, check.outputs_plain, strict=True))


def comparison_table(check: VllmCheck, simulated: Acceptance, decoded: DecodeRun | None,
                     continuations: list[list[int]]) -> pd.DataFrame:
    """One row per measure, one column per engine: vLLM (its counters), eagle3kit's decode loop, eagle3kit's
    simulation. The decode loop is left out when ``decoded`` is None or decoded fewer prompts than ``continuations``
    (then it is a correctness check, printed apart, not a τ beside these). Both per-position rates count rounds
    (vLLM's the rounds it ran, the simulation's its decode walk: :meth:`Acceptance.walk_rates`), so each column's
    rates sum to about its τ − 1. Speed is :func:`speed_rows`'s."""
    n = len(check.outputs_plain)
    decoded = decoded if decoded is not None and decoded.prompts >= len(continuations) else None

    def loop(value) -> list:  # the decode loop's cell, or none when there is no decode-loop column
        return [] if decoded is None else [value(decoded) if callable(value) else value]

    rows = {"τ (tokens per verifier step)": [check.tau, *loop(lambda d: d.tau), simulated.tau]}
    for i, (theirs, ours) in enumerate(zip(check.acceptance_per_pos, simulated.walk_rates(), strict=True), 1):
        rows[f"share of rounds accepting draft token {i} (cumulative)"] = [theirs, *loop("–"), ours]
    rows["lossless: same output with and without the draft"] = [
        f"{check.lossless}/{n}", *loop(lambda d: f"{d.lossless}/{d.prompts}"), "–"]
    rows["plain output equal to eagle3kit's greedy"] = [f"{same_as_greedy(check, continuations)}/{n}", *loop("–"), "–"]
    columns = [f"vLLM {check.vllm_version} (its counters)", *loop("eagle3kit decode loop"), "eagle3kit simulated"]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    return table.map(lambda x: round(x, 3) if isinstance(x, float) else x)


ALONE_ROW = "vLLM, one prompt at a time"


def speed_rows(check: VllmCheck | None, decoded: DecodeRun | None, max_new_tokens: int,
               prompts: int | None = None) -> pd.DataFrame:
    """Tokens/s with the draft beside without it, one row per engine, each pair measured the same way: vLLM on all
    prompts at once (one batch, engines warm), and on its first few alone (batch 1) where it timed them; the decode
    loop one prompt at a time against plain greedy decoding of the same prompts one at a time (interleaved), labelled
    a correctness tool, and only where it decoded all ``prompts`` (None: it did) beside vLLM: on fewer its speed says
    nothing of the set."""
    if check is not None and decoded is not None and prompts is not None and decoded.prompts < prompts:
        decoded = None
    rows = {}
    if check is not None:
        n, engine = check.decoded_together, f"vLLM {check.vllm_version} (CPU build)"
        rows["vLLM"] = tuple(Measured(check.tokens_per_s[r], engine, n, n, max_new_tokens) for r in ("draft", "plain"))
        alone = check.tokens_per_s_alone
        if alone:
            rows[ALONE_ROW] = tuple(Measured(alone[r], engine, 1, check.alone[r]["prompts"], max_new_tokens)
                                    for r in ("draft", "plain"))
    if decoded is not None and decoded.plain_seconds:
        rows["decode loop"] = tuple(Measured(decoded.tokens / s, DECODE_LOOP, 1, decoded.prompts, max_new_tokens)
                                    for s in (decoded.seconds, decoded.plain_seconds))
    return speed_table(rows)


def measured_line(check: VllmCheck | None, cpu: CpuPrediction | None = None) -> str:
    """One sentence for a run's summary: vLLM's tokens/s with and without the draft, the speedup and τ, and what the
    step costs predicted (``cpu``) when they were measured; or that no vLLM check ran."""
    if check is None:
        return "Measured here: skipped (no vLLM check ran; vllm_check = True runs it)."
    draft, plain = check.tokens_per_s["draft"], check.tokens_per_s["plain"]
    predicted = (f"; the step costs predicted {cpu.predicted_tokens_per_s:.0f} tokens/s with the draft)." if cpu
                 else ").")
    return (f"Measured here (vLLM CPU build, {check.decoded_together} sequences decoded together as one batch, load "
            f"{check.load_text}): "
            f"{draft:.0f} tokens/s with the draft, {plain:.0f} without ({draft / plain:.2f}x, τ {check.tau:.2f}"
            + predicted)
