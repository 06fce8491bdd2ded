"""Atomic writes: a file or directory appears complete or not at all, and a replaced one is never missing.

Replacing a directory takes two renames (there is no atomic "swap" of non-empty directories): the old copy is moved
aside to ``.NAME.old-PID``, the new one is renamed in, then the old one is deleted. A process killed between the two
renames leaves the old, complete copy aside; :func:`recover` (called by every :func:`atomic_dir` and by readers of
checkpoints and exports) puts it back, so there is always a complete copy on disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _aside(target: Path) -> list[Path]:
    """Old copies of ``target`` moved aside by an interrupted replacement (newest first)."""
    found = target.parent.glob(f".{target.name}.old-*") if target.parent.exists() else []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def recover(target: str | os.PathLike) -> Path:
    """Finish or undo an interrupted replacement of ``target``; remove leftover temporaries. Returns ``target``.

    If ``target`` is missing, the old copy moved aside is renamed back; if ``target`` exists, copies moved aside
    are stale and deleted. Half-written ``.NAME.tmp-*`` directories of dead writers are deleted.
    """
    target = Path(target)
    aside = _aside(target)
    if aside and not target.exists():
        os.replace(aside.pop(0), target)
    for old in aside:
        shutil.rmtree(old, ignore_errors=True)
    if target.parent.exists():
        for tmp in target.parent.glob(f".{target.name}.tmp-*"):
            if tmp.is_dir() and not _alive(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def _alive(tmp: Path) -> bool:
    """Whether the process that is writing ``tmp`` (its pid is the name's last part) still runs."""
    try:
        pid = int(tmp.name.rsplit("-", 1)[-1])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces ``target`` (see the module docstring)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover(target)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())  # the result should look like any new folder
        if target.exists():
            old = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, old)  # the complete old copy stays on disk until the new one is in place
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_file(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary sibling path to write; on success it replaces ``target`` by rename."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the result should look like any new file
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text(target: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``target`` atomically."""
    with atomic_file(target) as tmp:
        tmp.write_text(text)
