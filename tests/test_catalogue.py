"""docs/failures.md and its tests agree: every row has a test marked with its id, every marked id is a row."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "docs" / "failures.md"
ROW = re.compile(r"^\|\s*`?([a-z0-9][a-z0-9-]*)`?\s*\|(.*)\|\s*$")


def catalogue_rows() -> dict[str, list[str]]:
    """Row id -> the row's cells, from the tables of docs/failures.md (header and rule rows skipped)."""
    rows = {}
    for line in CATALOGUE.read_text().splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "id":
            assert m.group(1) not in rows, f"row id {m.group(1)!r} appears twice in docs/failures.md"
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


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
    rows, tests = catalogue_rows(), marked_tests()
    assert len(rows) >= 20, f"docs/failures.md has {len(rows)} rows; the catalogue promises at least 20"
    assert not (missing := sorted(set(rows) - set(tests))), f"rows without a catalogue-marked test: {missing}"
    assert not (unknown := sorted(set(tests) - set(rows))), f"tests marked with ids that are not rows: {unknown}"


def test_gpu_rows_have_cuda_marked_tests():
    rows, tests = catalogue_rows(), marked_tests()
    for row_id, cells in rows.items():
        if cells[-1].upper().startswith("GPU"):
            assert any(cuda for _, cuda in tests[row_id]), f"GPU row {row_id!r} needs a test marked cuda"


def test_every_row_cites_a_public_reference_or_the_seed():
    for row_id, cells in catalogue_rows().items():
        assert re.search(r"[\w.-]+/[\w.-]+\s*(issue|PR|#)|seed|measured", cells[1]), (
            f"row {row_id!r} names no public reference (owner/repo issue N or PR N) in its 'reported' cell")
