"""Atomic writes: all or nothing, and the result has ordinary permissions."""

import os

import pytest

from eagle3kit.atomic import atomic_dir, atomic_file, write_text


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
