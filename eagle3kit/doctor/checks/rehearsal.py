"""What a rehearsal of speculators' trainer finds that ``speculators train --dry-run`` cannot: checks of the run
before it starts (its YAML and the save path it writes into) and of how it ended (its records and log), each as one
finding instead of a traceback.

:func:`before` reads the resolved ``TrainConfig`` and the save path; :func:`after` reads a
:class:`~eagle3kit.train.rehearsal.run.Rehearsal`. The failures and their public references are rows of
docs/failures.md ("The trainer, rehearsed").
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

from eagle3kit.doctor.findings import Finding
from eagle3kit.train.rehearsal.run import EXTRA_STEP_PER_EPOCH, Rehearsal

WORLD_SIZE = re.compile(r"^# World size: (\d+)", re.M)  # speculators' train_command.txt records it


def before(config, ranks: int, save_path: str | Path | None = None) -> list[Finding]:
    """The run a resolved ``config`` describes, on ``ranks`` ranks (its schedule, its data against its draft); with
    ``save_path``, what that folder already holds (a rerun resumes from it)."""
    f = config.flatten()
    found = []
    if f.get("max_steps") and f.get("epochs", 1) > 1:
        found.append(Finding(
            "warning", f"max_steps {f['max_steps']} with epochs {f['epochs']}: speculators takes more steps",
            EXTRA_STEP_PER_EPOCH + f"; when max_steps ends epoch 0 early this run takes up to {f['epochs'] - 1} "
            "more steps, with a validation pass and a checkpoint each",
            "set epochs: 1 when max_steps should end the run (or drop max_steps)", "max_steps_epochs"))
    found += data_findings(f, ranks)
    if save_path is not None:
        found += save_path_findings(f, ranks, Path(save_path))
    return found


def data_findings(f: dict, ranks: int) -> list[Finding]:
    """The data against the draft and the ranks: states per token, and a validation split every rank can draw."""
    from eagle3kit.data.directory import DataDir
    from eagle3kit.data.loader import batch_sampler, load_dataset

    if not Path(f["data_path"]).is_dir():
        return []  # the trainer names it (path_missing); a cluster YAML may name a path of another machine
    found = []
    data = DataDir.open(f["data_path"])
    wanted = len(f.get("target_layer_ids") or []) + 1
    if f.get("target_layer_ids") and data.n_states and data.n_states != wanted:
        found.append(Finding(
            "error", f"the data holds {data.n_states} hidden states per token; the draft reads {wanted} "
            f"(target_layer_ids {list(f['target_layer_ids'])} + the last layer)", "speculators' dry run never opens "
            "the data; the first step fails on fc's shape", "use the target_layer_ids the data was made with, or "
            "remake the data for these layers", "hidden_state_count"))
    val = load_dataset(data.path, f["total_seq_len"], train_ratio=f["train_data_ratio"], split="val")
    if len(val) and not len(batch_sampler(val, f["total_seq_len"], f["seed"], ranks)):
        found.append(Finding(
            "warning", f"{len(val)} validation sample(s) for {ranks} ranks: no validation runs",
            "speculators' sampler drops a tail smaller than the world size; with no validation loss it writes no "
            "val_metrics.json and no checkpoint_best", "lower train_data_ratio so the validation split has more "
            "samples than ranks", "validation_empty"))
    return found


def save_path_findings(f: dict, ranks: int, save: Path) -> list[Finding]:
    """A save path that already holds a run: speculators resumes its newest numbered checkpoint, whatever the new
    YAML says."""
    epochs = sorted(int(p.name) for p in save.iterdir() if p.name.isdigit() and p.is_dir()) if save.is_dir() else []
    if not epochs:
        return []
    last = save / str(epochs[-1])
    if _weights_dtype(last / "model.safetensors") is None:
        return [Finding("error", f"the newest checkpoint {last} is incomplete (no readable model.safetensors)",
                        "speculators resumes from the highest numbered folder without checking it and fails to load "
                        "it; the run cannot start again until it is moved", f"move {last} aside (a name that is not a "
                        "number), then rerun", "checkpoint_incomplete")]
    state = _json(last / "training_state.json")
    saved = _saved_yaml(save / "run.yaml")
    world = WORLD_SIZE.search((last / "train_command.txt").read_text()) if (last / "train_command.txt").exists() \
        else None
    written_ranks = int(world.group(1)) if world else ranks
    return (_ended(f, save, epochs[-1], state, written_ranks) + _world(state, written_ranks, ranks)
            + _precision(f, save, last, epochs[-1], state) + _changed(saved, f, save))


def _ended(f: dict, save: Path, epoch: int, state: dict, ranks: int) -> list[Finding]:
    """An end-of-epoch checkpoint: a finished run, or an epoch that max_steps cut short but speculators marked done."""
    if state.get("local_step"):
        return []  # a mid-epoch checkpoint: the rerun goes on within that epoch
    from eagle3kit.train.rehearsal.resume import epoch_batches

    per_epoch = epoch_batches(f, ranks) if state and Path(f["data_path"]).is_dir() else None
    done = state.get("global_step", 0) - epoch * (per_epoch or 0)
    if per_epoch and 0 < done < per_epoch:
        return [Finding(
            "error", f"epoch {epoch} in {save} was cut by max_steps after {done} of its {per_epoch} batches, and "
            "saved as finished", "speculators saves the checkpoint max_steps stops at as an end-of-epoch one "
            "(local_step 0): a rerun starts at the next epoch, so the rest of this epoch is never trained "
            f"({'and with epochs 1 nothing is' if epoch + 1 >= f.get('epochs', 1) else 'it resumes at the next'})",
            "use a new save_path for the real run, or a max_steps of whole epochs", "epoch_cut_by_max_steps")]
    if epoch + 1 >= f.get("epochs", 1):
        return [Finding(
            "error", f"{save} holds a finished run (epoch {epoch} of {f.get('epochs', 1)}): this run trains 0 steps",
            "speculators resumes from the newest numbered checkpoint in save_path and starts at the next epoch; past "
            "the last epoch it exits 0 without training", "use a new save_path, or `--no-resume-from-checkpoint` to "
            "start over there", "save_path_finished")]
    return []


def _world(state: dict, written: int, ranks: int) -> list[Finding]:
    if written == ranks or not state.get("local_step"):
        return []
    return [Finding(
        "warning", f"resuming a mid-epoch checkpoint of a {written}-rank run with {ranks} rank(s)",
        f"training_state.json says local_step {state['local_step']}: a batch index of the old run's per-rank sampler; "
        f"with {ranks} rank(s) the sampler splits the epoch differently, so the resumed epoch repeats some samples "
        "and skips others", f"resume with {written} ranks, or let the epoch end before changing the world size",
        "resume_world_size")]


def _precision(f: dict, save: Path, last: Path, epoch: int, state: dict) -> list[Finding]:
    dtype = _weights_dtype(last / "model.safetensors")
    if dtype not in ("BF16", "F16") or not (state.get("local_step") or epoch + 1 < f.get("epochs", 1)):
        return []
    return [Finding(
        "info", f"the run resumes from {last}, whose weights and optimizer state are stored in "
        f"{'bfloat16' if dtype == 'BF16' else 'float16'}", "speculators' checkpointer rounds the float32 master "
        "weights and the optimizer's moments when it saves them; the resumed run continues from the rounded state, "
        "so it is near the uninterrupted run, not equal to it", "nothing to fix for a real run; compare runs that "
        "were never interrupted when you need them equal", "resume_bf16")]


BREAKING = {  # a change of these in a resumed save path fails (or would fail) when speculators loads its state
    "fsdp_shard": "the optimizer state is keyed by index without --fsdp-shard and by name with it: resumed with "
                  "FSDP the run trains, then fails at its first checkpoint save",
    "optimizer": "the saved optimizer state has other parameter groups: loading it fails at start",
    "scheduler_type": "a run saved without a scheduler has no initial_lr to resume one from: it fails at start",
    "num_layers": "the draft has other tensors: the weights load partly (strict=False) and the optimizer fails",
    "draft_vocab_size": "the draft has other tensors: the weights load partly (strict=False) and the optimizer fails",
}


def _changed(saved: dict, f: dict, save: Path) -> list[Finding]:
    keys = sorted({k for k in saved if k in f and k not in IGNORED} | {"fsdp_shard"})
    pairs = {k: (saved.get(k, False), f.get(k, False)) if k == "fsdp_shard" else (saved[k], f[k]) for k in keys}
    changed = {k: v for k, v in pairs.items() if v[0] != v[1]}
    breaking = {k: v for k, v in changed.items() if k in BREAKING
                and not (k == "fsdp_shard" and not v[1])}  # FSDP's checkpoint resumes without FSDP
    text = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in list(changed.items())[:4])
    if breaking:
        return [Finding("error", f"{save} holds a run with other settings: {text}",
                        "; ".join(BREAKING[k] for k in breaking), "use a new save_path for a changed run, or "
                        "`--from-pretrained` the old checkpoint to start a new run from its weights",
                        "resume_changed_run")]
    if changed:
        return [Finding("warning", f"{save} holds a run with other settings: {text}",
                        "speculators resumes the old run's weights, optimizer and LR schedule (its scheduler state "
                        "overrides the new lr and warmup); only what it reads later takes effect",
                        "use a new save_path for a changed run", "save_path_other_run")]
    return []


IGNORED = {"save_path", "log_dir", "num_workers", "max_steps", "epochs", "checkpoint_freq"}  # may change on a rerun


def _saved_yaml(path: Path) -> dict:
    """The flat fields of the run.yaml speculators saved into a save path ({} when there is none)."""
    if not path.exists():
        return {}
    saved: dict = {}
    for key, group in (yaml.safe_load(path.read_text()) or {}).get("train", {}).items():
        saved.update(group if isinstance(group, dict) else {key: group})
    return saved


def _weights_dtype(path: Path) -> str | None:
    """The dtype of the first float tensor in a safetensors file's header (``BF16``, ``F32``, ...)."""
    try:
        with open(path, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
    except (OSError, ValueError):
        return None
    return next((v["dtype"] for k, v in header.items() if k != "__metadata__" and v["dtype"].startswith(("F", "BF"))),
                None)


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


FAILURES = (  # (pattern in the trainer's log, check, what, fix); the first that matches names the failure
    (r"No accelerator found|Found no NVIDIA driver", "trainer_accelerator",
     "speculators' trainer found no accelerator", "rehearse it with `eagle3kit rehearse` (the CPU presented as the "
     "accelerator), or run it on a GPU"),
    (r"Failed to load hidden states for sample (\d+)", "hidden_states_missing",
     "the hidden states of sample {0} could not be loaded (its hidden_states/hs_{0}.safetensors is missing or "
     "unreadable)", "finish the data (`eagle3kit data` resumes it; `eagle3kit doctor --data DIR` lists what is "
     "missing), or set on_missing: generate with a vLLM endpoint"),
    (r"FileNotFoundError: (?:Directory|File) (\S+) not found|(?:FileNotFoundError|No such file or directory)"
     r"[^\n]*?'([^']+)'", "path_missing",
     "a path in the YAML does not exist where the trainer runs: {0}", "copy it there, or edit the YAML's path "
     "for that machine"),
    (r"OutOfMemoryError|out of memory", "out_of_memory", "the step ran out of memory",
     "lower total_seq_len, use the fused loss on GPUs, or shard with --fsdp-shard (`eagle3kit plan` sizes it)"),
)


def after(run: Rehearsal) -> list[Finding]:
    """How the rehearsal ended: killed, failed (the cause in one line), trained no step, or more steps than asked."""
    records = run.metrics()
    steps = len(records)
    wanted = run.overrides.get("max_steps")
    found = []
    if run.returncode == 124:
        found.append(Finding("error", "the rehearsal did not end in time and was stopped", run.log_tail(3),
                             "raise --timeout, or rehearse fewer --steps", "rehearsal_timeout"))
    elif run.returncode != 0:
        log = run.log.read_text(errors="replace") if run.log.exists() else ""
        killed = re.search(r"exitcode: -9\) local_rank: (\d+)", log)  # torchrun's line for a SIGKILLed rank
        if killed:
            found.append(Finding("error", f"rank {killed.group(1)} was killed (SIGKILL) after step {steps}",
                                 "a killed rank takes the job down: torchrun stops the others",
                                 "rerun into the same save path (`eagle3kit rehearse --rerun`): speculators resumes "
                                 "from its newest checkpoint", "rank_killed"))
        else:
            found.append(_failure(log, run.returncode))
    elif steps == 0:
        found.append(Finding("error", "speculators' trainer exited 0 without training a step",
                             "it resumed a run in the save path that had already ended (see the findings before "
                             "the run)", "use a new save path", "no_steps"))
    elif not records["loss"].map(math.isfinite).all():
        first = int(records.loc[~records["loss"].map(math.isfinite), "step"].min())
        found.append(Finding(
            "error", f"the loss is not finite from step {first} on, and the trainer went on (exit 0)",
            "speculators checks hidden states for NaN/Inf only when it generates them, not when it reads stored "
            "files, and clip_grad_norm_ does not stop on NaN: every later step and checkpoint (checkpoint_best "
            "included) hold NaN weights", "find the file: `eagle3kit doctor --data DIR` checks every stored hidden "
            "state for NaN/Inf; remake it and discard the checkpoints written after that step", "loss_not_finite"))
    elif wanted and steps > wanted:
        found.append(Finding("warning", f"speculators took {steps} steps for max_steps {wanted}",
                             EXTRA_STEP_PER_EPOCH, "set epochs: 1 when max_steps should end the run",
                             "max_steps_epochs"))
    return found


def _failure(log: str, code: int) -> Finding:
    for pattern, check, what, fix in FAILURES:
        match = re.search(pattern, log)
        if match:
            return Finding("error", what.format(*filter(None, match.groups())), _last_error(log), fix, check)
    return Finding("error", f"speculators' trainer failed (exit {code})", _last_error(log),
                   "read the log beside the records (trainer.log)", "trainer_failed")


def _last_error(log: str) -> str:
    errors = [line.split("]: ", 1)[-1] for line in log.splitlines()
              if re.match(r"^(\[rank\d+\]: )?\w*(Error|Exception)\b", line)]
    return errors[-1][:300] if errors else "no error line in the log"
