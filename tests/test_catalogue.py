"""The failure catalogue (package data, eagle3kit/doctor/catalogue/failures.md) and its tests agree: every row has a
test marked
with its id, every marked id is a row; docs/failures.md is generated from it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from eagle3kit.doctor.catalogue.rows import (CATALOGUE, CatalogueError, catalogue_frame, catalogue_markdown,
                                             catalogue_rows)

ROOT = Path(__file__).resolve().parents[1]


def _marks(decorators: list[ast.expr]) -> tuple[set[str], bool]:
    ids, cuda = set(), False
    for d in decorators:
        text = ast.unparse(d)
        if text.startswith("pytest.mark.catalogue("):
            ids |= {a.value for a in d.args if isinstance(a, ast.Constant)}  # type: ignore[union-attr]
        cuda |= text.startswith("pytest.mark.cuda")
    return ids, cuda


def marked_tests() -> dict[str, list[tuple[str, bool]]]:
    """Catalogue id -> [(test, marked cuda)], read from the test sources (module-level ``pytestmark`` included)."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_cuda = "pytest.mark.cuda" in "".join(
            ast.unparse(n.value) for n in tree.body
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith(("test", "Test")):
                ids, cuda = _marks(node.decorator_list)
                for i in ids:
                    found.setdefault(i, []).append((f"{path.name}::{node.name}", cuda or module_cuda))
    return found


def test_every_catalogue_row_has_a_test_and_every_marked_test_a_row():
    rows, tests = {r.id: r for r in catalogue_rows()}, marked_tests()
    assert len(rows) >= 20, f"the catalogue has {len(rows)} rows; the catalogue promises at least 20"
    assert not (missing := sorted(set(rows) - set(tests))), f"rows without a catalogue-marked test: {missing}"
    assert not (unknown := sorted(set(tests) - set(rows))), f"tests marked with ids that are not rows: {unknown}"


def test_gpu_rows_have_cuda_marked_tests():
    tests = marked_tests()
    for row in catalogue_rows():
        if row.cells["where"].upper().startswith("GPU"):
            assert any(cuda for _, cuda in tests[row.id]), f"GPU row {row.id!r} needs a test marked cuda"


def test_every_row_cites_a_public_reference_or_the_seed():
    for row in catalogue_rows():
        assert re.search(r"[\w.-]+/[\w.-]+\s*(issue|PR|#)|seed|measured", row.cells["reported"]), (
            f"row {row.id!r} names no public reference (owner/repo issue N or PR N) in its 'reported' cell")


def test_the_parser_reads_sections_and_refuses_a_broken_file(tmp_path):
    df = catalogue_frame()
    assert list(df.columns) == ["section", "id", "symptom", "reported", "eagle3kit reports", "fix", "where"]
    sections = [line[3:] for line in CATALOGUE.read_text().splitlines() if line.startswith("## ")]
    assert df.id.is_unique and set(df.section) <= set(sections) and df.iloc[0].section == sections[0]
    with pytest.raises(CatalogueError, match="is not there"):
        catalogue_rows(tmp_path / "failures.md")
    twice = tmp_path / "twice.md"
    twice.write_text("## S\n\n| id | fix |\n|---|---|\n| a | x |\n| `a` | y |\n")
    with pytest.raises(CatalogueError, match="appears twice"):
        catalogue_rows(twice)


def test_docs_failures_md_is_generated_from_the_package_catalogue():
    docs = (ROOT / "docs" / "failures.md").read_text()
    assert docs == catalogue_markdown(), ("docs/failures.md differs from the package's catalogue: edit "
                                          f"{CATALOGUE.relative_to(ROOT)}, then run `make docs`")
    assert catalogue_markdown(CATALOGUE).startswith("<!-- generated from") and "edit that file" in docs.splitlines()[0]
