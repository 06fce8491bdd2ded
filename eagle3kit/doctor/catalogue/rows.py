"""The failure catalogue, :data:`CATALOGUE` (package data, ``failures.md`` beside this module): its rows (section,
id, cells) and a table for notebooks and ``eagle3kit doctor --catalogue``.

The one parser of that file: ``tests/test_catalogue.py`` ties each row id to the tests marked
``@pytest.mark.catalogue("<id>")`` through :func:`catalogue_rows`, and notebook 02 shows :func:`catalogue_frame`.
The repository's ``docs/failures.md`` is generated from it (``make docs``: ``python -m
eagle3kit.doctor.catalogue.rows > docs/failures.md``; a test checks the two agree).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from eagle3kit.errors import UserError

CATALOGUE = Path(__file__).with_name("failures.md")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a literal pipe inside a cell is written \|


class CatalogueError(UserError):
    """The catalogue file is missing or malformed."""


@dataclass(frozen=True)
class CatalogueRow:
    section: str
    id: str
    cells: dict[str, str]  # column name (as in the table header) -> text, the id column excluded

    @property
    def check(self) -> str | None:
        """The finding's ``check`` name: the first `code` span of the "eagle3kit reports" cell."""
        m = re.search(r"`([\w.]+)`", self.cells.get("eagle3kit reports", ""))
        return m.group(1) if m else None


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip().strip("|"))]


def catalogue_rows(path: str | os.PathLike = CATALOGUE) -> list[CatalogueRow]:
    """Every table row of the catalogue in file order (header and rule rows skipped); ids are unique."""
    path = Path(path)
    if not path.is_file():
        raise CatalogueError(f"the failure catalogue {path} is not there: the installed eagle3kit ships it as "
                             "package data; reinstall eagle3kit, or pass the path of a catalogue file")
    rows: list[CatalogueRow] = []
    section, columns, seen = "", [], set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("## "):
            section, columns = line[3:].strip(), []
        elif not line.lstrip().startswith("|"):
            continue
        elif not columns:
            columns = _cells(line)
        elif not set(line.replace("|", "").strip()) <= set("-: "):
            cells = _cells(line)
            if len(cells) != len(columns):
                raise CatalogueError(f"{path}:{n}: {len(cells)} cells but the table has {len(columns)} columns "
                                     f"{columns}; write a pipe inside a cell as \\|")
            row_id = cells[0].strip("`")
            if row_id in seen:
                raise CatalogueError(f"{path}:{n}: row id {row_id!r} appears twice; give each failure one row")
            seen.add(row_id)
            rows.append(CatalogueRow(section, row_id, dict(zip(columns[1:], cells[1:], strict=True))))
    return rows


GENERATED = ("<!-- generated from eagle3kit/doctor/catalogue/failures.md (the package's own copy) by `python -m "
             "eagle3kit.doctor.catalogue.rows > docs/failures.md` (make docs): edit that file, not this one -->\n")


def catalogue_markdown(path: str | os.PathLike = CATALOGUE) -> str:
    """The text of ``docs/failures.md``: the catalogue, under a line saying where it comes from."""
    return GENERATED + Path(path).read_text()


def catalogue_frame(path: str | os.PathLike = CATALOGUE) -> pd.DataFrame:
    """The catalogue as one table: section, id, then the file's columns."""
    rows = catalogue_rows(path)
    return pd.DataFrame([{"section": r.section, "id": r.id, **r.cells} for r in rows],
                        columns=["section", "id", *(rows[0].cells if rows else [])])


def catalogue_row(row_id: str, path: str | os.PathLike = CATALOGUE) -> CatalogueRow:
    """The row ``row_id`` of the catalogue."""
    rows = {r.id: r for r in catalogue_rows(path)}
    if row_id not in rows:
        raise CatalogueError(f"{row_id!r} is not a row of {path}; its ids: {', '.join(rows)}")
    return rows[row_id]


def demonstrate(row_id: str, findings: list, run: Callable[[], object] | None = None) -> str:
    """A catalogue row shown live: its symptom, the doctor's findings of the row's check among ``findings``, and
    what ``run`` (the broken artifact at work) did, an exception caught as its first line."""
    from eagle3kit.doctor.findings import format_findings
    from eagle3kit.doctor.probe.worker import first_line

    row = catalogue_row(row_id)
    mine = [f for f in findings if f.check == row.check]
    lines = [f"{row.id} ({row.section}): {row.cells['symptom']}", "the doctor, before anything runs:",
             format_findings(mine) if mine else f"  (no {row.check} finding: this artifact is not broken that way)"]
    if run is not None:
        try:
            lines.append(f"running it: {run()}")
        except Exception as exc:  # the demonstration: the real failure, caught and shown
            lines.append(f"running it fails: {first_line(exc)}")
    return "\n".join(lines + [f"fix: {row.cells['fix']}"])


if __name__ == "__main__":  # `python -m eagle3kit.doctor.catalogue.rows > docs/failures.md`
    print(catalogue_markdown(), end="")
