"""A preempted node, rehearsed: speculators' trainer killed mid-run (SIGKILL of one rank), rerun into the same save
path, against the same run uninterrupted; and the reason the two end apart, reproduced.

speculators 0.9.0 resumes a mid-epoch checkpoint at its exact step and batch (``training_state.json`` + the sampler's
fast skip) with the optimizer and LR schedule restored. Its checkpointer stores the weights and the optimizer state in
bfloat16 (``save_checkpoint(..., float_dtype=torch.bfloat16)``; the ``Trainer`` never passes its own dtype), so a run
trained in float32 continues from rounded state: not the uninterrupted run. :func:`as_resumed` applies that same
rounding to a :class:`~eagle3kit.train.session.TrainSession` at the checkpoint's step, which then trains exactly as
the resumed run did.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from eagle3kit.errors import UserError
from eagle3kit.train.rehearsal import compare
from eagle3kit.train.rehearsal.run import Rehearsal, rehearse
from eagle3kit.train.session import TrainSession

MIN_STEP_PCT = 0.25  # speculators' trainer skips a mid-epoch save closer than this x the interval to the epoch's end


@dataclasses.dataclass
class Preemption:
    """The uninterrupted run, the killed one, its rerun, and how they compare."""

    uninterrupted: Rehearsal
    killed: Rehearsal
    resumed: Rehearsal
    checkpoint_step: int
    at_kill: Path  # a copy of the save path as the killed run left it (the rerun resumes from, then extends, it)
    weights: compare.WeightsDiff  # resumed vs uninterrupted, final checkpoints
    max_loss_diff: float  # resumed vs uninterrupted, over the resumed steps
    explained_diff: float | None  # resumed vs the session rounded as the checkpoint rounds (None: not measured)

    def summary(self) -> dict[str, Any]:
        killed = self.killed.metrics()
        return {"killed_after_step": int(killed["step"].max()) if len(killed) else 0,
                "killed_exit": self.killed.returncode,
                "resumed_from_step": self.checkpoint_step, "resumed_exit": self.resumed.returncode,
                "resumed_steps": sorted(self.resumed.metrics()["step"]),
                "max_abs_loss_diff_vs_uninterrupted": self.max_loss_diff,
                "final_weights_differ": f"{self.weights.differ}/{self.weights.tensors} tensors, max "
                                        f"{self.weights.max_abs_diff:.3g} ({self.weights.dtype})",
                "max_abs_loss_diff_vs_session_rounded_at_checkpoint": self.explained_diff}


def epoch_batches(f: dict[str, Any], ranks: int) -> int:
    """Batches per rank in epoch 0 of a run (``f``: its resolved ``TrainConfig``, flattened): what speculators'
    ``len(train_loader)`` is."""
    from eagle3kit.data.loader import batch_sampler, load_dataset

    dataset = load_dataset(f["data_path"], f["total_seq_len"], train_ratio=f["train_data_ratio"])
    return len(batch_sampler(dataset, f["total_seq_len"], f["seed"], ranks))


def checkpoint_freq(every: int, batches: int) -> float:
    """speculators' ``checkpoint_freq`` (a fraction of the epoch) that saves mid-epoch every ``every`` steps."""
    if not 0 < every < batches or batches - every < every * MIN_STEP_PCT:
        raise UserError(f"An epoch has {batches} batches per rank: a mid-epoch checkpoint after {every} step(s) "
                        "needs more batches; build the data with more conversations or use fewer ranks.")
    return every / batches


def preempt(yaml: str | os.PathLike, out: str | os.PathLike, ranks: int = 2, fsdp: bool = False,
            steps: int = 5, checkpoint_step: int = 2, explain: bool = True, **options: Any) -> Preemption:
    """Run ``steps`` steps uninterrupted (``out/uninterrupted``); run them again (``out/preempted``) with a
    checkpoint after ``checkpoint_step`` and the last rank killed right after step ``checkpoint_step + 1``; rerun
    that into the same save path. With ``explain``, a session rounded as the checkpoint rounds replays the rerun."""
    from eagle3kit.train.launch import validate_yaml

    if not 0 < checkpoint_step < steps - 1:
        raise UserError(f"checkpoint_step={checkpoint_step}: use a step between 1 and {steps - 2}, so the run is "
                        "killed after a checkpoint and before its end.")
    out = Path(out)
    run = {**validate_yaml(yaml).flatten(), **options.get("extra", {})}  # the flags win, as in speculators
    every = {"checkpoint_freq": checkpoint_freq(checkpoint_step, epoch_batches(run, ranks))}
    kw = {"ranks": ranks, "fsdp": fsdp, "steps": steps, **options, "extra": {**options.get("extra", {}), **every}}
    whole = rehearse(yaml, out / "uninterrupted", **kw)
    killed = rehearse(yaml, out / "preempted", preempt_at_step=checkpoint_step + 1, preempt_rank=ranks - 1, **kw)
    at_kill = out / "at_kill"
    shutil.rmtree(at_kill, ignore_errors=True)
    shutil.copytree(killed.save_path, at_kill, symlinks=True)
    resumed = rehearse(yaml, out / "preempted", resume=True, **kw)
    for run in (whole, resumed):
        if not run.ok:
            raise RuntimeError(f"speculators' trainer failed in {run.out} (exit {run.returncode}):\n{run.log_tail()}")
    ttt = len([c for c in whole.metrics() if c.startswith("loss_")])
    explained = None
    if explain:
        session = compare.session_for(whole)
        session.run(checkpoint_step)
        as_resumed(session, resumed.save_path / "0")
        session.run(steps - checkpoint_step)
        explained = compare.max_loss_diff(resumed.metrics(), session.history_frame(), ttt)
    return Preemption(whole, killed, resumed, checkpoint_step, at_kill, compare.weights(resumed.checkpoint(),
                      whole.checkpoint()), compare.max_loss_diff(resumed.metrics(), whole.metrics(), ttt), explained)


@torch.no_grad()
def as_resumed(session: TrainSession, checkpoint: str | os.PathLike) -> None:
    """Round the session's state as speculators' checkpoint stored it: each tensor the checkpoint holds (frozen
    verifier copies included) and every float optimizer state, to the checkpoint's float dtype and back."""
    from safetensors import safe_open

    with safe_open(str(Path(checkpoint) / "model.safetensors"), framework="pt") as f:
        saved = {k: f.get_slice(k).get_dtype() for k in f.keys()}  # noqa: SIM118
    dtype = getattr(torch, {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[
        next(v for v in saved.values() if v in ("BF16", "F16", "F32"))])
    for name, param in session.model.named_parameters():
        if name in saved:
            param.copy_(param.to(dtype).to(param.dtype))
    for optimizer in session.optimizers:
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value) and value.is_floating_point():
                    value.copy_(value.to(dtype).to(value.dtype))
