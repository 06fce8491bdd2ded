"""Probe workers forked from one process that imported torch and speculators once (CPU cells).

A fresh interpreter spends ~12 s importing speculators before its first cell; a fork of a process that has imported
it (and run nothing) starts at once. The zygote (``python -m eagle3kit.doctor.probe.zygote``, one per probing
process, kept between probe calls) reads a JSON request a line on its stdin and forks a monitor for each. The monitor
leads a session of its own (its pid, written to ``request["pid"]``, names the group the parent kills), forks the
worker (:func:`eagle3kit.doctor.probe.worker.main`; output into ``request["log"]``, the caller's environment of the
moment) and writes its exit status to ``request["rc"]`` as ``Popen.returncode`` reads it (negative: the signal that
killed it). The worker imports its eagle3kit modules after the fork, so an edited source is what runs.

The zygote is replaced when the caller's environment (but for :data:`PER_CALL`), working directory or interpreter
changed; it exits when its stdin closes: the caller exited, or no probe call asked for a worker for :data:`IDLE_S`
seconds (its ~0.6 GB given back). CUDA cells are not forked (CUDA does not survive a fork): each starts a fresh
interpreter.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

PER_CALL = {"PYTEST_CURRENT_TEST"}  # variables that change between calls, not what an import reads: set in the worker
IDLE_S = 300.0  # a zygote no probe call used for this long is ended; the next call starts another
_lock = threading.RLock()
_zygote: tuple[tuple, subprocess.Popen] | None = None
_timer: threading.Timer | None = None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: str, text: str) -> None:
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class Forked:
    """A worker forked by the zygote, read like a ``Popen``: :meth:`poll`, and :meth:`kill` of its process group."""

    def __init__(self, zygote: subprocess.Popen, pid_path: Path, rc_path: Path) -> None:
        self.zygote, self.pid_path, self.rc_path = zygote, pid_path, rc_path

    def poll(self) -> int | None:
        """The worker's exit status, or None while it runs (or waits for the zygote's imports)."""
        if (rc := _read_int(self.rc_path)) is not None:
            return rc
        monitor = _read_int(self.pid_path)
        if monitor is None:  # not forked yet: the zygote is still importing, or it died without forking it
            if self.zygote.poll() is None:
                return None
            if (monitor := _read_int(self.pid_path)) is None:  # (or it named the monitor just before it left)
                return self.zygote.returncode or 1
        if _alive(monitor):
            return None
        if (rc := _read_int(self.rc_path)) is not None:  # written just before the monitor left
            return rc
        self.kill()  # the monitor itself was killed, so no status: take its worker down too
        return -signal.SIGKILL

    def kill(self) -> None:
        """SIGKILL the worker's process group and wait until its monitor is gone (the zygote if it never forked)."""
        monitor = _read_int(self.pid_path)
        if monitor is None:
            stop()
            return
        try:
            os.killpg(monitor, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while _alive(monitor) and time.monotonic() < deadline:  # the kernel reaps it (the zygote ignores SIGCHLD)
            time.sleep(0.02)


def running() -> int | None:
    """The pid of the zygote this process keeps (None: it has none now)."""
    with _lock:
        return None if _zygote is None or _zygote[1].poll() is not None else _zygote[1].pid


def stop() -> None:
    """End the zygote: it forks what it was asked for, then exits as its stdin closes (killed if it does not)."""
    global _zygote
    with _lock:
        if _timer is not None:
            _timer.cancel()
        if _zygote is None:
            return
        proc, _zygote = _zygote[1], None
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


atexit.register(stop)


def release_later() -> None:
    """End the zygote in :data:`IDLE_S` seconds unless a worker is asked for before (a probe call ended)."""
    global _timer
    with _lock:
        if _timer is not None:
            _timer.cancel()
        if _zygote is not None:
            _timer = threading.Timer(IDLE_S, stop)
            _timer.daemon = True
            _timer.start()


def fork_worker(args: list[str], log: Path) -> Forked | None:
    """Ask the zygote (started on the first call) to fork ``worker.main(*args)``; None if it cannot be asked."""
    global _zygote
    env = dict(os.environ)
    identity = (sys.executable, os.getcwd(), sorted((k, v) for k, v in env.items() if k not in PER_CALL))
    with _lock:
        if _timer is not None:
            _timer.cancel()
        if _zygote is not None and (_zygote[0] != identity or _zygote[1].poll() is not None):
            stop()
        if _zygote is None:
            proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)
            _zygote = identity, proc
        proc = _zygote[1]
        pid_path, rc_path = log.with_suffix(".pid"), log.with_suffix(".rc")
        request = {"args": args, "log": str(log), "pid": str(pid_path), "rc": str(rc_path), "env": env}
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
        except OSError:  # it died: the caller starts a fresh interpreter instead
            return None
    return Forked(proc, pid_path, rc_path)


# ------------------------------------------------------------------------------------------- the zygote itself
def _worker(request: dict, failed_import: str | None) -> int:
    """In the forked worker: output into the log, then the worker's main (or the zygote's import error)."""
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    try:
        if failed_import is not None:
            sys.stderr.write(failed_import)
            return 1
        from eagle3kit.doctor.probe.worker import main

        return main(*request["args"])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # as an uncaught exception in ``python -m ...worker``: the traceback, exit 1
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _monitor(request: dict, failed_import: str | None, leading) -> None:
    """In the forked monitor: a session of its own (told through ``leading``), the worker forked, its status written."""
    os.setsid()
    os.write(leading, b"1")
    os.close(leading)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        os._exit(_worker(request, failed_import))
    _, status = os.waitpid(pid, 0)
    _write(request["rc"], str(os.waitstatus_to_exitcode(status)))


def main() -> None:
    failed_import = None
    try:  # the slow imports, once; nothing runs here that would start threads or touch CUDA
        import speculators.losses  # noqa: F401
        import speculators.models.eagle3  # noqa: F401
        import torch  # noqa: F401
    except BaseException:  # each worker reports it, as a fresh interpreter's import would
        failed_import = traceback.format_exc()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    devnull = os.open(os.devnull, os.O_RDONLY)
    for line in sys.stdin:
        request = json.loads(line)
        readable, leading = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(readable)
                os.dup2(devnull, 0)  # the requests' pipe stays the zygote's
                _monitor(request, failed_import, leading)
            except BaseException:  # no worker status: the parent reads the exit of a worker that never started
                _write(request["rc"], "1")
            finally:
                os._exit(0)
        os.close(leading)
        os.read(readable, 1)  # the monitor leads its own group now (or died), so the parent may kill it by its pid
        os.close(readable)
        _write(request["pid"], str(pid))
    os._exit(0)  # stdin closed: leave without tearing down torch's modules


if __name__ == "__main__":
    main()
