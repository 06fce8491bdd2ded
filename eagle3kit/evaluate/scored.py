"""What a run scored, kept for a later look (notebook 06 writes it, 07 reads it): per prompt set, the prompts, their
token ids, the continuations the simulation read, the simulated per-prompt records, and vLLM's per-request counts
and outputs where vLLM ran. Nothing is generated or served again to look at it token by token."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from eagle3kit.atomic import write_text
from eagle3kit.evaluate.benchmarks import BenchPrompt
from eagle3kit.evaluate.scores import PromptScore


@dataclass
class ScoredSet:
    """One prompt set as a run scored it."""

    name: str
    prompts: list[BenchPrompt]
    ids: list[list[int]]
    conts: list[list[int]]  # the verifier's greedy continuations the simulation read
    continuations_from: str  # whose: "transformers (float32)" or vLLM's plain run
    simulated: list[PromptScore] | None = None  # per prompt, when the run simulated the set
    vllm_histograms: list[list[int]] | None = None  # per prompt, rounds by accepted draft tokens (vLLM's counters)
    vllm_outputs: list[list[int]] | None = None  # per prompt, vLLM's output with the draft

    @property
    def vllm(self) -> tuple[list[list[int]], list[list[int]]] | None:
        """(histograms, outputs) as :func:`eagle3kit.evaluate.fates.views_of` takes them; None without vLLM."""
        return None if self.vllm_histograms is None else (self.vllm_histograms, self.vllm_outputs)


def from_check(check) -> dict:
    """The per-prompt part of a :class:`~eagle3kit.evaluate.vllm.serve.VllmCheck` a :class:`ScoredSet` keeps (empty
    when vLLM did not run)."""
    return {} if check is None else {"vllm_histograms": check.histograms, "vllm_outputs": check.outputs_draft}


def write_scored(path: str | os.PathLike, sets: list[ScoredSet], **about: object) -> Path:
    """The sets as JSON (atomically), with ``about`` (k, the draft's folder ...)."""
    raw = [{**asdict(s), "prompts": [asdict(p) for p in s.prompts],
            "simulated": None if s.simulated is None else [asdict(r) for r in s.simulated]} for s in sets]
    write_text(path, json.dumps({**about, "sets": raw}, default=list) + "\n")
    return Path(path)


def read_scored(path: str | os.PathLike) -> tuple[dict[str, ScoredSet], dict]:
    """({name: set}, about) from :func:`write_scored`'s file."""
    raw = json.loads(Path(path).read_text())
    sets = {}
    for s in raw.pop("sets"):
        prompts = [BenchPrompt(p["id"], p["category"], tuple(p["messages"]), p.get("follow_up"), p.get("conversation"))
                   for p in s["prompts"]]
        simulated = None if s["simulated"] is None else [PromptScore(**r) for r in s["simulated"]]
        sets[s["name"]] = ScoredSet(s["name"], prompts, s["ids"], s["conts"], s["continuations_from"], simulated,
                                    s.get("vllm_histograms"), s.get("vllm_outputs"))
    return sets, raw
