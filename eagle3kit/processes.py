"""Processes eagle3kit starts in their own session (vLLM engines and servers): started with their output in a log,
stopped as a whole process group, their log's tail quoted in an error."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a log ("" when it does not exist)."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-n:])


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``, from /proc."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(stat.parent.name))
    return pids


def stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM the process group ``proc`` leads; SIGKILL what is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None and not group_members(proc.pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and (proc.poll() is None or group_members(proc.pid)):
            time.sleep(0.2)


def launch(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``argv`` in its own session (so its whole process group can be stopped), output into ``log``, with
    ``env`` added to this process's environment."""
    with log.open("w") as f:
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                start_new_session=True)
