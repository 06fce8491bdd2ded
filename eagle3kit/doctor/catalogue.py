"""The failure catalogue, ``docs/failures.md``: its rows (section, id, cells) and a table for notebooks.

The one parser of that file: ``tests/test_catalogue.py`` ties each row id to the tests marked
``@pytest.mark.catalogue("<id>")`` through :func:`catalogue_rows`, and notebook 02 shows :func:`catalogue_frame`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from eagle3kit.errors import UserError

CATALOGUE = Path(__file__).resolve().parents[2] / "docs" / "failures.md"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")  # a literal pipe inside a cell is written \|


class CatalogueError(UserError):
    """docs/failures.md is missing or malformed."""


@dataclass(frozen=True)
class CatalogueRow:
    section: str
    id: str
    cells: dict[str, str]  # column name (as in the table header) -> text, the id column excluded


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(line.strip().strip("|"))]


def catalogue_rows(path: str | os.PathLike = CATALOGUE) -> list[CatalogueRow]:
    """Every table row of the catalogue in file order (header and rule rows skipped); ids are unique."""
    path = Path(path)
    if not path.is_file():
        raise CatalogueError(f"the failure catalogue {path} is not there: it ships with the eagle3kit checkout "
                             "(docs/failures.md), so run from a clone of the repository")
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


def catalogue_frame(path: str | os.PathLike = CATALOGUE) -> pd.DataFrame:
    """The catalogue as one table: section, id, then the file's columns."""
    rows = catalogue_rows(path)
    return pd.DataFrame([{"section": r.section, "id": r.id, **r.cells} for r in rows],
                        columns=["section", "id", *(rows[0].cells if rows else [])])
