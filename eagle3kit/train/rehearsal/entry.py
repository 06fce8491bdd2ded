"""The process a rehearsal runs: speculators' own ``speculators.train`` entry point, unchanged, on this machine.

``python -m eagle3kit.train.rehearsal.entry --metrics M.jsonl -- --config run.yaml [speculators train options]`` (or
the same under ``torchrun``, one such process per rank) presents the CPU as the accelerator where there is none
(:mod:`eagle3kit.train.rehearsal.cpu`), writes every per-step record speculators' ``Trainer`` logs to
``speculators.metrics`` to ``M.jsonl`` at full precision (rank 0), then calls speculators' ``main`` with the
``TrainConfig`` its own command line resolves. The ``__main__`` guard lets the data loader's spawned workers import
this module. With ``EAGLE3KIT_PREEMPT=STEP:RANK`` set (:func:`eagle3kit.train.rehearsal.run.rehearse`'s
``preempt_at_step``), that rank kills itself with SIGKILL right after it logs step STEP, as a preempted node dies.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Mapping


class Preempt(logging.Handler):
    """SIGKILL this process right after speculators' Trainer logs step ``step`` (1-based)."""

    def __init__(self, step: int):
        super().__init__(level=logging.INFO)
        self.step = step

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.msg
        if isinstance(msg, Mapping) and "train" in msg and int(msg["global_step"]) + 1 >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eagle3kit.train.rehearsal.entry")
    parser.add_argument("--metrics", default=None, help="JSON-lines file for the per-step records (rank 0)")
    parser.add_argument("speculators_args", nargs=argparse.REMAINDER, help="-- then `speculators train` options")
    args = parser.parse_args(argv)
    rest = args.speculators_args[1:] if args.speculators_args[:1] == ["--"] else args.speculators_args

    import speculators.train.cli as spec_cli
    from speculators.train.config import TrainConfig

    from eagle3kit.train.handoff import MetricsFile
    from eagle3kit.train.rehearsal.cpu import present_cpu

    present_cpu()
    rank = int(os.environ.get("RANK", "0"))
    ours: list[logging.Handler] = []
    if args.metrics and rank == 0:
        ours.append(MetricsFile(args.metrics))
    preempt = os.environ.get("EAGLE3KIT_PREEMPT", "")
    if preempt and int(preempt.split(":")[1]) == rank:
        ours.append(Preempt(int(preempt.split(":")[0])))  # after MetricsFile: the step is recorded first
    setup_root_logger = spec_cli.setup_root_logger

    def then_ours(*a, **kw):
        """speculators' own console logging first (a handler added before would make its basicConfig a no-op),
        then ours on the root logger (its metric-logger dictConfig leaves root alone), ahead of its console
        handler, whose filter turns each record's dict into text."""
        setup_root_logger(*a, **kw)
        logging.getLogger().handlers[:0] = ours

    spec_cli.setup_root_logger = then_ours
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pin_memory.*")  # no accelerator: nothing to pin for
        warnings.filterwarnings("ignore", message=".*autocast.*")  # float32 runs: CPU autocast stays off
        spec_cli.main(TrainConfig.resolve(rest))


if __name__ == "__main__":
    run(sys.argv[1:])
