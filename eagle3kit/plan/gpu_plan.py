"""A plan for the GPU run: disk, GPU memory per rank, the longest packed sequence that fits, the verifier's memory
for data generation, time, the commands, and what the draft will buy when served
(:mod:`eagle3kit.plan.serving_speed`), each number labelled with how it was obtained.

Kinds: ``counted`` (from the real objects: speculators' draft and the verifier built on the meta device, or a data
directory's manifest), ``derived`` (a formula of :mod:`eagle3kit.plan.disk` / ``memory`` / ``timing``, checked against
measurements by the tests and ``bench/plan.py``), ``assumed`` (a vendor spec sheet, a utilisation, a token count).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import pandas as pd

from eagle3kit.draft.config import DraftSpec, build_config
from eagle3kit.errors import UserError
from eagle3kit.plan import disk, memory, serving_speed, timing
from eagle3kit.plan.commands import TOTAL_SEQ_LEN, torchrun_command
from eagle3kit.plan.gpus import GPU, USABLE_FRACTION, resolve_gpu
from eagle3kit.plan.shapes import DraftShape, VerifierShape, draft_shape, verifier_shape

DEFAULT_TOKENS_PER_SAMPLE = 1024
DEFAULT_DRAFT_VOCAB = 32000  # EAGLE-3's usual draft vocabulary (capped at the verifier's)


@dataclass
class Plan:
    """Everything :func:`plan_run` worked out; :meth:`table` shows it."""

    verifier: str
    samples: int
    stats: disk.TokenStats
    stats_kind: str
    gpu: GPU
    n_gpus: int
    epochs: int
    step: memory.StepSettings
    vshape: VerifierShape
    dshape: DraftShape
    disk: disk.DiskPlan
    memory: dict[str, float]
    other_loss: float  # the same step's logits + loss with the other implementation
    largest_seq_len: int
    verifier_weights: float
    data_seconds: float
    train_seconds: float
    checkpoint_bytes: float
    utilisation: tuple[float, float]
    speed: serving_speed.SpeedPlan | None = None
    commands: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def memory_total(self) -> float:
        return sum(self.memory.values())

    @property
    def capacity(self) -> float:
        return self.gpu.usable_bytes

    @property
    def verifier_holders(self) -> int:
        """How many of the GPUs the verifier's bf16 weights need."""
        return holders(self.verifier_weights, self.gpu)

    @property
    def fits(self) -> bool:
        return self.memory_total <= self.capacity

    def table(self) -> pd.DataFrame:
        """The plan as rows: section, item, value, kind."""
        other = "eager" if self.step.loss_implementation == "fused" else "fused"
        d, t = self.disk, self.step.total_seq_len
        rows = [
            ("data", "samples x mean tokens", f"{self.samples:,} x {self.stats.mean_tokens:,.0f}", self.stats_kind),
            ("disk", "hidden states per token", _bytes(d.per_token), "derived"),
            ("disk", "per sample (mean)", _bytes(d.per_sample), "derived"),
            ("disk", "total (hidden states + dataset + vocab mapping)", _bytes(d.total), "derived"),
            ("disk", f"checkpoints ({self.epochs} epochs, all kept)", _bytes(self.checkpoint_bytes * self.epochs),
             "derived"),
            ("params", "draft trainable / frozen", f"{self.dshape.trainable:,} / "
             f"{self.dshape.frozen_embedding + self.dshape.frozen_heads:,}", "counted"),
            *[("GPU memory / rank", name, _bytes(value), "derived") for name, value in self.memory.items()],
            ("GPU memory / rank", "activations per TTT step", _bytes(memory.activations_per_step(self.dshape,
                                                                                                self.step)), "derived"),
            ("GPU memory / rank", f"logits + loss ({other}), for comparison", _bytes(self.other_loss), "derived"),
            ("GPU memory / rank", f"total at total_seq_len={t}", _bytes(self.memory_total), "derived"),
            ("GPU memory / rank", f"usable on {self.gpu.name} ({USABLE_FRACTION:.0%} of {self.gpu.memory_gb:g} GB)",
             _bytes(self.capacity), "assumed"),
            ("GPU memory / rank", "fits", "yes" if self.fits else "NO", "derived"),
            ("GPU memory / rank", "largest total_seq_len that fits", f"{self.largest_seq_len:,}", "derived"),
            ("data generation", "verifier weights (bf16)", _bytes(self.verifier_weights), "counted"),
            ("data generation", f"{self.gpu.name} GPUs to hold them", str(self.verifier_holders), "derived"),
            ("time", f"data generation (`eagle3kit data`: one device) on 1 x {self.gpu.name} at "
                     f"{self.utilisation[0]:.0%} of bf16 peak",
             _duration(self.data_seconds) if self.verifier_holders == 1 else
             f"not on one device (its weights need {self.verifier_holders})", "derived"),
            ("time", f"training {self.epochs} epochs on {self.n_gpus} x {self.gpu.name} at {self.utilisation[1]:.0%} "
                     "of bf16 peak",
             _duration(self.train_seconds), "derived"),
            *(self.speed.rows() if self.speed else []),
        ]
        return pd.DataFrame(rows, columns=["section", "item", "value", "kind"])

    def problems(self, free_disk: float | None = None) -> list[str]:
        """What will not fit, one sentence each with the fix (empty when everything fits)."""
        out = []
        if not self.fits:
            out.append(f"the training step needs {_bytes(self.memory_total)} per GPU at total_seq_len="
                       f"{self.step.total_seq_len}, more than the {_bytes(self.capacity)} usable on a {self.gpu.name}; "
                       f"use total_seq_len <= {self.largest_seq_len}"
                       + (" or the fused loss" if self.step.loss_implementation == "eager" else ""))
        if self.verifier_holders > 1:
            out.append(f"the verifier's bf16 weights ({_bytes(self.verifier_weights)}) need {self.verifier_holders} "
                       f"{self.gpu.name} "
                       "GPUs, but `eagle3kit data` runs it on one device; generate the hidden states with speculators' "
                       "vLLM pipeline (prepare-data + generate-offline-data, tensor parallel) or a quantized "
                       "checkpoint")
        if free_disk is not None and self.disk.total > free_disk:
            out.append(f"the hidden states need {_bytes(self.disk.total)} on disk but {_bytes(free_disk)} are free; "
                       "make room, store fewer samples, or generate them on demand")
        return out


def holders(weight_bytes: float, gpu: GPU) -> int:
    """How many ``gpu`` hold ``weight_bytes``."""
    return max(1, math.ceil(weight_bytes / gpu.usable_bytes))


def tensor_parallel(gpus: int) -> int:
    """The tensor-parallel degree a server splits a verifier over to hold it on ``gpus`` at least: the next power of
    two (a degree must divide the attention heads, which are a power of two or a multiple of 8 in practice)."""
    return 1 << max(0, gpus - 1).bit_length()


# the rows a first read needs (the starts of their items): disk, memory per rank and whether it fits, hours, break-even
HEADLINE_ROWS = ("total (hidden states", "total at total_seq_len", "fits", "largest total_seq_len", "data generation",
                 "training ", "GPUs the verifier is served on", "break-even")


def compare_plans(plans: list[Plan], headline: bool = False) -> pd.DataFrame:
    """Several plans side by side: one column per verifier, rows by item, with the first plan's ``kind`` of each;
    ``headline``: only :data:`HEADLINE_ROWS`, each under its section (disk, GPU memory / rank, time, serving)."""
    first = plans[0].table().set_index("item")
    table = pd.DataFrame({p.verifier: p.table().set_index("item")["value"] for p in plans})
    table.insert(0, "kind", first["kind"])
    if not headline:
        return table
    head = table[[item.startswith(HEADLINE_ROWS) for item in table.index]]
    return head.assign(section=first["section"]).set_index("section", append=True).swaplevel()  # disk, memory ...


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def _duration(s: float) -> str:
    return f"{s / 3600:,.1f} h" if s >= 3600 else f"{s / 60:,.1f} min" if s >= 60 else f"{s:,.1f} s"


def plan_run(verifier: str = "llama-3.1-8b", samples: int = 50000, tokens_per_sample: float | None = None,
             data: str | None = None, draft_vocab_size: int | None = DEFAULT_DRAFT_VOCAB, ttt_steps: int = 3,
             num_layers: int = 1, total_seq_len: int = TOTAL_SEQ_LEN, loss_implementation: str = "fused",
             optimizer: str = "adamw", attention: str = "simple_flex_attention", gpu: str = "H100-80GB",
             gpus: int = 8, fsdp: bool = False, epochs: int = 20,
             data_utilisation: float = timing.DATA_UTILISATION,
             train_utilisation: float = timing.TRAIN_UTILISATION, serve_batch: int = 1, serve_k: int | None = None,
             serve_gpus: int | None = None, tau: float | None = None, acceptance: list[float] | None = None) -> Plan:
    """Plan the GPU run of ``verifier`` (a preset, an HF directory): see the module doc for what each number is.

    Serving (vLLM on ``serve_gpus`` x ``gpu``, by default as many as hold the verifier's weights; ``serve_batch``
    sequences, ``serve_k`` draft tokens, default ``ttt_steps``): the expected speedup at ``tau`` (or τ = 1 + Σ
    ``acceptance``, the cumulative acceptance per position), the break-even τ and the all-accepted bound.
    """
    if loss_implementation not in memory.LOSS_IMPLEMENTATIONS:
        raise UserError(f"loss_implementation={loss_implementation!r}: use 'fused' or 'eager'.")
    if samples < 1 or gpus < 1 or epochs < 1 or total_seq_len < 128:
        raise UserError("samples, gpus and epochs must be >= 1 and total_seq_len >= 128 (e.g. `--total-seq-len 8192`).")
    target = resolve_gpu(gpu)
    spec = DraftSpec(verifier=verifier, num_layers=num_layers, ttt_steps=ttt_steps, device="cpu",
                     attn_implementation=attention)
    probe = build_config(spec)
    vocab = probe.verifier.text_config.vocab_size
    build = build_config(spec, draft_vocab_size=min(draft_vocab_size, vocab) if draft_vocab_size else None)
    vshape, dshape = verifier_shape(build), draft_shape(build)
    if data:
        measured = disk.data_token_stats(data)
        stats, kind = disk.TokenStats(samples, round(measured.mean_tokens * samples)), "counted (data directory)"
    else:
        mean = tokens_per_sample or DEFAULT_TOKENS_PER_SAMPLE
        stats, kind = disk.TokenStats(samples, round(mean * samples)), "assumed"
    step = memory.StepSettings(total_seq_len=total_seq_len, loss_implementation=loss_implementation,
                               optimizer=optimizer, attention=attention, shards=gpus if fsdp else 1)
    other = "eager" if loss_implementation == "fused" else "fused"
    width = step.precision.act
    kept = build.config.draft_vocab_size if build.config.draft_vocab_size != vocab else None
    data_flops = timing.data_generation_flops_per_token(vshape, stats.mean_tokens) * stats.tokens
    train_flops = timing.training_flops_per_token(dshape, stats.mean_tokens) * stats.tokens * epochs
    weights = 2 * vshape.params  # bf16
    result = Plan(
        verifier=verifier, samples=samples, stats=stats, stats_kind=kind, gpu=target, n_gpus=gpus, epochs=epochs,
        step=step, vshape=vshape, dshape=dshape,
        disk=disk.disk_plan(stats, dshape.hidden_size, dshape.n_aux + 1, step.precision.hidden_states, vocab, kept),
        memory=memory.memory_parts(dshape, step),
        other_loss=memory.loss_bytes(total_seq_len, dshape.draft_vocab_size, other, width, dshape.ttt_steps),
        largest_seq_len=memory.largest_fitting_seq_len(dshape, step, target.usable_bytes),
        verifier_weights=weights,
        data_seconds=timing.seconds(data_flops, timing.Throughput(1, target.bf16_tflops, data_utilisation)),
        train_seconds=timing.seconds(train_flops, timing.Throughput(gpus, target.bf16_tflops, train_utilisation)),
        checkpoint_bytes=memory.checkpoint_bytes(dshape, optimizer),
        utilisation=(data_utilisation, train_utilisation),
        speed=serving_speed.predict(verifier, gpu, serve_batch, serve_k or ttt_steps, tau, acceptance,
                                    tp=serve_gpus or tensor_parallel(holders(weights, target)),
                                    draft_vocab_size=build.config.draft_vocab_size, num_layers=num_layers),
    )
    result.commands = _commands(result, build, data)
    result.assumptions = _assumptions(result, kind)
    return result


def _commands(p: Plan, build, data: str | None) -> list[str]:
    vocab = f" --draft-vocab-size {p.dshape.draft_vocab_size}" if p.disk.vocab_mapping else ""
    verifier = build.verifier.path or "VERIFIER_DIR"
    data_dir = data or "data"
    lines = [] if data else [
        f"eagle3kit data --verifier {verifier} --n-conversations {p.samples} --seq-length {p.step.total_seq_len}"
        f"{vocab} --out {data_dir}"]
    lines.append(f"eagle3kit launch --data {data_dir} --ttt-steps {p.dshape.ttt_steps} --num-layers "
                 f"{p.dshape.num_layers}{vocab} --total-seq-len {p.step.total_seq_len} --optimizer {p.step.optimizer} "
                 f"--epochs {p.epochs} --gpus {p.n_gpus}{' --fsdp' if p.step.shards > 1 else ''} --gpu {p.gpu.name} "
                 "--out run")
    lines.append(torchrun_command(os.path.join("run", "run.yaml"), p.n_gpus, p.step.shards > 1))
    return lines


def _assumptions(p: Plan, kind: str) -> list[str]:
    tokens = ("mean tokens per sample counted from the data directory" if kind.startswith("counted")
              else f"{p.stats.mean_tokens:,.0f} tokens per sample (pass tokens_per_sample or a data directory)")
    return [
        tokens,
        "hidden states stored in bf16 ([seq, aux layers + 1, hidden] per sample, speculators' layout)",
        f"one packed sequence of total_seq_len={p.step.total_seq_len} per rank; {p.step.attention}; "
        f"{p.step.loss_implementation} kl_div loss; {p.step.optimizer}",
        "fp32 master weights, gradients and optimizer state; bf16 autocast activations; eager-autograd accounting "
        "(torch.compile keeps at most as much); no activation checkpointing",
        "FSDP shards weights, gradients and optimizer state over the GPUs" if p.step.shards > 1
        else "every GPU holds the whole draft (data parallel)",
        f"{p.gpu.name}: {p.gpu.source}; {USABLE_FRACTION:.0%} of its memory usable",
        f"utilisation of dense bf16 peak: {p.utilisation[0]:.0%} for data generation, {p.utilisation[1]:.0%} for "
        "training (not measured on a GPU here)",
        "verifier weights in bf16 (an FP8/INT4 checkpoint needs half/a quarter); data generation reads each token once",
        f"serving: bf16 weights read at {serving_speed.BANDWIDTH_UTILISATION:.0%} of the memory bandwidth, batched "
        f"steps at {serving_speed.COMPUTE_UTILISATION:.0%} of dense bf16 peak, {serving_speed.DEFAULT_CONTEXT} tokens "
        "of KV cache a "
        f"sequence; engine overheads {p.speed.overheads.source}; tensor parallelism's all-reduces not counted; checked "
        "against published EAGLE-3 speedups at batch 1 (bench/speedup.py: single-GPU points within "
        f"{serving_speed.SINGLE_GPU_ERROR:.0%}, 70B on 8 GPUs "
        "31% high), not yet at larger batches",
    ]
