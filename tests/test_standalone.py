"""The package stands on its own: what eagle3kit reads at run time ships inside it (package data), and no module
names a path of the repository (bench/, docs/, tests/, notebooks/) or climbs out of the package from ``__file__``.

The wheel test builds the wheel from a copy of what the wheel is made of, installs it into a fresh target outside the
checkout and runs the commands from another directory, with only that target on the path for eagle3kit."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "eagle3kit"
REPO_FOLDERS = ("bench", "docs", "tests", "notebooks")  # the repository's, not the package's


# ----------------------------------------------------------------------------------------------- no repository paths
def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (their text may cite bench/ or docs/ to a reader)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _climb(node: ast.AST) -> int | None:
    """How many folders ``Path(__file__)...`` climbs (``.parent`` chains and ``.parents[i]``), None if not that."""
    levels = 0
    while True:
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            levels, node = levels + 1, node.value
        elif (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
              and node.value.attr == "parents" and isinstance(node.slice, ast.Constant)):
            levels, node = levels + node.slice.value + 1, node.value.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "resolve", "absolute"):
            node = node.func.value
        else:
            break
    named_file = (isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id == "__file__" for a in node.args)
                  or isinstance(node, ast.Name) and node.id == "__file__")
    return levels if named_file and levels else None


def _is_repo_path(text: str) -> bool:
    """A path inside a repository folder (``bench/results/x.json``); prose, with its spaces, is not a path."""
    return not re.search(r"\s", text) and text.startswith(tuple(f"{f}/" for f in REPO_FOLDERS))


def _path_parts(node: ast.AST) -> list[ast.Constant]:
    """The string constants a path is joined from: operands of ``/`` and arguments of ``Path(...)``/``open(...)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        parts = [node.left, node.right]
    elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "Path", "PurePath", "open", "joinpath"):
        parts = list(node.args)
    else:
        return []
    return [p for p in parts if isinstance(p, ast.Constant) and p.value in REPO_FOLDERS]


def repository_paths(root: Path = PACKAGE) -> list[str]:
    """``file:line: what`` for each place a module under ``root`` names a repository path: a string that is such a path
    (outside docstrings and prose), a repository folder joined into a path, or a climb from ``__file__`` past the
    package's top folder."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent)
        depth = len(rel.parts) - 1  # folders from the file up to the package's top: eagle3kit/doctor/x.py -> 2
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if _is_repo_path(node.value):
                    found.append(f"{rel}:{node.lineno}: names {node.value!r}")
            elif parts := _path_parts(node):
                found += [f"{rel}:{p.lineno}: names {p.value!r}" for p in parts]
            elif (levels := _climb(node)) is not None and levels > depth:
                found.append(f"{rel}:{node.lineno}: climbs {levels} folders up from __file__, out of the package")
    return sorted(set(found))


def test_no_module_names_a_repository_path():
    assert repository_paths() == []


def test_the_path_check_fires_on_a_climb_and_a_repository_path(tmp_path):
    root = tmp_path / "eagle3kit"
    (root / "doctor").mkdir(parents=True)
    (root / "doctor" / "ok.py").write_text(
        '"""Reads docs/failures.md? No: cites bench/recipe.py to a reader."""\nfrom pathlib import Path\n'
        'HERE = Path(__file__).with_name("failures.md")\nUP = Path(__file__).parent.parent\n'
        'MSG = "run `python bench/recipe.py`"\nOPTIONS = {"bench": 1, "notebooks": 2}\n')
    assert repository_paths(root) == []
    (root / "doctor" / "bad.py").write_text(
        'from pathlib import Path\nA = Path(__file__).resolve().parents[2] / "docs" / "failures.md"\n'
        'B = Path(__file__).parent.parent.parent\nC = Path("bench/results/speedup.json")\n')
    assert repository_paths(root) == [
        "eagle3kit/doctor/bad.py:2: climbs 3 folders up from __file__, out of the package",
        "eagle3kit/doctor/bad.py:2: names 'docs'",
        "eagle3kit/doctor/bad.py:3: climbs 3 folders up from __file__, out of the package",
        "eagle3kit/doctor/bad.py:4: names 'bench/results/speedup.json'"]


# ----------------------------------------------------------------------------------------------- the wheel
def _run(args: list[str], cwd: Path, site: Path, timeout: int = 600) -> str:
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built from a copy of its sources (pyproject.toml, README.md, eagle3kit/), installed into a target."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(PACKAGE, src / "eagle3kit", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(base / "dist"), str(src)], check=True, timeout=600, capture_output=True)
    wheel = next((base / "dist").glob("eagle3kit-*.whl"))
    site = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, timeout=600, capture_output=True)
    return site


def test_the_installed_wheel_runs_from_another_directory(installed, tmp_path, tiny_verifier):
    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model, save_draft

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run(["-c", "import eagle3kit; print(eagle3kit.__file__)"], elsewhere, installed)
    assert Path(where.strip()).is_relative_to(installed), where
    assert "doctor" in _run(["-m", "eagle3kit.cli", "--help"], elsewhere, installed)
    catalogue = _run(["-m", "eagle3kit.cli", "doctor", "--catalogue"], elsewhere, installed)
    assert "attn-unset" in catalogue and "failures" in catalogue
    assert "GPU" in _run(["-m", "eagle3kit.cli", "plan"], elsewhere, installed)
    import torch

    torch.manual_seed(0)
    draft = save_draft(build_model(build_config(verifier="tiny", ttt_steps=2, device="cpu")).eval(),
                       tmp_path / "draft")
    scored = _run(["-m", "eagle3kit.cli", "evaluate", "--draft", str(draft), "--bench", "mt-bench", "--n-prompts", "2",
                   "--max-new-tokens", "4"], elsewhere, installed)
    assert "mt-bench" in scored
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # nothing written into the working directory
