"""Serve an exported draft in real vLLM (the CPU build, in its own environment) and check it there.

vLLM pins another torch than speculators, so it lives in its own environment (:mod:`eagle3kit.vllm_env`)
and eagle3kit talks to it through subprocesses only: :func:`check_draft` runs ``worker.py`` (the same prompts
with and without the draft: τ from vLLM's counters, output unchanged); :func:`served` (tests/vllm_served.py) starts the
:func:`serve_command` a user runs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from eagle3kit.errors import UserError
from eagle3kit.evaluate.defaults import MAX_NEW_TOKENS
from eagle3kit.processes import launch, log_tail, stop_group
from eagle3kit.vllm_env import CPU_HEAD_SIZES, VllmError, run_env, vllm_python

SERVE_ENV = run_env()  # KV cache and core binding for this host
WORKER = Path(__file__).with_name("worker.py")


class VllmInputError(UserError):
    """A draft, verifier or prompt set that vLLM cannot check, with the fix in the message."""


# ----------------------------------------------------------------------------------------------- input checks
def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _head_dim(cfg: dict) -> int:
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def _same_model(a: Path, b: Path) -> bool:
    keys = ("architectures", "hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads")
    if a.resolve() == b.resolve():
        return True
    if not ((a / "config.json").exists() and (b / "config.json").exists()):
        return False
    ca, cb = _json(a / "config.json"), _json(b / "config.json")
    return all(ca.get(k) == cb.get(k) for k in keys)


def check_inputs(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None = None,
                 k: int | None = None) -> tuple[Path, Path, int]:
    """(draft, verifier, k) that vLLM can serve on CPU, or :class:`VllmInputError` saying what to fix.

    ``verifier_dir`` defaults to the verifier recorded in the draft's ``speculators_config``; ``k`` to its
    speculative tokens.
    """
    draft = Path(draft_dir)
    if not (draft / "config.json").exists():
        raise VllmInputError(f"{draft} has no config.json; export the draft there first (save_draft / "
                             "TrainSession.export).")
    cfg = _json(draft / "config.json")
    spec = cfg.get("speculators_config") or {}
    recorded = (spec.get("verifier") or {}).get("name_or_path")
    if verifier_dir is None and not recorded:
        raise VllmInputError(f"{draft}/config.json names no verifier (speculators_config.verifier); pass verifier_dir.")
    verifier = Path(verifier_dir if verifier_dir is not None else recorded)
    if not (verifier / "config.json").exists():
        raise VllmInputError(f"The verifier {verifier} is not a local model directory with config.json; pass the "
                             "converted directory (eagle3kit.verifier.resolve(name).path), not an alias or hub id.")
    if recorded and not _same_model(Path(recorded), verifier):
        raise VllmInputError(f"The draft in {draft} was made for the verifier {recorded} "
                             f"(speculators_config.verifier), not {verifier}; serve it with that verifier or "
                             "train a draft for this one.")
    vcfg = _json(verifier / "config.json")
    vcfg = vcfg.get("text_config", vcfg)
    layer = cfg.get("transformer_layer_config") or {}
    for what, c in (("verifier", vcfg), ("draft", layer)):
        if c and _head_dim(c) not in CPU_HEAD_SIZES:
            raise VllmInputError(f"vLLM's CPU attention cannot serve head_dim={_head_dim(c)} (the {what}'s); it "
                                 f"supports {list(CPU_HEAD_SIZES)}: use a verifier with one of those head sizes.")
    from eagle3kit.draft.config import draft_ttt_steps  # lazy: torch + speculators, only for the default k

    return draft, verifier, k or draft_ttt_steps(cfg)


# ----------------------------------------------------------------------------------------------- offline check
ALONE = 4  # prompts each check decodes again one at a time, after the batch: the speed at batch 1


@dataclass
class VllmCheck:
    """vLLM's own view of a draft: counters with the draft, outputs and speed with and without it."""

    k: int
    drafts: int
    accepted: int
    accepted_per_pos: list[int]
    outputs_draft: list[list[int]]
    outputs_plain: list[list[int]]
    seconds: dict[str, float]
    tokens_per_s: dict[str, float]
    vllm_version: str
    steps: dict[str, list[dict]] = field(default_factory=dict)  # per run, each engine step's times (worker.StepTimer)
    load: dict[str, list[float]] = field(default_factory=dict)  # per run, the load average before and after it
    histograms: list[list[int]] = field(default_factory=list)  # per prompt, rounds by accepted draft tokens
    batch: int = 0  # sequences decoded together in the timed runs (0: all of this check's prompts)
    alone: dict[str, dict] = field(default_factory=dict)  # per run, the first prompts again one at a time (batch 1):
    # {"prompts", "tokens", "seconds"}, timed after the batch on the same warm engine

    @property
    def tokens_per_s_alone(self) -> dict[str, float] | None:
        """Tokens/s with the draft and without it at batch 1 (:attr:`alone`), None where it was not timed."""
        if not all(self.alone.get(r, {}).get("seconds") for r in ("draft", "plain")):
            return None
        return {r: self.alone[r]["tokens"] / self.alone[r]["seconds"] for r in ("draft", "plain")}

    @property
    def decoded_together(self) -> int:
        """The batch the speed and step times were measured at: a :meth:`part` keeps its whole run's."""
        return self.batch or len(self.outputs_plain)

    @property
    def tau(self) -> float:
        """1 + accepted / drafts: tokens per verifier step, the bonus token counted (eagle3kit's τ)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else float("nan")

    @property
    def acceptance_per_pos(self) -> list[float]:
        """Share of drafts whose position i (1-based i+1) was accepted."""
        return [a / self.drafts if self.drafts else float("nan") for a in self.accepted_per_pos]

    @property
    def lossless(self) -> int:
        """How many prompts gave the same tokens with and without the draft."""
        return sum(a == b for a, b in zip(self.outputs_draft, self.outputs_plain, strict=True))

    @property
    def load_text(self) -> str:
        """The 1-minute load average before → after each timed run, with the draft / without it."""
        return " / ".join("→".join(f"{x:.1f}" for x in self.load.get(r, [])) or "?" for r in ("draft", "plain"))

    def part(self, start: int, end: int, counters: dict) -> VllmCheck:
        """The check of prompts ``start:end`` alone: their outputs and histograms, and ``counters`` (the worker's for
        that set, summed from the per-request histograms: :func:`worker.set_counters`). Speed and step times stay
        the whole run's: those prompts were generated in one batch with the others."""
        return replace(self, drafts=counters["drafts"], accepted=counters["accepted"],
                       accepted_per_pos=counters["accepted_per_pos"], outputs_draft=self.outputs_draft[start:end],
                       outputs_plain=self.outputs_plain[start:end], histograms=self.histograms[start:end],
                       batch=self.decoded_together)

    def summary(self) -> dict[str, object]:
        return {"tau_vllm": round(self.tau, 4), "drafts": self.drafts, "accepted": self.accepted,
                "acceptance_per_pos": [round(a, 4) for a in self.acceptance_per_pos],
                "lossless": f"{self.lossless}/{len(self.outputs_plain)}",
                "tokens_per_s_draft": round(self.tokens_per_s["draft"], 1),
                "tokens_per_s_plain": round(self.tokens_per_s["plain"], 1), "vllm": self.vllm_version,
                **({f"tokens_per_s_alone_{r}": round(v, 1) for r, v in self.tokens_per_s_alone.items()}
                   if self.tokens_per_s_alone else {})}

    def table(self) -> pd.DataFrame:
        """The summary as (measure, value) rows, for a terminal (:func:`eagle3kit.tables.format_table`)."""
        rows = [("τ by vLLM's spec-decode counters", f"{self.tau:.3f} (at most k + 1 = {self.k + 1})"),
                ("drafts / accepted draft tokens", f"{self.drafts} / {self.accepted}"),
                *((f"acceptance at draft position {i + 1}", f"{a:.3f}") for i, a in enumerate(self.acceptance_per_pos)),
                ("lossless: same tokens with and without the draft", f"{self.lossless}/{len(self.outputs_plain)}"),
                ("tokens/s with the draft", f"{self.tokens_per_s['draft']:.1f}"),
                ("tokens/s without the draft", f"{self.tokens_per_s['plain']:.1f}"),
                *((f"tokens/s {w} the draft, one prompt at a time ({self.alone[r]['prompts']} prompts)",
                   f"{self.tokens_per_s_alone[r]:.1f}") for r, w in (("draft", "with"), ("plain", "without"))
                  if self.tokens_per_s_alone),
                ("load average before → after (with / without)", self.load_text),
                ("vLLM", self.vllm_version)]
        return pd.DataFrame(rows, columns=["measure", "value"])


def check_draft(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None,
                prompts_token_ids: list[list[int]], max_new_tokens: int = MAX_NEW_TOKENS, k: int | None = None,
                timeout: float = 900.0, venv: str | os.PathLike | None = None,
                max_num_seqs: int | None = None, alone: int = ALONE) -> VllmCheck:
    """Generate greedily in vLLM with the draft and without it on the same token-id prompts (two fresh engines);
    ``max_num_seqs``: at most this many sequences a step (default: every prompt at once); ``alone``: the first this
    many prompts are decoded again one at a time, for the speed at batch 1."""
    return check_sets(draft_dir, verifier_dir, {"all": prompts_token_ids}, max_new_tokens, k, timeout, venv,
                      max_num_seqs, alone)[0]


def check_sets(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None,
               sets: dict[str, list[list[int]]], max_new_tokens: int = MAX_NEW_TOKENS, k: int | None = None,
               timeout: float = 900.0, venv: str | os.PathLike | None = None,
               max_num_seqs: int | None = None, alone: int = ALONE) -> tuple[VllmCheck, dict[str, VllmCheck]]:
    """:func:`check_draft` on several named sets of token-id prompts in one start of each engine (one batch, the
    sets in order): the whole check (vLLM's aggregate counters) and each set's (:meth:`VllmCheck.part`)."""
    draft, verifier, k = check_inputs(draft_dir, verifier_dir, k)
    prompts = [p for group in sets.values() for p in group]
    if not sets or not all(sets.values()) or not all(p and all(isinstance(t, int) for t in p) for p in prompts):
        raise VllmInputError("Each prompt set must be a non-empty list of non-empty lists of token ids "
                             f"(sets: {', '.join(f'{n!r}: {len(g)}' for n, g in sets.items()) or 'none'}).")
    python = vllm_python(venv)
    with tempfile.TemporaryDirectory(prefix="eagle3kit-vllm-") as tmp:
        spec = {"verifier": str(verifier.resolve()), "draft": str(draft.resolve()), "k": k,
                "sets": {name: [list(p) for p in group] for name, group in sets.items()},
                "max_new_tokens": max_new_tokens, "max_num_seqs": max_num_seqs, "alone": alone}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        log, out = Path(tmp) / "worker.log", Path(tmp) / "out.json"
        proc = launch([str(python), str(WORKER), str(Path(tmp) / "spec.json"), str(out)], log, SERVE_ENV)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise VllmError(f"vLLM did not finish within {timeout:.0f}s; log tail:\n{log_tail(log)}") from None
        finally:
            stop_group(proc, grace=5.0)
        if code != 0 or not out.exists():
            raise VllmError(f"vLLM failed (exit code {code}); log tail:\n{log_tail(log)}")
        raw = _json(out)
    d, p, c = raw["runs"]["draft"], raw["runs"]["plain"], raw["runs"]["draft"]["counters"]
    whole = VllmCheck(k, c["drafts"], c["accepted"], c["accepted_per_pos"], d["outputs"], p["outputs"],
                      {r: raw["runs"][r]["seconds"] for r in ("draft", "plain")},
                      {r: raw["runs"][r]["tokens_per_s"] for r in ("draft", "plain")}, raw["vllm_version"],
                      {r: raw["runs"][r].get("steps", []) for r in ("draft", "plain")},
                      {r: raw["runs"][r].get("load", []) for r in ("draft", "plain")}, d.get("histograms", []),
                      alone={r: raw["runs"][r]["alone"] for r in ("draft", "plain") if "alone" in raw["runs"][r]})
    parts = {name: whole.part(part["start"], part["end"], part["counters"]) for name, part in d["sets"].items()}
    return whole, parts


# ----------------------------------------------------------------------------------------------- server
def serve_command(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None = None,
                  k: int | None = None, port: int = 8000, host: str = "127.0.0.1") -> list[str]:
    """The ``vllm serve`` argv for the draft on CPU: the converted verifier directory, the draft in
    ``--speculative-config``; run it with :data:`SERVE_ENV` set (:func:`shell_command` writes both)."""
    draft, verifier, k = check_inputs(draft_dir, verifier_dir, k)
    speculative = json.dumps({"method": "eagle3", "model": str(draft.resolve()), "num_speculative_tokens": k})
    return ["vllm", "serve", str(verifier.resolve()), "--speculative-config", speculative, "--dtype", "float32",
            "--enforce-eager", "--host", host, "--port", str(port)]


def shell_command(argv: list[str]) -> str:
    """``VLLM_CPU_KVCACHE_SPACE=2 vllm serve ...``, quoted for a POSIX shell."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in SERVE_ENV.items())
    return f"{env} {shlex.join(argv)}"
