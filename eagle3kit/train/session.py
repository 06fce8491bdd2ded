"""Train the EAGLE-3 draft one step at a time: :class:`TrainSession` over speculators' ``Eagle3DraftModel``.

One ``step()`` is exactly one iteration of speculators' ``Trainer.train_epoch`` on one GPU: the packed batch from
its ``ArrowDataset`` + ``MultipackDistributedBatchSamplerV2`` + ``CollateFn`` (eagle3 ``shift_batch``), the model's
own forward (loss and per-TTT-step metrics from ``compute_metrics``), ``clip_grad_norm_(1.0)``, its optimizer(s)
(AdamW, or Muon + AdamW) and warmup/decay schedule (:mod:`eagle3kit.train.loop`), so the same run can be handed
to ``speculators train`` (see :mod:`eagle3kit.train.launch`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pandas as pd
import torch
from speculators.losses import resolve_loss_config
from speculators.train.utils import normalize_counted_metrics

from eagle3kit import validate
from eagle3kit.data.directory import DataDir, as_data_dir
from eagle3kit.data.vocab import build_for_data
from eagle3kit.data.draft_spec import spec_for
from eagle3kit.draft.config import DraftBuild, DraftSpec, build_config, draft_ttt_steps
from eagle3kit.draft.model import save_draft
from eagle3kit.errors import UserError
from eagle3kit.progress import tqdm
from eagle3kit.train import checkpoint as ckpt
from eagle3kit.train.batches import Batches
from eagle3kit.train.forward import forward_for, resolve_path
from eagle3kit.train.live_tau import TAU, LiveTau
from eagle3kit.train.loop import (NonFiniteStep, make_optimizers, make_schedulers, optimizer_args, train_step,
                                  warmup_steps)
from eagle3kit.train.settings import TrainSettings

METRIC_NAMES = ("loss", "full_acc", "cond_acc")  # per TTT step, as speculators' compute_metrics names them


def metric_columns(ttt_steps: int) -> list[str]:
    """A history's metric columns: ``step``, ``loss``, then ``full_acc_k`` and ``cond_acc_k`` for each TTT step."""
    return ["step", "loss"] + [f"{m}_{k}" for m in METRIC_NAMES[1:] for k in range(ttt_steps)]


def step_columns(ttt_steps: int) -> list[str]:
    """The columns that show steps taken one by one: ``step``, ``lr``, ``loss``, ``grad_norm``, ``full_acc_k`` for
    each TTT step, ``tokens`` and ``seconds``."""
    return ["step", "lr", "loss", "grad_norm"] + [f"full_acc_{k}" for k in range(ttt_steps)] + ["tokens", "seconds"]


class RunComplete(UserError):
    """The session has taken every step of its schedule."""


class TrainingDiverged(UserError):
    """The loss (or the gradient) stopped being finite; the weights were left at the last good step."""


class TrainSession:
    """A draft, its optimizer and scheduler, and a position in the data; ``step()`` trains on one packed batch.

    ``data`` is a :class:`~eagle3kit.data.directory.DataDir` or its path (opened here); the session holds that one
    DataDir as :attr:`data` and hands it on (batches, vocab mapping), checked once against the draft.
    ``draft`` is a :class:`DraftBuild`, a :class:`DraftSpec`, a verifier name (str), a ``Path`` to a saved draft
    ``config.json``'s folder (notebook 01's), or None (the verifier the data was made with); the last three get the
    data's draft vocab. Keyword arguments are :class:`TrainSettings` fields.
    """

    def __init__(self, data: DataDir | str | os.PathLike, draft: DraftBuild | DraftSpec | str | os.PathLike
                 | None = None, progress: bool = True, **settings: Any):
        unknown = set(settings) - {f.name for f in dataclasses.fields(TrainSettings)}
        if unknown:
            raise TypeError(f"Unknown training setting(s) {sorted(unknown)}; see TrainSettings for the fields.")
        self.data = as_data_dir(data)
        self.build = _as_build(draft, self.data)
        self.data.for_draft(self.build.verifier, self.build.aux_layer_ids)
        self.device = self.build.device
        if self.device == "cpu" and self.build.attention.implementation in ("simple_flex_attention", "flex_attention"):
            raise UserError(
                f"attn_implementation={self.build.attention.implementation!r} cannot train on CPU (flex attention has "
                "no backward there); build the draft with attn_implementation='auto' or 'sdpa' (`--attn sdpa`)."
            )
        self.settings = TrainSettings(**settings).resolved(self.device)
        s = self.settings
        optimizer_args(s)  # an unknown optimizer is refused before anything is built
        validate.check_all(dataclasses.asdict(s))
        self.attention = resolve_path(s.attention, self.device, self.build.attention.implementation)
        self.progress = progress
        self.dtype = getattr(torch, s.hidden_states_dtype)
        self.ttt_steps = draft_ttt_steps(self.build.config)
        self.batches = Batches(self.data, self.build, s.total_seq_len, s.seed, s.train_data_ratio, self.dtype,
                               s.ranks)
        self.forward = forward_for(self.attention)
        self.forward_kwargs = {"ttt_steps": self.ttt_steps, "ttt_step_loss_decay": s.ttt_step_loss_decay,
                               "loss_config": resolve_loss_config(s.loss_fn, s.loss_implementation)}
        torch.manual_seed(s.seed)
        self.model = build_for_data(self.build, self.data, s.warm_start_layer)
        self.model.train()
        self.optimizers = make_optimizers(self.model, s)  # [AdamW] or [Muon, AdamW], as speculators' Trainer
        self.total_steps = s.max_steps or s.epochs * len(self.batches)
        self.schedulers = make_schedulers(self.optimizers, s, self.total_steps)
        # steps of linear warmup (0 with scheduler_type "none"): step i of it runs at lr * i / warmup_steps
        self.warmup_steps = warmup_steps(s, self.total_steps) if s.scheduler_type != "none" else 0
        self.global_step = 0
        self.history: list[dict[str, Any]] = []
        self.last_checkpoint: Path | None = None
        self.live_tau: LiveTau | None = None  # set by track_tau: τ measured every N steps into the history
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------- stepping
    @property
    def position(self) -> tuple[int, int]:
        """(epoch, index of the next batch within the epoch)."""
        return self.batches.epoch, self.batches.index

    def peek_batch(self) -> dict[str, Any]:
        """The batch the next ``step()`` trains on (not consumed)."""
        return self.batches.peek()

    def step(self) -> dict[str, Any]:
        """Train on the next batch; return its record (loss / full_acc / cond_acc per TTT step, tokens, seconds, lr).

        Raises :class:`TrainingDiverged` (weights untouched, position not advanced) when the loss or the gradient
        is not finite.
        """
        with self._lock:
            self._check_not_complete()
            t0 = time.perf_counter()
            batches = self.batches.peek_ranks()
            t_data = time.perf_counter() - t0
            lr = self.optimizers[-1].param_groups[0]["lr"]  # the AdamW (base) group's LR
            try:
                loss, metrics, grad_norm = train_step(self.model, self.optimizers, self.schedulers, batches,
                                                      self.forward, self.step_kwargs(), self.autocast)
            except NonFiniteStep as bad:
                where = f"; the last good checkpoint is {self.last_checkpoint}" if self.last_checkpoint else ""
                raise TrainingDiverged(
                    f"Step {self.global_step + 1} (epoch {self.batches.epoch}, batch {self.batches.index}) gave a "
                    f"{bad}; the weights were not updated{where}. Lower lr (now {lr:g}) or check the data (NaN "
                    "hidden states)."
                ) from None
            stacked = torch.stack([v.float().reshape(()) for v in metrics.values()]).tolist()  # one sync
            values = dict(zip(metrics, stacked, strict=True))
            seconds = time.perf_counter() - t0
            epoch, index = self.position
            self.batches.advance()
            self.global_step += 1
            tokens = sum(int((b["document_ids"] != -1).sum()) for b in batches)
            record = {"step": self.global_step, "epoch": epoch, "batch": index,
                      **normalize_counted_metrics(values, len(batches)), "tokens": tokens,
                      "loss_tokens": sum(int(b["loss_mask"].sum()) for b in batches), "seconds": seconds,
                      "data_seconds": t_data, "tokens_per_s": tokens / seconds, "lr": lr, "grad_norm": float(grad_norm)}
            self.history.append(record)
            if self.live_tau is not None and self.live_tau.due(self.global_step):
                record.update(self.live_tau.measure(self.model))
            return record

    def step_kwargs(self) -> dict[str, Any]:
        """The forward's arguments for the next step: 1 TTT step during the curriculum's first part, if any."""
        if self.global_step < self.settings.ttt_curriculum * self.total_steps:
            return {**self.forward_kwargs, "ttt_steps": 1}
        return self.forward_kwargs

    def track_tau(self, every: int | None = None, **prompts: Any) -> LiveTau:
        """From now on, every ``every`` steps (default :data:`eagle3kit.train.live_tau.EVERY`) measure the draft's
        simulated τ on held-out prompts into the step's record (``tau``, ``tau_seconds``, ``tau_prompts``);
        ``prompts``: the :meth:`LiveTau.for_session` sizes (and ``verifier``, one already loaded). The verifier's
        replies are written here, once: a session resumed and tracked again with the same sizes measures on the same
        prompts."""
        self.live_tau = LiveTau.for_session(self, **({"every": every} if every else {}), **prompts)
        return self.live_tau

    def best_tau(self) -> float | None:
        """The highest live τ the history holds (None before the first measurement)."""
        taus = [r[TAU] for r in self.history if r.get(TAU) is not None]
        return max(taus) if taus else None

    def run(self, n: int, callback: Callable[[dict], Any] | None = None,
            checkpoint_dir: str | os.PathLike | None = None,
            checkpoint_every: int | None = None, best_tau_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
        """Take up to ``n`` steps with a tqdm bar; ``callback(record)`` after each; ``request_stop()`` ends it after
        the current step. With ``checkpoint_dir``, save every ``checkpoint_every`` steps and at the end; on a
        non-finite loss the last good checkpoint is kept and the error is raised. With ``best_tau_dir`` (and
        :meth:`track_tau`), a step whose live τ beats every earlier one is saved there too."""
        if n > 0:
            self._check_not_complete()
        done: list[dict[str, Any]] = []
        bar = tqdm(total=n, desc="train", unit="step", disable=not self.progress)
        try:
            for _ in range(n):
                if self._stop.is_set():
                    break
                best = self.best_tau()
                record = self.step()
                done.append(record)
                if best_tau_dir and record.get(TAU) is not None and (best is None or record[TAU] > best):
                    self.save(best_tau_dir)
                bar.update(1)
                bar.set_postfix(loss=f"{record['loss']:.4f}", tok_s=f"{record['tokens_per_s']:.0f}")
                if callback is not None:
                    callback(record)
                if checkpoint_dir and checkpoint_every and self.global_step % checkpoint_every == 0:
                    self.save(checkpoint_dir)
        finally:
            bar.close()
            self._stop.clear()
        if checkpoint_dir and done and not (checkpoint_every and self.global_step % checkpoint_every == 0):
            self.save(checkpoint_dir)
        return done

    def _check_not_complete(self) -> None:
        if self.global_step >= self.total_steps:
            raise RunComplete(
                f"The run is complete: it has taken all {self.total_steps} steps of its LR schedule; to train "
                "further, start a new run with a larger --max-steps (or more --epochs) that saves elsewhere."
            )

    def request_stop(self) -> None:
        """Ask the current (or, if none runs, the next) ``run()`` to stop after its current step."""
        self._stop.set()

    def history_frame(self):
        """The history as a pandas DataFrame (one row per step)."""
        return pd.DataFrame(self.history)

    def autocast(self):
        """The precision the session trains in: bf16 autocast when hidden_states_dtype is bfloat16, else none."""
        if self.dtype != torch.float32:  # as speculators' Trainer does on CUDA; the same on CPU
            return torch.autocast(self.device.split(":")[0], dtype=self.dtype)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------------------------------- checkpoints
    def _resolved_spec(self) -> dict[str, Any]:
        """The draft's spec with the aux layers it was built with (a spec that left them to the data names them)."""
        return {**dataclasses.asdict(self.build.spec), "aux_layer_ids": list(self.build.aux_layer_ids)}

    def fingerprint(self) -> dict[str, Any]:
        """What defines the run, flat: a checkpoint must share it to be resumed by this session.

        The draft is named by its spec (the config is built from it), not by the config object, which speculators'
        ``save_pretrained`` changes (``architectures``, ``auto_map``, ``dtype``). ``warm_start_layer`` is left out:
        it only sets the step-0 weights, and a checkpoint carries its own."""
        spec = {f"draft.{k}": v for k, v in self._resolved_spec().items()
                if k not in ("verifier", "attn_implementation", "training")}
        settings = {k: v for k, v in dataclasses.asdict(self.settings).items()
                    if k not in ("warm_start_layer", "attention")}  # a start value; the same loss either path
        return {"data_dir": self._data_path, "data_rows": len(self.batches.dataset),
                "verifier": self.build.verifier.path, "attention": self.build.attention.implementation,
                "device": self.device, **spec, **settings}

    @property
    def _data_path(self) -> str:
        """The data directory's absolute path, as a checkpoint records it."""
        return str(self.data.path.resolve())

    def save(self, directory: str | os.PathLike) -> Path:
        """Checkpoint: speculators' model dir + optimizer, scheduler, RNG, data position and history (atomic)."""
        with self._lock:
            state = {"global_step": self.global_step, "epoch": self.batches.epoch, "index": self.batches.index,
                     "history": self.history}
            session = {"fingerprint": self.fingerprint(), "spec": self._resolved_spec(),
                       "settings": dataclasses.asdict(self.settings), "data_dir": self._data_path}
            self.last_checkpoint = ckpt.save_checkpoint(directory, self.model, self.optimizers, self.schedulers,
                                                        state, session, self.training_record())
            return self.last_checkpoint

    def load(self, directory: str | os.PathLike, _saved: dict | None = None, _moved_data: bool = False
             ) -> TrainSession:
        """Restore a checkpoint made by a session with this very configuration (else a clear error)."""
        saved = dict((_saved or ckpt.read_session(directory))["fingerprint"])
        if _moved_data:
            saved["data_dir"] = self._data_path
        ckpt.check_fingerprint(saved, self.fingerprint(), directory)
        with self._lock:
            state = ckpt.load_training_state(directory, self.model, self.optimizers, self.schedulers)
            self.global_step = state["global_step"]
            self.batches.seek(state["epoch"], state["index"])
            self.history = list(state["history"])
            self.last_checkpoint = Path(directory)
        return self

    @classmethod
    def resume(cls, directory: str | os.PathLike, data_dir: str | os.PathLike | None = None,
               progress: bool = True) -> TrainSession:
        """Rebuild the session a checkpoint was made by and restore it (``data_dir`` if the data moved)."""
        saved = ckpt.read_session(directory)
        session = cls(data_dir or saved["data_dir"], DraftSpec(**saved["spec"]), progress=progress,
                      **saved["settings"])
        return session.load(directory, _saved=saved, _moved_data=data_dir is not None)

    def export(self, directory: str | os.PathLike, dtype: str = "float32") -> Path:
        """The draft alone in speculators' format (``save_pretrained``), written atomically, with what it was trained
        on (:func:`training_record`) beside it."""
        with self._lock:
            return save_draft(self.model, directory, dtype, training=self.training_record())

    def training_record(self) -> dict[str, Any]:
        """The lengths the draft was trained at: ``total_seq_len`` (a pack), the data's ``seq_length`` (the cap its
        documents were cut to) and ``longest_document`` (the longest training sample: positions restart per document,
        so the draft never saw a longer context), the steps."""
        return {"total_seq_len": self.settings.total_seq_len, "seq_length": self.data.seq_length,
                "longest_document": int(max(self.batches.dataset.approx_lengths)),
                "steps": self.global_step, "ttt_steps": self.ttt_steps}


def _as_build(draft: DraftBuild | DraftSpec | str | os.PathLike | None, data: DataDir) -> DraftBuild:
    """``draft`` as a build for ``data``: a build as it is, else the spec :func:`spec_for` infers from the data."""
    return draft if isinstance(draft, DraftBuild) else build_config(spec_for(draft, data))
