"""Checkpoints of a :class:`~eagle3kit.train.session.TrainSession`: speculators' model format plus the training state.

A checkpoint directory is a speculators model directory (``save_pretrained``: ``config.json`` +
``model.safetensors``, loadable with ``SpeculatorModel.from_pretrained``) with the training state alongside, under
the file names speculators' own checkpointer uses where it has one:

- ``optimizer_state_dict.pt``, ``scheduler_state_dict.pt`` (as speculators' ``SingleGPUCheckpointer`` writes them:
  one state dict for one optimizer, a list of them for Muon + AdamW)
- ``training_state.pt``: step, data position (epoch, batch index), RNG states, metric history
- ``session.json``: the draft spec and training settings, and the fingerprint a resume is checked against

The model is saved in float32 (speculators saves bfloat16 by default) so that a resumed run equals the
uninterrupted run bit for bit (:func:`resume_matches` checks it). The directory is written atomically: it appears
complete or not at all.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from safetensors.torch import load_file

from eagle3kit.atomic import atomic_dir, recover
from eagle3kit.draft.model import TRAINING_RECORD
from eagle3kit.errors import UserError


SESSION_FILE = "session.json"
STATE_FILE = "training_state.pt"
OPTIMIZER_FILE = "optimizer_state_dict.pt"
SCHEDULER_FILE = "scheduler_state_dict.pt"


class CheckpointError(UserError):
    """A checkpoint directory that cannot be resumed here, with the reason and the fix."""


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch (CPU and CUDA) random states, in a ``torch.load(weights_only=True)``-safe form."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002
    state = {
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(np.asarray(keys).copy()), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def weights_bytes(model: torch.nn.Module) -> int:
    """The bytes of ``model``'s trained weights in float32: the least its export takes."""
    return sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)


def checkpoint_bytes(model: torch.nn.Module) -> int:
    """The least a checkpoint of ``model`` takes: all its weights as stored, plus one optimizer state per trained
    weight (AdamW keeps two, Muon one)."""
    stored = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return stored + weights_bytes(model)


def save_checkpoint(
    directory: str | os.PathLike,
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[torch.optim.lr_scheduler.LRScheduler],
    state: dict[str, Any],
    session: dict[str, Any],
    training: dict[str, Any] | None = None,
) -> Path:
    """Write one checkpoint directory atomically (see the module docstring for its layout); ``training``: the
    lengths the draft was trained at, as an export records them (:data:`eagle3kit.draft.model.TRAINING_RECORD`)."""
    target = Path(directory)
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        if training is not None:
            (tmp / TRAINING_RECORD).write_text(json.dumps(training, indent=1))
        torch.save(_payload([o.state_dict() for o in optimizers]), tmp / OPTIMIZER_FILE)
        torch.save(_payload([s.state_dict() for s in schedulers]), tmp / SCHEDULER_FILE)
        torch.save({**state, "rng": rng_state()}, tmp / STATE_FILE)
        (tmp / SESSION_FILE).write_text(json.dumps(session, indent=2, sort_keys=True, default=str))
    return target


def _payload(state_dicts: list[dict]) -> dict | list[dict]:
    return state_dicts[0] if len(state_dicts) == 1 else state_dicts  # speculators' legacy single format


def _as_list(loaded: dict | list[dict]) -> list[dict]:
    return loaded if isinstance(loaded, list) else [loaded]


def read_session(directory: str | os.PathLike) -> dict[str, Any]:
    """The ``session.json`` of a checkpoint (after recovering an interrupted replacement); a clear error when
    ``directory`` is not one."""
    path = recover(directory)
    missing = [f for f in (SESSION_FILE, STATE_FILE, OPTIMIZER_FILE, "config.json") if not (path / f).exists()]
    if missing:
        raise CheckpointError(
            f"{str(path)!r} is not an eagle3kit training checkpoint (missing {', '.join(missing)}); "
            "pass a directory written by `eagle3kit train --save DIR` (TrainSession.save)."
        )
    return json.loads((path / SESSION_FILE).read_text())


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], directory: str | os.PathLike) -> None:
    """Refuse a checkpoint made with another configuration, in one sentence naming each field that differs."""
    keys = sorted(set(saved) | set(current))
    differ = [k for k in keys if _canon(saved.get(k)) != _canon(current.get(k))]
    if differ:
        details = "; ".join(f"{k} is {_short(saved.get(k))} there and {_short(current.get(k))} here"
                            for k in differ[:8]) + (f"; and {len(differ) - 8} more" if len(differ) > 8 else "")
        raise CheckpointError(
            f"The checkpoint {str(directory)!r} was made with another configuration ({details}); continue it with "
            f"`eagle3kit train --resume {directory}` (it rebuilds the checkpoint's own configuration), or start a "
            "new run that saves elsewhere."
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _canon(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def saved_step(directory: str | os.PathLike) -> int:
    """The global step a checkpoint holds, read from its state file alone (no session is built)."""
    return int(torch.load(Path(directory) / STATE_FILE, weights_only=True)["global_step"])


def load_training_state(
    directory: str | os.PathLike,
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    schedulers: list[torch.optim.lr_scheduler.LRScheduler],
) -> dict[str, Any]:
    """Restore model weights, optimizer(s), scheduler(s) and RNG from ``directory``; return the saved state dict."""
    path = Path(directory)
    weights = load_file(str(path / "model.safetensors"), device=str(next(model.parameters()).device))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    ignorable = set(getattr(model, "_keys_to_ignore_on_save", None) or [])
    if unexpected or set(missing) - ignorable:
        raise CheckpointError(
            f"The model weights in {str(path)!r} do not fit this draft (missing {sorted(set(missing) - ignorable)}, "
            f"unexpected {sorted(unexpected)}); it was made for another draft configuration."
        )
    opt_states = _as_list(torch.load(path / OPTIMIZER_FILE, weights_only=True))
    sched_states = _as_list(torch.load(path / SCHEDULER_FILE, weights_only=True))
    if len(opt_states) != len(optimizers) or len(sched_states) != len(schedulers):
        raise CheckpointError(f"{str(path)!r} holds {len(opt_states)} optimizer state(s), this run steps "
                              f"{len(optimizers)}; it was made with another optimizer setting.")
    for optimizer, saved in zip(optimizers, opt_states, strict=True):
        optimizer.load_state_dict(saved)
    for scheduler, saved in zip(schedulers, sched_states, strict=True):
        scheduler.load_state_dict(saved)
        for group, lr in zip(scheduler.optimizer.param_groups, scheduler.get_last_lr(), strict=True):
            group["lr"] = lr  # as speculators' checkpointer does after loading a scheduler
    state = torch.load(path / STATE_FILE, weights_only=True)
    set_rng_state(state.pop("rng"))
    return state


@dataclass(frozen=True)
class ResumeMatch:
    """The next step of a run and of the same run resumed from its checkpoint, compared bit for bit."""

    loss: float
    resumed_loss: float
    same_weights: bool

    @property
    def identical(self) -> bool:
        return self.loss == self.resumed_loss and self.same_weights


class Stepping(Protocol):
    """What :func:`resume_matches` needs of a session (a :class:`~eagle3kit.train.session.TrainSession`, which this
    module does not import: the session imports the checkpoints)."""

    model: torch.nn.Module

    def step(self) -> dict[str, Any]: ...


def resume_matches(session: Stepping, resumed: Stepping) -> ResumeMatch:
    """Take one step in ``session`` and one in ``resumed`` (resumed from ``session``'s last checkpoint), then compare
    the two losses and every tensor of the two models for equality."""
    a, b = session.step(), resumed.step()
    mine, theirs = session.model.state_dict(), resumed.model.state_dict()
    same = mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    return ResumeMatch(a["loss"], b["loss"], same)
