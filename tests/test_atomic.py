"""Atomic writes: all or nothing, and the result has ordinary permissions."""

import os
import signal
import subprocess
import sys

import pytest

from eagle3kit.atomic import atomic_dir, atomic_file, recover, write_text


def test_file_and_dir_appear_whole_with_umask_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "hello")
        with atomic_dir(tmp_path / "d") as d:
            (d / "x").write_text("y")
    finally:
        os.umask(mask)
    assert (tmp_path / "a.txt").read_text() == "hello"
    assert oct(os.stat(tmp_path / "a.txt").st_mode & 0o777) == "0o644"
    assert oct(os.stat(tmp_path / "d").st_mode & 0o777) == "0o755"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "d"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError), atomic_file(tmp_path / "a.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    with pytest.raises(RuntimeError), atomic_dir(tmp_path / "d") as d:
        (d / "x").write_text("half")
        raise RuntimeError("interrupted")
    assert (tmp_path / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


KILL_BETWEEN_RENAMES = """
import os, signal, sys
from eagle3kit import atomic

real_replace, calls = os.replace, []


def replace(src, dst):  # the process dies right after the old copy was moved aside, before the new one is in
    calls.append(src)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)


atomic.os.replace = replace
with atomic.atomic_dir(sys.argv[1]) as tmp:
    (tmp / "version").write_text("new")
"""


def test_a_replacement_killed_between_its_renames_is_recovered(tmp_path):
    """SIGKILL between moving the old copy aside and renaming the new one in: the old copy is complete on disk and
    the next start (any atomic_dir, or recover) puts it back; a later replacement then works as usual."""
    target = tmp_path / "checkpoint"
    with atomic_dir(target) as d:
        (d / "version").write_text("old")
    proc = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(target)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    assert not target.exists()  # the moment the issue is about: the only copy is the one moved aside
    aside = [p for p in tmp_path.iterdir() if p.name.startswith(".checkpoint.old-")]
    assert len(aside) == 1 and (aside[0] / "version").read_text() == "old"
    recover(target)
    assert (target / "version").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]  # no temporaries left behind
    with atomic_dir(target) as d:
        (d / "version").write_text("newer")
    assert (target / "version").read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
