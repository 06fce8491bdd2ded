"""The plain training loop that :meth:`TrainSession.step` wraps, written directly against speculators.

It is the reference: the parity test checks that ``TrainSession`` steps equal it bit for bit, and
``bench/train.py`` times the session against it. Everything here is speculators' or torch's own::

    loop = PlainLoop(build, data_dir, settings, total_steps)
    for batch in make_loader(data_dir, settings.total_seq_len, train_ratio=0.9, seed=settings.seed):
        loss = loop.step(batch)
"""

from __future__ import annotations

import os

import torch
from speculators.losses import resolve_loss_config
from transformers import get_linear_schedule_with_warmup

from eagle3kit.draft.config import DraftBuild
from eagle3kit.draft.model import build_for_data


class PlainLoop:
    """speculators' draft, AdamW, the linear warmup schedule and gradient clipping at 1.0, one batch a step."""

    def __init__(self, build: DraftBuild, data_dir: str | os.PathLike, settings, total_steps: int):
        torch.manual_seed(settings.seed)  # the same seed gives the same initial draft as the session's
        self.model = build_for_data(build, data_dir, settings.warm_start_layer).train()
        self.optimizer = torch.optim.AdamW(self.model.named_parameters(), lr=settings.lr,
                                           weight_decay=settings.weight_decay)
        warmup = settings.warmup_steps if settings.warmup_steps is not None else total_steps // 100
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup, total_steps)
        self.loss_config = resolve_loss_config(settings.loss_fn, settings.loss_implementation)
        self.ttt_steps = build.config.speculators_config.proposal_methods[0].speculative_tokens
        self.ttt_step_loss_decay = settings.ttt_step_loss_decay

    def step(self, batch: dict) -> float:
        """One optimizer step on a collated batch; returns the loss."""
        batch = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
        _, loss, _ = self.model(**batch, ttt_steps=self.ttt_steps, ttt_step_loss_decay=self.ttt_step_loss_decay,
                                loss_config=self.loss_config)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()
