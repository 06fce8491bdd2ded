"""The places a command will write, checked before it starts: each can be made, is writable and has room.

A folder or file is acceptable when its nearest existing ancestor is a folder (not a file: nothing can be made under
a file) in which a file can really be created (a probe file, removed at once: permission bits say nothing for root,
a read-only mount or ``/sys`` refuses even root), an existing path has the right kind, and the disk has room for
``need_bytes`` when the size is known. Nothing is created: the command makes its folders when it writes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from eagle3kit.errors import UserError


class OutputError(UserError):
    """A place a command would write to cannot take the output; the message names it and what to choose instead."""


def human_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a file or a folder)."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def check_output(path: str | os.PathLike, label: str, folder: bool = True, need_bytes: int | None = None) -> Path:
    """Refuse ``path`` (named ``label``, e.g. ``--out``) as a place to write a folder (``folder``) or a file, unless it
    can be made there, is writable and ``need_bytes`` fit on its disk; return it as an absolute path."""
    target = Path(path).expanduser().absolute()
    base = nearest_existing(target)
    what = "folder" if folder else "file"
    if base == target:
        if folder and not target.is_dir():
            raise OutputError(f"{label} {path} is an existing file, but a folder is written there; choose a new or "
                              "existing folder.")
        if not folder and target.is_dir():
            raise OutputError(f"{label} {path} is a folder, but a file is written there; name a file.")
    place = target if base == target and folder else base if base != target else target.parent
    if not place.is_dir():
        raise OutputError(f"{label} {path}: {place} is a file, so no {what} can be made under it; choose a path "
                          "whose parents are folders.")
    try:  # what the OS really allows (as root, permission bits do not)
        fd, probe = tempfile.mkstemp(dir=place, prefix=".eagle3kit-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{label} {path}: cannot write in {place} ({exc.strerror}); choose a folder you can "
                          "write to.") from None
    free = shutil.disk_usage(place).free
    if need_bytes is not None and need_bytes > free:
        raise OutputError(f"{label} {path}: the output needs about {human_bytes(need_bytes)} but {place} has "
                          f"{human_bytes(free)} free; free some space or choose another disk.")
    return target
