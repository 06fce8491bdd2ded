"""The hand-off read both ways: a speculators ``TrainConfig`` YAML (what :mod:`eagle3kit.train.launch` writes) as a
:class:`~eagle3kit.train.session.TrainSession`'s settings and draft, and the per-step records speculators' ``Trainer``
logs, read back at full precision (its console shows 3 decimals) and set beside the session's.
:mod:`eagle3kit.train.rehearsal` runs the trainer itself.

What must hold for the two runs to be the same run (speculators 0.9.0, read from its code, measured by
``tests/test_rehearsal.py``):

* the seed: ``set_seed(seed)`` before the draft is built; the session seeds ``torch.manual_seed(seed)`` before
  building the same draft, so both start from the same weights (a ``from_pretrained`` run: the saved weights);
* the batches: ``MultipackDistributedBatchSamplerV2`` with ``seed``, ``set_epoch(epoch)`` and one sampler per rank,
  the samplers the session's :class:`~eagle3kit.train.batches.Batches` drive (``TrainSettings.ranks``);
* one epoch: with ``max_steps`` below an epoch's batches speculators' ``train_epoch`` stops at ``max_steps``, but
  ``run_training`` then starts the next epoch, which takes one step before it checks again: keep ``epochs: 1``.
* the optimizer and schedule: :func:`session_settings` refuses a YAML whose optimizer or scheduler fields the
  session would not reproduce.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from eagle3kit.draft.config import DraftSpec, spec_from_saved
from eagle3kit.errors import UserError
from eagle3kit.train.loop import optimizer_args

METRICS_LOGGER = "speculators.metrics"  # the logger speculators' Trainer writes its per-step records to


class MetricsFile(logging.Handler):
    """Append each training record of ``speculators.metrics`` to a JSON-lines file: step (1-based), epoch, lr and
    the metrics as speculators' ``Trainer`` logged them (``loss``, ``loss_k``, ``full_acc_k``, ``cond_acc_k``)."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(level=logging.INFO)
        self.path = Path(path)

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if record.name != METRICS_LOGGER or not isinstance(msg, Mapping) or "train" not in msg:
            return
        lr = msg.get("lr")
        line = {"step": int(msg["global_step"]) + 1, "epoch": msg.get("epoch"),
                "lr": min(lr.values()) if isinstance(lr, Mapping) else lr,
                **{k: float(v) for k, v in msg["train"].items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")


def read_metrics(path: str | os.PathLike) -> pd.DataFrame:
    """The per-step records :class:`MetricsFile` wrote, one row per step (empty when the file is absent)."""
    path = Path(path)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return pd.DataFrame(rows)


def per_ttt_step(history: pd.DataFrame, ttt_steps: int, metric: str = "loss") -> pd.DataFrame:
    """``metric`` per TTT step as a long table: step, ttt_step, value (from a session's or the trainer's records)."""
    missing = [f"{metric}_{k}" for k in range(ttt_steps) if f"{metric}_{k}" not in history]
    if missing:
        raise ValueError(f"The records have no {', '.join(missing)}; they hold {sorted(history.columns)}.")
    columns = [f"{metric}_{k}" for k in range(ttt_steps)]
    long = history[["step", *columns]].melt(id_vars="step", value_vars=columns, var_name="ttt_step",
                                            value_name=metric)
    long["ttt_step"] = long["ttt_step"].str.rsplit("_", n=1).str[1].astype(int)
    return long.sort_values(["step", "ttt_step"]).reset_index(drop=True)


def side_by_side(theirs: pd.DataFrame, ours: pd.DataFrame, ttt_steps: int, rel: float, abs_tol: float,
                 metric: str = "loss") -> pd.DataFrame:
    """speculators' and the session's ``metric`` per step and TTT step, their difference and whether it is within
    ``abs_tol + rel * |speculators|``."""
    a = per_ttt_step(theirs, ttt_steps, metric).rename(columns={metric: "speculators"})
    b = per_ttt_step(ours, ttt_steps, metric).rename(columns={metric: "eagle3kit"})
    table = a.merge(b, on=["step", "ttt_step"], how="outer").sort_values(["step", "ttt_step"])
    table["abs_diff"] = (table["speculators"] - table["eagle3kit"]).abs()
    table["within"] = table["abs_diff"] <= abs_tol + rel * table["speculators"].abs()
    return table.reset_index(drop=True)


def _flat(config) -> dict[str, Any]:
    return config.flatten() if hasattr(config, "flatten") else dict(config)


def session_settings(config) -> dict[str, Any]:
    """The :class:`~eagle3kit.train.session.TrainSettings` of a resolved ``TrainConfig`` (``launch.validate_yaml``).

    Raises :class:`~eagle3kit.errors.UserError` for a field the session does not reproduce (a warmup ratio, a
    scheduler horizon other than ``max_steps``, Muon knobs other than speculators' defaults, several epochs
    cut by ``max_steps``)."""
    f = _flat(config)
    unsupported = {k: f.get(k) for k in ("scheduler_warmup_ratio", "scheduler_total_steps") if f.get(k) is not None}
    if f.get("scheduler_type") == "cosine" and f.get("scheduler_num_cosine_cycles", 0.5) != 0.5:
        unsupported["scheduler_num_cosine_cycles"] = f["scheduler_num_cosine_cycles"]
    if f.get("max_steps") is not None and f.get("epochs", 1) > 1:
        unsupported["epochs"] = f["epochs"]  # speculators takes one extra step per further epoch
    settings = {
        "lr": f["lr"], "total_seq_len": f["total_seq_len"], "seed": f["seed"], "weight_decay": f["weight_decay"],
        "optimizer": f["optimizer"], "muon_lr": f.get("muon_lr"), "epochs": f["epochs"], "max_steps": f["max_steps"],
        "scheduler_type": f["scheduler_type"], "warmup_steps": f.get("scheduler_warmup_steps"),
        "loss_fn": f["loss_fn"], "ttt_step_loss_decay": f["ttt_step_loss_decay"],
        "train_data_ratio": f["train_data_ratio"], "hidden_states_dtype": f["hidden_states_dtype"],
        "loss_implementation": f["loss_implementation"],
    }
    if settings["optimizer"] == "muon":  # the session steps Muon with speculators' defaults for the other knobs
        ours = optimizer_args(_Fields(settings)).model_dump()
        unsupported.update({k: f[k] for k, v in ours.items() if k.startswith("muon") and k in f and f[k] != v})
    if unsupported:
        given = ", ".join(f"{k}={v!r}" for k, v in unsupported.items())
        raise UserError(f"The YAML sets {given}, which TrainSession does not reproduce; remove it (or set epochs: 1 "
                        "with max_steps) to compare the two trainers on the same run.")
    return settings


class _Fields:
    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)


def session_draft(config, device: str = "auto") -> DraftSpec:
    """The draft a ``TrainConfig`` trains, as a :class:`~eagle3kit.draft.config.DraftSpec`; for a
    ``from_pretrained`` run, the saved draft's shape (its weights: :func:`pretrained_weights`)."""
    f = _flat(config)
    if f.get("from_pretrained"):
        return spec_from_saved(f["from_pretrained"], verifier=f["verifier_name_or_path"], ttt_steps=f["ttt_steps"],
                               attn_implementation=f["draft_attn_impl"], device=device,
                               draft_vocab_size=f.get("draft_vocab_size"), aux_layer_ids=list(f["target_layer_ids"]))
    return DraftSpec(
        verifier=f["verifier_name_or_path"], num_layers=f["num_layers"], draft_arch=f["draft_arch"],
        draft_vocab_size=f.get("draft_vocab_size"), aux_layer_ids=list(f["target_layer_ids"]),
        ttt_steps=f["ttt_steps"], attn_implementation=f["draft_attn_impl"], device=device,
        hidden_act=f["draft_hidden_act"], sliding_window=f["sliding_window"],
        full_attention_indices=list(f["full_attention_indices"] or []),
        norm_before_residual=f["norm_before_residual"], norm_before_fc=f["norm_before_fc"], fc_norm=f["fc_norm"],
        norm_output=f["norm_output"], embed_requires_grad=f["embed_requires_grad"])


def pretrained_weights(config) -> dict[str, torch.Tensor] | None:
    """The weights a ``from_pretrained`` run starts from (float32), as speculators' ``from_pretrained`` loads them;
    None for a run that starts from the seeded draft."""
    folder = _flat(config).get("from_pretrained")
    if not folder:
        return None
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise UserError(f"from_pretrained {folder} holds no *.safetensors; write it with `eagle3kit launch "
                        "--warm-start-layer N` or point the YAML at a saved draft.")
    state = {k: v for f in files for k, v in load_file(str(f)).items()}
    return {k: v.float() if v.is_floating_point() else v for k, v in state.items()}


def initial_weights(model: torch.nn.Module, saved: str | os.PathLike) -> dict[str, Any]:
    """A session's seeded draft against the one ``speculators train --dry-run`` seeded and saved (``model.safetensors``,
    in its ``hidden_states_dtype``): ours cast to that dtype, compared tensor by tensor."""
    from safetensors.torch import load_file

    ours = model.state_dict()
    theirs = {k: v for k, v in load_file(str(saved)).items() if v.is_floating_point()}
    diffs = {k: float((ours[k].to(v.dtype).float() - v.float()).abs().max()) for k, v in theirs.items()}
    return {"tensors": len(diffs), "equal": all(d == 0 for d in diffs.values()), "max_abs_diff": max(diffs.values()),
            "dtype": str(next(iter(theirs.values())).dtype)}


def last_checkpoint(save_path: str | os.PathLike) -> Path:
    """The draft speculators' ``SingleGPUCheckpointer`` saved last (``save_path/<epoch>/``, bf16 weights)."""
    epochs = sorted((p for p in Path(save_path).iterdir() if p.name.isdigit() and (p / "config.json").exists()),
                    key=lambda p: int(p.name)) if Path(save_path).is_dir() else []
    if not epochs:
        raise FileNotFoundError(f"{save_path} holds no checkpoint of speculators' trainer (no <epoch>/config.json).")
    return epochs[-1]
