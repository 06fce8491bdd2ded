"""The draft's accuracy on a split of its data, counted as a training step counts it but with no step taken: the
training split against speculators' validation split (the rows after ``train_data_ratio``, never trained on), so that
"memorised its replies" is a measured gap, not one batch's guess."""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch
from speculators.train.utils import normalize_counted_metrics

from eagle3kit.data.loader import make_loader


@torch.no_grad()
def split_metrics(session: Any, split: str = "val", max_batches: int | None = None) -> dict[str, float]:
    """A :class:`~eagle3kit.train.session.TrainSession`'s draft on ``split`` ("train" | "val") of its data, packed as
    it trains: loss and full / conditional accuracy per TTT step, each token-weighted over the split's batches (at
    most ``max_batches``), ``batches``, ``samples`` (the conversations those batches hold) and ``split_samples``
    (the split's rows; no metrics when it packs no batch). The draft is left as it was (weights, training mode)."""
    s = session.settings
    loader = make_loader(session.data, s.total_seq_len, session.dtype, train_ratio=s.train_data_ratio, split=split,
                         seed=s.seed, max_batches=max_batches, check=False)
    was_training, summed, batches, samples = session.model.training, {}, 0, 0
    session.model.eval()
    try:
        for batch in loader:
            batch = {k: v.to(session.device) for k, v in batch.items() if torch.is_tensor(v)}  # as Batches.peek
            samples += int(batch["document_ids"].max()) + 1  # documents are numbered 0.. in a pack, -1 pads
            with session.autocast():
                _loss, metrics = session.forward(session.model, batch, **session.forward_kwargs)
            summed = {k: summed.get(k, 0.0) + v.detach().float() for k, v in metrics.items()}
            batches += 1
    finally:
        session.model.train(was_training)
    if not batches:  # a split too small to pack a batch (a tiny dataset's validation split)
        return {"batches": 0, "samples": 0, "split_samples": len(loader.dataset)}
    return {**normalize_counted_metrics({k: float(v) for k, v in summed.items()}), "batches": batches,
            "samples": samples, "split_samples": len(loader.dataset)}


def first_guess_line(fit: dict[str, dict[str, float]]) -> str:
    """One line of :func:`split_metrics` results by split name: the first guess's accuracy and what it read."""
    def read(f: dict[str, float]) -> str:
        n, of = f["samples"], f["split_samples"]
        return f"the {n}" if n == of else f"{n} of the {of}"
    return "the first guess right (teacher-forced, every supervised token): " + ", ".join(
        f"{f['full_acc_0']:.2f} on {read(f)} {split} conversations" for split, f in fit.items() if f["batches"])


def sets_table(session: Any, held_out: int, live_prompts: int) -> pd.DataFrame:
    """Every set of conversations a run uses, with its count and what it is for: the training split, speculators'
    validation split, the held-out conversations notebook 04 kept apart (τ) and the first of them the live τ reads."""
    train, total = len(session.batches.dataset), session.data.n_samples
    return pd.DataFrame([
        {"set": "training split", "conversations": train,
         "used for": f"the steps: {len(session.batches)} packed batches of {session.settings.total_seq_len} tokens "
                     "an epoch"},
        {"set": "speculators' validation split", "conversations": total - train,
         "used for": "never trained on: notebook 06 sets the first guess here beside the training split's"},
        {"set": "held-out (notebook 04)", "conversations": held_out,
         "used for": "τ in notebook 06 (vLLM's counters and the simulation); never in the data directory's samples"},
        {"set": "live τ prompts", "conversations": min(live_prompts, held_out),
         "used for": "the first held-out prompts, scored while training: a rough guide"},
    ]).set_index("set")
