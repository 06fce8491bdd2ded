"""Run speculators' own trainer on a ``run.yaml`` for a few steps, here: one process, or N ranks under ``torchrun``
(gloo), with or without ``--fsdp-shard``; its per-step records, checkpoints and log land in one folder.

What changes from the YAML is passed as ``speculators train`` flags, never edited into it, and listed in
:attr:`Rehearsal.overrides`: the save and log paths (the rehearsal's own folder), the step budget (``--max-steps``
with ``--epochs 1``, since :data:`EXTRA_STEP_PER_EPOCH`), data-loader workers, and where no accelerator is
available what a CPU cannot train (flex attention has no CPU backward, the fused loss is Triton, bf16 is compared
exactly only in float32). speculators writes the YAML it resolved (overrides included) into the save path: that is the
run a :class:`~eagle3kit.train.session.TrainSession` reproduces (:mod:`eagle3kit.train.rehearsal.compare`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from eagle3kit import validate
from eagle3kit.errors import UserError
from eagle3kit.progress import tqdm
from eagle3kit.train.handoff import last_checkpoint, read_metrics
from eagle3kit.train.rehearsal import cpu

ENTRY = "eagle3kit.train.rehearsal.entry"
PREEMPT_ENV = "EAGLE3KIT_PREEMPT"  # "STEP:RANK": that rank SIGKILLs itself right after logging step STEP
EXTRA_STEP_PER_EPOCH = ("speculators 0.9.0 checks max_steps only after a step (Trainer.train_epoch): once max_steps "
                        "is reached, each further epoch still takes one step")
CPU_CANNOT = {  # field: (value the CPU trains instead, why)
    "draft_attn_impl": ("sdpa", "flex attention has no backward on a CPU"),
    "loss_implementation": ("eager", "the fused loss is a Triton kernel (GPU only)"),
    "hidden_states_dtype": ("float32", "exact on a CPU, so speculators' and the session's runs compare step by step"),
}


@dataclasses.dataclass
class Rehearsal:
    """One run of speculators' trainer: what ran, how it ended, and where its records and checkpoints are."""

    yaml: Path
    out: Path
    ranks: int
    fsdp: bool
    command: list[str]
    overrides: dict[str, Any]
    returncode: int
    seconds: float
    log: Path
    metrics_path: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def save_path(self) -> Path:
        return save_path(self.out)

    @property
    def resolved_yaml(self) -> Path:
        """The config speculators resolved (the YAML plus the overrides), as it saved it next to its checkpoints."""
        return self.save_path / "run.yaml"

    def metrics(self) -> pd.DataFrame:
        """speculators' per-step records (rank 0, all-reduced over ranks), one row per step."""
        return read_metrics(self.metrics_path)

    def checkpoint(self) -> Path:
        """speculators' ``checkpoint_best`` when it wrote one, else its last epoch folder."""
        best = self.save_path / "checkpoint_best"
        return best.resolve() if best.exists() else last_checkpoint(self.save_path)

    def log_tail(self, lines: int = 12) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


def save_path(out: str | os.PathLike) -> Path:
    """Where a rehearsal into ``out`` has speculators write its checkpoints."""
    return Path(out).resolve() / "checkpoints"


def overrides_table(yaml: str | os.PathLike, flags: dict[str, Any]) -> pd.DataFrame:
    """Each flag that changes the YAML's value: the YAML's, the rehearsal's, and why."""
    from eagle3kit.train.launch import validate_yaml

    flat = validate_yaml(yaml).flatten()
    why = {"num_workers": "data-loader workers per rank (0: batches made in the rank's own process)",
           "max_steps": "the rehearsal's step budget", "epochs": EXTRA_STEP_PER_EPOCH,
           "data_path": "this machine's copy of the data (--data)",
           **{k: v for k, (_, v) in CPU_CANNOT.items()}}
    return pd.DataFrame([{"field": k, "YAML": flat.get(k), "rehearsed with": v, "why": why.get(k, "asked for")}
                         for k, v in flags.items() if flat.get(k) != v], columns=["field", "YAML", "rehearsed with",
                                                                                  "why"])


def overrides(config, steps: int | None, num_workers: int, here_cpu: bool) -> dict[str, Any]:
    """The ``speculators train`` flags a rehearsal adds to the YAML (``config``: its resolved ``TrainConfig``)."""
    flat = config.flatten()
    out: dict[str, Any] = {"num_workers": num_workers}
    if steps is not None:
        out.update(max_steps=steps, epochs=1)
    if here_cpu:
        out.update({k: v for k, (v, _) in CPU_CANNOT.items() if flat.get(k) != v})
    return out


def local_data(yaml: str | os.PathLike, data: str | os.PathLike | None) -> dict[str, str]:
    """The ``data_path`` flag of a rehearsal told this machine's copy of the data (``data``), else nothing; a YAML
    whose data_path is not a folder here (the cluster's) is refused, naming ``--data``."""
    from eagle3kit.train.launch import validate_yaml

    if data is not None:
        return {"data_path": str(Path(data).resolve())}
    path = validate_yaml(yaml).data.data_path
    if not Path(path).is_dir():
        raise UserError(f"{yaml} trains on data_path {path}, not a folder on this machine (the cluster's?); rehearse "
                        "it on this machine's copy with `--data DIR`.")
    return {}


def flags_for(yaml: str | os.PathLike, steps: int | None = 3, num_workers: int = 0,
              extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every flag a rehearsal of ``yaml`` adds (:func:`overrides` on this machine, then ``extra``)."""
    from eagle3kit.train.launch import validate_yaml

    return {**overrides(validate_yaml(yaml), steps, num_workers, cpu.needed()), **(extra or {})}


def resolved(yaml: str | os.PathLike, flags: dict[str, Any]):
    """The ``TrainConfig`` speculators will train: ``yaml`` with ``flags`` on top, as its command line resolves it."""
    from speculators.train.config import TrainConfig

    return TrainConfig.from_sources(cli=dict(flags), config_path=str(yaml),
                                    argv=["speculators", "train", "--config", str(yaml)])


def command(yaml: Path, out: Path, ranks: int, fsdp: bool, flags: dict[str, Any], metrics: Path) -> list[str]:
    """The command: speculators' entry point in one process, or under torchrun with ``ranks`` processes."""
    run = [sys.executable, "-m", ENTRY] if ranks == 1 and not fsdp else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "-m", ENTRY]
    args = ["--config", str(yaml), "--save-path", str(save_path(out)), "--log-dir", str(out / "logs")]
    for key, value in flags.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return [*run, "--metrics", str(metrics), "--", *args, *(["--fsdp-shard"] if fsdp else [])]


def rehearse(yaml: str | os.PathLike, out: str | os.PathLike, ranks: int = 1, fsdp: bool = False,
             steps: int | None = 3, num_workers: int = 0, resume: bool = False, timeout: float = 600,
             progress: bool = True, preempt_at_step: int | None = None, preempt_rank: int = 0,
             extra: dict[str, Any] | None = None) -> Rehearsal:
    """Run speculators' trainer on ``yaml`` into ``out`` (``out/checkpoints``, ``metrics.jsonl``, ``trainer.log``).

    ``steps``: a step budget (None: the YAML's own). ``resume``: keep ``out/checkpoints`` so speculators resumes
    from it, as a rerun of a cluster job would (else it is cleared first); the rerun's log and records go beside
    the first run's. ``preempt_at_step``: rank
    ``preempt_rank`` is killed with SIGKILL right after it logs that step (a preempted node). ``extra``: further
    ``speculators train`` flags. Returns when the trainer exits (a failed run is returned, not raised; see
    :func:`eagle3kit.train.rehearsal.diagnose.diagnose`).
    """
    validate.check("ranks", ranks, "e.g. `--ranks 2`.")
    if fsdp and ranks < 2:
        raise UserError("--fsdp shards the draft over ranks: rehearse it with --ranks 2 or more.")
    yaml, out = Path(yaml).resolve(), Path(out).resolve()
    flags = flags_for(yaml, steps, num_workers, extra)
    if not resume:
        shutil.rmtree(save_path(out), ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    log, metrics = _records(out, resume)
    cmd = command(yaml, out, ranks, fsdp, flags, metrics)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    if preempt_at_step is not None:
        env[PREEMPT_ENV] = f"{preempt_at_step}:{preempt_rank}"
    total = flags.get("max_steps") or resolved(yaml, flags).flatten().get("max_steps")
    t0 = time.perf_counter()
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        code = _wait(proc, metrics, total, timeout, progress, ranks)
    return Rehearsal(yaml, out, ranks, fsdp, cmd, flags, code, time.perf_counter() - t0, log, metrics)


def _records(out: Path, rerun: bool) -> tuple[Path, Path]:
    """The log and records of a run into ``out``: ``trainer.log`` / ``metrics.jsonl``, a rerun's beside them
    (``trainer.rerun1.log`` / ``metrics.rerun1.jsonl``, ...), so the interrupted run's stay readable."""
    n = 0
    if rerun:
        n = 1 + max([int(p.suffixes[0][6:]) for p in out.glob("trainer.rerun*.log")], default=0)
    tag = f".rerun{n}" if n else ""
    for old in (out / f"trainer{tag}.log", out / f"metrics{tag}.jsonl"):
        old.unlink(missing_ok=True)
    return out / f"trainer{tag}.log", out / f"metrics{tag}.jsonl"


def _wait(proc: subprocess.Popen, metrics: Path, total: int | None, timeout: float, progress: bool,
          ranks: int) -> int:
    """Wait for the trainer, a tqdm bar following its per-step records; kill its process group on timeout."""
    bar = tqdm(total=total, desc=f"speculators train ({ranks} rank{'s' * (ranks > 1)})", unit="step",
               disable=not progress)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, 9)
                proc.wait()
                return 124
            _follow(bar, metrics)
            time.sleep(0.2)
        _follow(bar, metrics)
        return proc.returncode
    finally:
        bar.close()


def _follow(bar: tqdm, metrics: Path) -> None:
    done = sum(1 for _ in open(metrics)) if metrics.exists() else 0
    if done > bar.n:
        bar.update(done - bar.n)
