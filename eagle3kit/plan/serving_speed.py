"""Expected speedup of an EAGLE-3 draft served on GPUs, before it is trained: the verifier's and the draft's step times
from counted bytes and FLOPs at a stated utilisation, plus per-step engine overheads derived from a published vLLM
measurement. The speedup arithmetic is :mod:`eagle3kit.evaluate.round_speed`'s (the one the CPU measurement uses).

A forward pass that reads ``W`` bytes of weights and ``K`` bytes of KV cache and does ``F`` FLOPs on ``tp`` GPUs
takes ``max((W + K) / tp / (bandwidth · u_bw), F / tp / (peak · u_flops)) + overhead``:

* verifier step over ``n`` tokens: ``W`` = 2 bytes x active parameters (bf16), ``K`` = batch x context x layers x
  KV elements x 2, ``F`` = 2 x active parameters x n + 4 x layers x q_dim x context x n (attention);
* draft step (one token a sequence): ``W`` = the draft's decoder layer(s) and fc (speculators' trainable
  parameters) and its ``lm_head`` rows, ``K`` and ``F`` likewise with the draft's one layer;
* overheads (what an engine spends besides reading and computing: launches, scheduling, sampling, the
  verification's bookkeeping), derived from vllm issue 20780 (:mod:`eagle3kit.plan.published_speedups`): a verifier
  step's from its plain TPOT minus the bandwidth time; a draft step's from how the round time grows with k (least
  squares over k = 2..7) minus the draft's bandwidth time; a round's (rejection, draft inputs) from that line's
  intercept minus a plain step. Those 20780 points fit by construction; :func:`speed_checks` compares the model with
  every published point.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from eagle3kit.draft.config import build_config
from eagle3kit.evaluate import round_speed
from eagle3kit.plan.gpus import GPU, resolve_gpu
from eagle3kit.plan.shapes import DraftShape, VerifierShape, draft_shape, verifier_shape
from eagle3kit.plan.published_speedups import SpeedPoint, published_points, vllm_20780

BF16 = 2
BANDWIDTH_UTILISATION = 0.8  # assumed: of the spec-sheet memory bandwidth, what decoding's weight reads reach
COMPUTE_UTILISATION = 0.5  # assumed: of dense bf16 peak, for the verifier's batched (k + 1)-token steps
DEFAULT_CONTEXT = 1024  # assumed: tokens in each sequence's KV cache while it decodes
TOLERANCE = 0.2  # a prediction within 20% of a published speedup counts as a match
SINGLE_GPU_ERROR = 0.1  # bench/speedup.py: this model's single-GPU predictions lie within 10% of published speedups
DRAFT_VOCAB = 32000  # the draft vocabulary of the published drafts (yuhuili/EAGLE3-*)


@dataclass(frozen=True)
class Overheads:
    """Seconds an engine spends per forward pass besides reading weights and computing."""

    verifier_s: float
    draft_s: float
    round_s: float  # once per speculative round, beyond its verifier and draft steps
    source: str


@dataclass(frozen=True)
class Hardware:
    gpu: GPU
    tp: int = 1
    u_bw: float = BANDWIDTH_UTILISATION
    u_flops: float = COMPUTE_UTILISATION


def verifier_seconds(v: VerifierShape, hw: Hardware, batch: int, tokens_per_seq: int, context: int,
                     overhead: float) -> float:
    """One verifier step over ``tokens_per_seq`` tokens of each of ``batch`` sequences."""
    n = batch * tokens_per_seq
    weights = BF16 * v.active_params
    kv = BF16 * batch * context * v.num_layers * v.kv_per_token
    flops = 2 * v.active_params * n + 4 * v.num_layers * v.q_dim * context * n
    return _forward(weights + kv, flops, hw) + overhead


def draft_served_params(d: DraftShape) -> int:
    """What a served draft step reads: its decoder layer(s) and fc, and its lm_head rows (the embedding is a lookup)."""
    return d.trainable + d.draft_vocab_size * d.hidden_size


def draft_seconds(d: DraftShape, hw: Hardware, batch: int, context: int, overhead: float) -> float:
    """One draft step: one token of each of ``batch`` sequences through the draft."""
    params = draft_served_params(d)
    kv = BF16 * batch * context * d.num_layers * 2 * d.kv_dim
    flops = 2 * params * batch + 4 * d.num_layers * d.q_dim * context * batch
    return _forward(BF16 * params + kv, flops, hw) + overhead


def _forward(nbytes: float, flops: float, hw: Hardware) -> float:
    return max(nbytes / hw.tp / (hw.gpu.bandwidth_tbs * 1e12 * hw.u_bw),
               flops / hw.tp / (hw.gpu.bf16_tflops * 1e12 * hw.u_flops))


@functools.lru_cache(maxsize=16)
def shapes(verifier: str, draft_vocab_size: int | None = DRAFT_VOCAB, num_layers: int = 1
           ) -> tuple[VerifierShape, DraftShape]:
    """The verifier's and a speculators EAGLE-3 draft's shapes (counted on the meta device)."""
    probe = build_config(verifier=verifier, device="cpu", num_layers=num_layers)
    vocab = probe.verifier.text_config.vocab_size
    build = build_config(verifier=verifier, device="cpu", num_layers=num_layers,
                         draft_vocab_size=min(draft_vocab_size, vocab) if draft_vocab_size else None)
    return verifier_shape(build), draft_shape(build)


@functools.lru_cache(maxsize=1)
def vllm_overheads() -> Overheads:
    """vLLM's per-forward overheads, derived from vllm issue 20780 (one H100, Llama-3.1-8B, batch 1)."""
    points = vllm_20780()
    v, d = shapes(points[0].verifier)
    hw = Hardware(resolve_gpu(points[0].gpu))
    verifier = points[0].plain_step_s - verifier_seconds(v, hw, 1, 1, DEFAULT_CONTEXT, 0.0)
    ks = np.array([p.draft_steps for p in points], dtype=float)
    slope, intercept = map(float, np.polyfit(ks, [p.round_s for p in points], 1))  # a round = intercept + slope k
    draft = slope - draft_seconds(d, hw, 1, DEFAULT_CONTEXT, 0.0)
    per_round = intercept - points[0].plain_step_s
    return Overheads(verifier, draft, per_round, "derived from vllm issue 20780 (H100, Llama-3.1-8B, batch 1): "
                     f"{verifier * 1e3:.2f} ms a verifier step (plain TPOT minus bandwidth time), {draft * 1e3:.2f} ms "
                     f"a draft step (a round's growth with k minus bandwidth time), {per_round * 1e3:.2f} ms a round "
                     "(the round line's intercept minus a plain step)")


@dataclass(frozen=True)
class SpeedPlan:
    """The step times the model gives and the speedup they imply at τ."""

    gpu: str
    tp: int
    batch: int
    k: int
    verify_tokens: int
    tau: float | None
    plain_s: float
    verify_s: float
    draft_s: float
    overheads: Overheads

    @property
    def speedup(self) -> float | None:
        return None if self.tau is None else round_speed.speedup(self.tau, self.plain_s, self.verify_s, self.draft_s,
                                                           self.k, self.overheads.round_s)

    @property
    def break_even(self) -> float:
        return round_speed.break_even_tau(self.plain_s, self.verify_s, self.draft_s, self.k, self.overheads.round_s)

    @property
    def best(self) -> float:
        """The speedup if every draft token were accepted (τ = k + 1)."""
        return round_speed.speedup(self.k + 1, self.plain_s, self.verify_s, self.draft_s, self.k,
                                   self.overheads.round_s)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(section, item, value, kind) rows in the plan's table."""
        s = "serving (vLLM)"
        rows = [
            (s, "GPUs the verifier is served on (split tensor parallel)", f"{self.tp} x {self.gpu}", "assumed"),
            (s, f"verifier step, 1 token a sequence (batch {self.batch}; engine overhead included)",
             f"{self.plain_s * 1e3:.2f} ms", "derived"),
            (s, f"verifier step, {self.verify_tokens} tokens a sequence (engine overhead included)",
             f"{self.verify_s * 1e3:.2f} ms", "derived"),
            (s, "draft step (its weights and cache read, plus the engine overhead per draft step below)",
             f"{self.draft_s * 1e3:.2f} ms", "derived"),
            (s, "engine overhead per verifier step / draft step / round",
             f"{self.overheads.verifier_s * 1e3:.2f} / {self.overheads.draft_s * 1e3:.2f} / "
             f"{self.overheads.round_s * 1e3:.2f} ms", "derived"),
            (s, f"break-even τ at k={self.k}: (verifier over {self.verify_tokens} tokens + {self.k} draft steps + "
                "round overhead) / verifier over 1 token",
             f"({self.verify_s * 1e3:.2f} + {self.k} x {self.draft_s * 1e3:.2f} + "
             f"{self.overheads.round_s * 1e3:.2f}) / {self.plain_s * 1e3:.2f} = {self.break_even:.2f}", "derived"),
            (s, f"speedup if all k={self.k} draft tokens were accepted", f"{self.best:.2f}x", "derived"),
        ]
        if self.tau is not None:
            rows.append((s, f"expected speedup at τ {self.tau:.2f}", f"{self.speedup:.2f}x", "derived"))
        return rows

    def table(self) -> pd.DataFrame:
        """:meth:`rows` as a table: item, value, kind."""
        return pd.DataFrame([row[1:] for row in self.rows()], columns=["item", "value", "kind"])

    def line(self, where: str, tau_from: str) -> str:
        """One sentence for a run's summary: the speedup at τ (``tau_from``: whose acceptance gave it), the break-even
        τ and the bound, for the serving ``where`` describes."""
        return (f"Predicted there ({where}, vLLM, k = {self.k}): {self.speedup:.2f}x plain decoding at this τ "
                f"{self.tau:.2f} ({tau_from}); the draft pays above τ {self.break_even:.2f}, at most {self.best:.2f}x.")


def predict(verifier: str = "llama-3.1-8b", gpu: str = "H100-80GB", batch: int = 1, k: int = 3,
            tau: float | None = None, acceptance: list[float] | None = None, tp: int = 1,
            verify_tokens: int | None = None, context: int = DEFAULT_CONTEXT,
            draft_vocab_size: int | None = DRAFT_VOCAB, num_layers: int = 1,
            overheads: Overheads | None = None, plain_step_s: float | None = None,
            u_bw: float = BANDWIDTH_UTILISATION, u_flops: float = COMPUTE_UTILISATION) -> SpeedPlan:
    """Step times and speedup of a draft for ``verifier`` on ``tp`` x ``gpu`` at ``batch`` and ``k``.

    ``tau`` or ``acceptance`` (cumulative per-position acceptance: τ = 1 + Σ) gives the speedup; without either,
    only the break-even τ and the all-accepted bound. ``plain_step_s``: a measured plain step of this engine and GPU
    (its verifier overhead is then derived from it instead of vLLM's).
    """
    if acceptance is not None:
        tau = round_speed.tau_from_positions(acceptance)
    v, d = shapes(verifier, draft_vocab_size, num_layers)
    hw = Hardware(resolve_gpu(gpu), tp, u_bw, u_flops)
    base = overheads or vllm_overheads()
    if plain_step_s is not None:
        own = plain_step_s - verifier_seconds(v, hw, batch, 1, context, 0.0)
        base = Overheads(own, base.draft_s, base.round_s, f"verifier: from the measured plain step; draft and round: "
                         f"{base.source}")
    n = verify_tokens or k + 1
    return SpeedPlan(hw.gpu.name, tp, batch, k, n, tau, verifier_seconds(v, hw, batch, 1, context, base.verifier_s),
                     verifier_seconds(v, hw, batch, n, context, base.verifier_s),
                     draft_seconds(d, hw, batch, context, base.draft_s), base)


def predict_point(p: SpeedPoint) -> SpeedPlan:
    """The model for a published setting; its plain step (the source's own baseline) fixes the verifier's overhead."""
    return predict(p.verifier, p.gpu, p.batch, p.draft_steps, p.tau, tp=p.tp, verify_tokens=p.verify_tokens,
                   plain_step_s=p.plain_step_s)


def speed_checks(points: list[SpeedPoint] | None = None) -> pd.DataFrame:
    """Every published point: its setting, the published speedup, the predicted one, their ratio."""
    rows = []
    for p in points or published_points():
        s = predict_point(p)
        rows.append({"point": p.name, "source": p.source, "GPU": f"{p.tp} x {p.gpu}", "batch": p.batch,
                     "k / steps": p.draft_steps, "τ": p.tau, "published": round(p.speedup, 3),
                     "predicted": round(s.speedup, 3), "ratio": round(s.speedup / p.speedup, 3),
                     "within 20%": abs(s.speedup / p.speedup - 1) <= TOLERANCE, "note": p.note})
    return pd.DataFrame(rows)
