"""Measured memory on this CPU, to check :mod:`eagle3kit.plan.memory` against: a real training step of speculators'
draft (:class:`eagle3kit.train.loop.PlainLoop` on a data directory's packed batch) and speculators' loss alone.

The peak comes from ``torch.profiler``'s memory profile (every allocation and free of the profiled region, in
order); what already exists when the step starts (weights, gradients and AdamW moments of the warm-up step, the
batch) is counted from the tensors themselves.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action, MemoryProfile

from eagle3kit.draft.config import DraftBuild
from eagle3kit.logs import quiet


def peak_allocated(fn) -> tuple[int, object]:
    """Peak bytes allocated on the CPU above the start while ``fn()`` runs (``torch.profiler`` memory profile)."""
    with quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                          with_stack=True) as prof:
        result = fn()
    now = peak = 0
    for _t, action, _key, size in MemoryProfile(prof.profiler.kineto_results).timeline:
        if action == Action.CREATE:
            now += size
        elif action == Action.DESTROY:
            now -= size
        peak = max(peak, now)
    return peak, result


@dataclass(frozen=True)
class MeasuredStep:
    """One measured training step: bytes that existed before it and the peak it added."""

    total_seq_len: int
    weights: int
    gradients: int
    optimizer_state: int
    batch: int
    step_peak: int  # above everything that existed when the step started

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.batch + self.step_peak


def measure_training_step(build: DraftBuild, data_dir: str | os.PathLike, total_seq_len: int,
                          loss_implementation: str = "eager") -> MeasuredStep:
    """Warm up one step (AdamW's moments appear), then measure the next on the same packed batch (float32, CPU)."""
    from eagle3kit.data.directory import DataDir
    from eagle3kit.train.batches import Batches
    from eagle3kit.train.loop import PlainLoop
    from eagle3kit.train.session import TrainSettings

    settings = TrainSettings(total_seq_len=total_seq_len, loss_implementation=loss_implementation,
                             hidden_states_dtype="float32").resolved("cpu")
    loop = PlainLoop(build, data_dir, settings, total_steps=100)
    data = DataDir.open(data_dir).for_draft(build.verifier, build.aux_layer_ids)
    batches = Batches(data, build, total_seq_len, settings.seed, settings.train_data_ratio, torch.float32)
    batch = batches.peek()
    loop.step(batch)
    peak, _ = peak_allocated(lambda: loop.step(batch))
    params = list(loop.model.parameters())
    state = [t for opt in loop.optimizers for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    return MeasuredStep(
        total_seq_len=total_seq_len, weights=sum(p.nbytes for p in params),
        gradients=sum(p.grad.nbytes for p in params if p.grad is not None),
        optimizer_state=sum(t.nbytes for t in state), batch=sum(t.nbytes for t in batch.values()), step_peak=peak)


def measure_loss_peak(tokens: int, vocab: int, implementation: str = "eager",
                      dtype: torch.dtype = torch.float32) -> int:
    """Peak bytes beyond its inputs of speculators' kl_div loss, forward and backward, on ``[1, tokens, vocab]``."""
    from speculators.losses import resolve_loss_config

    fn, _weight = resolve_loss_config("kl_div", implementation)["kl_div"]
    logits = torch.randn(1, tokens, vocab, dtype=dtype, requires_grad=True)
    targets = torch.randn(1, tokens, vocab, dtype=dtype)

    def run():
        fn(logits, targets).sum().backward()

    peak, _ = peak_allocated(run)
    return peak
