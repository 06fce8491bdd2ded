"""The one training step (:func:`train_step`), and the plain loop over it that is the parity reference.

:func:`train_step` is one iteration of speculators' ``Trainer.train_epoch``: zero the gradients, forward and
backward on each rank's batch (gradients averaged as DDP does), ``clip_grad_norm_(1.0)``, the optimizer(s), the
schedule. :meth:`TrainSession.step` and :class:`PlainLoop` both call it, with either forward of
:mod:`eagle3kit.train.forward`. This module is also the one home of the optimizer(s) and LR schedule as speculators'
``Trainer`` builds them (``build_optimizers``: AdamW, or Muon on the 2D weights + AdamW on the rest; one warmup
schedule per optimizer)::

    loop = PlainLoop(build, data_dir, settings, total_steps)
    for batch in make_loader(data_dir, settings.total_seq_len, train_ratio=0.9, seed=settings.seed):
        loss = loop.step(batch)
"""

from __future__ import annotations

import contextlib
import os
import typing
from typing import Any

import torch
from speculators.losses import resolve_loss_config
from speculators.train.config.schema import OptimizerArgs
from speculators.train.optimizers import build_optimizers
from transformers import get_constant_schedule, get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from eagle3kit.draft.config import DraftBuild, draft_ttt_steps
from eagle3kit.device import warn_if_bf16_emulated
from eagle3kit.data.vocab import build_for_data
from eagle3kit.errors import UserError
from eagle3kit.train.forward import SPECULATORS, Forward, forward_for

OPTIMIZERS: tuple[str, ...] = typing.get_args(OptimizerArgs.model_fields["optimizer"].annotation)  # adamw, muon


def optimizer_args(settings: Any) -> OptimizerArgs:
    """speculators' optimizer settings for a run (its defaults for the Muon knobs; ``muon_lr`` unset -> ``lr``, as
    ``speculators train`` resolves it)."""
    if settings.optimizer not in OPTIMIZERS:
        raise UserError(f"optimizer={settings.optimizer!r} is not one speculators offers; use one of {OPTIMIZERS} "
                        "(e.g. `eagle3kit train --optimizer muon`).")
    muon_lr = settings.muon_lr if settings.muon_lr is not None else settings.lr
    return OptimizerArgs(optimizer=settings.optimizer, lr=settings.lr, weight_decay=settings.weight_decay,
                         muon_lr=muon_lr)


def make_optimizers(model: torch.nn.Module, settings: Any) -> list[torch.optim.Optimizer]:
    """The optimizer(s) speculators' ``Trainer`` steps: ``[AdamW]`` or ``[Muon, AdamW]``."""
    if settings.optimizer == "muon" and next(model.parameters()).device.type == "cpu":
        # torch.optim.Muon orthogonalizes each update in bf16: a 512-token step took 33 s against 1.8 s with AdamW
        warn_if_bf16_emulated("optimizer='muon'", "use optimizer='adamw' (`--optimizer adamw`) on this machine",
                              "torch's Muon orthogonalizes every update in bf16, ~18x slower a step than AdamW here")
    return build_optimizers(model, optimizer_args(settings))


def warmup_steps(settings: Any, total: int) -> int:
    """The warmup's length in steps: ``settings.warmup_steps``, else 1 % of the horizon rounded down (as speculators).
    Step ``i`` (from 0) of the warmup runs at ``lr * i / warmup``: with any warmup the first step runs at LR 0."""
    return settings.warmup_steps if settings.warmup_steps is not None else total // 100


def make_schedulers(optimizers: list[torch.optim.Optimizer], settings: Any,
                    total: int) -> list[torch.optim.lr_scheduler.LRScheduler]:
    """One schedule per optimizer, as speculators' Trainer: transformers' linear/cosine warmup (warmup 1% of the
    horizon by default); ``"none"`` keeps the LR constant."""
    warmup = warmup_steps(settings, total)
    kind = settings.scheduler_type
    if kind == "linear":
        return [get_linear_schedule_with_warmup(o, warmup, total) for o in optimizers]
    if kind == "cosine":
        return [get_cosine_schedule_with_warmup(o, warmup, total) for o in optimizers]
    if kind == "none":
        return [get_constant_schedule(o) for o in optimizers]
    raise UserError(f"scheduler_type={kind!r}: use 'linear', 'cosine' or 'none' (as speculators).")


class NonFiniteStep(ArithmeticError):
    """The loss or the gradient norm was not finite: the gradients were cleared and no weight moved."""

    def __init__(self, what: str):
        super().__init__(f"non-finite {what}")
        self.what = what


def train_step(model: torch.nn.Module, optimizers: list, schedulers: list, batches: list[dict[str, torch.Tensor]],
               forward: Forward, forward_kwargs: dict[str, Any], autocast=contextlib.nullcontext
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    """One optimizer step over one batch per data-parallel rank: (mean loss, metrics summed over ranks, grad norm).

    Raises :class:`NonFiniteStep` (gradients cleared, weights and schedule untouched) on a non-finite loss or
    gradient norm."""
    for optimizer in optimizers:
        optimizer.zero_grad()
    total_loss, summed = 0.0, {}
    for batch in batches:
        with autocast():
            loss, metrics = forward(model, batch, **forward_kwargs)
        (loss / len(batches) if len(batches) > 1 else loss).backward()
        total_loss = total_loss + loss.detach() / len(batches)
        summed = {k: summed[k] + v.detach() if k in summed else v.detach() for k, v in metrics.items()}
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if not (torch.isfinite(total_loss) and torch.isfinite(grad_norm)):
        for optimizer in optimizers:
            optimizer.zero_grad()
        raise NonFiniteStep("loss" if not torch.isfinite(total_loss) else "gradient")
    for optimizer in optimizers:
        optimizer.step()
    for scheduler in schedulers:
        scheduler.step()
    return total_loss, summed, grad_norm


class PlainLoop:
    """speculators' draft, its optimizer(s), the warmup schedule and gradient clipping at 1.0, one batch a step,
    through :func:`train_step` with speculators' own forward (``attention``: :mod:`eagle3kit.train.forward`)."""

    def __init__(self, build: DraftBuild, data_dir: str | os.PathLike, settings: Any, total_steps: int,
                 attention: str = SPECULATORS):
        torch.manual_seed(settings.seed)  # the same seed gives the same initial draft as the session's
        self.model = build_for_data(build, data_dir, settings.warm_start_layer).train()
        self.optimizers = make_optimizers(self.model, settings)
        self.schedulers = make_schedulers(self.optimizers, settings, total_steps)
        self.forward = forward_for(attention)
        self.forward_kwargs = {"ttt_steps": draft_ttt_steps(build.config),
                               "ttt_step_loss_decay": settings.ttt_step_loss_decay,
                               "loss_config": resolve_loss_config(settings.loss_fn, settings.loss_implementation)}

    def step(self, batch: dict) -> float:
        """One optimizer step on a collated batch; returns the loss."""
        batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        loss, _, _ = train_step(self.model, self.optimizers, self.schedulers, [batch], self.forward,
                                self.forward_kwargs)
        return loss.item()
