"""What a rehearsal of speculators' trainer finds that ``speculators train --dry-run`` cannot: checks of the run
before it starts (its YAML and the save path it writes into) and of how it ended (its records and log), each as one
finding instead of a traceback.

:func:`before` reads the resolved ``TrainConfig`` and the save path; :func:`after` reads a
:class:`~eagle3kit.train.rehearsal.run.Rehearsal`. The failures and their public references are rows of
docs/failures.md ("The trainer, rehearsed").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from eagle3kit.doctor.findings import Finding
from eagle3kit.train.rehearsal.run import EXTRA_STEP_PER_EPOCH, Rehearsal

WORLD_SIZE = re.compile(r"^# World size: (\d+)", re.M)  # speculators' train_command.txt records it


def before(config, ranks: int, save_path: str | Path | None = None) -> list[Finding]:
    """The run a resolved ``config`` describes, on ``ranks`` ranks; with ``save_path``, what that folder already
    holds (a rerun resumes from it)."""
    f = config.flatten()
    found = []
    if f.get("max_steps") and f.get("epochs", 1) > 1:
        found.append(Finding(
            "warning", f"max_steps {f['max_steps']} with epochs {f['epochs']}: speculators takes more steps",
            EXTRA_STEP_PER_EPOCH + f"; when max_steps ends epoch 0 early this run takes up to {f['epochs'] - 1} "
            "more steps, with a validation pass and a checkpoint each",
            "set epochs: 1 when max_steps should end the run (or drop max_steps)", "max_steps_epochs"))
    if save_path is not None:
        found += save_path_findings(f, ranks, Path(save_path))
    return found


def save_path_findings(f: dict, ranks: int, save: Path) -> list[Finding]:
    """A save path that already holds a run: speculators resumes it, whatever the new YAML says."""
    epochs = sorted(int(p.name) for p in save.iterdir() if p.name.isdigit() and p.is_dir()) if save.is_dir() else []
    if not epochs:
        return []
    last = save / str(epochs[-1])
    state = _json(last / "training_state.json")
    found = []
    if not state.get("local_step") and epochs[-1] + 1 >= f.get("epochs", 1):
        found.append(Finding(
            "error", f"{save} holds a finished run (epoch {epochs[-1]} of {f.get('epochs', 1)}): this run trains 0 "
            "steps", "speculators resumes from the newest numbered checkpoint in save_path and starts at the next "
            "epoch; past the last epoch it exits 0 without training", "use a new save_path, or "
            "`--no-resume-from-checkpoint` to start over there", "save_path_finished"))
    command = last / "train_command.txt"
    written = WORLD_SIZE.search(command.read_text()) if command.exists() else None
    if written and int(written.group(1)) != ranks and state.get("local_step"):
        found.append(Finding(
            "warning", f"resuming a mid-epoch checkpoint of a {written.group(1)}-rank run with {ranks} rank(s)",
            f"training_state.json says local_step {state['local_step']}: a batch index of the old run's per-rank "
            f"sampler; with {ranks} rank(s) the sampler splits the epoch differently, so the resumed epoch repeats "
            "some samples and skips others", f"resume with {written.group(1)} ranks, or let the epoch end before "
            "changing the world size", "resume_world_size"))
    dtype = _weights_dtype(last / "model.safetensors")
    if dtype in ("BF16", "F16") and (state.get("local_step") or epochs[-1] + 1 < f.get("epochs", 1)):
        found.append(Finding(
            "info", f"the run resumes from {save / str(epochs[-1])}, whose weights and optimizer state are stored in "
            f"{'bfloat16' if dtype == 'BF16' else 'float16'}", "speculators' checkpointer rounds the float32 master "
            "weights and the optimizer's moments when it saves them; the resumed run continues from the rounded "
            "state, so it is near the uninterrupted run, not equal to it", "nothing to fix for a real run; compare "
            "runs that were never interrupted when you need them equal", "resume_bf16"))
    changed = _changed_fields(save / "run.yaml", f)
    if changed:
        found.append(Finding(
            "warning", f"{save} holds a run with other settings: {', '.join(changed[:4])}",
            "speculators resumes the old run's weights, optimizer and LR schedule (its scheduler state overrides "
            "the new lr and warmup) and only the new fields it reads later take effect", "use a new save_path for "
            "a changed run", "save_path_other_run"))
    return found


IGNORED = {"save_path", "log_dir", "num_workers", "max_steps", "epochs", "checkpoint_freq"}  # may change on a rerun


def _changed_fields(saved_yaml: Path, f: dict) -> list[str]:
    if not saved_yaml.exists():
        return []
    saved: dict = {}
    for group in (yaml.safe_load(saved_yaml.read_text()) or {}).get("train", {}).values():
        saved.update(group if isinstance(group, dict) else {})
    return [f"{k} {saved[k]!r} -> {f.get(k)!r}" for k in sorted(saved) if k not in IGNORED and k in f
            and saved[k] != f[k]]


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
