"""Tables for a terminal: a DataFrame whose text columns wrap (textwrap) so no line is wider than the terminal.

Columns without spaces (numbers, names, paths) keep their width; text columns share what is left in proportion to
the room they would use, never narrower than their longest word (or :data:`MIN_TEXT` characters). When even that
does not fit, the table is written one block per row instead (``fallback``; :func:`column_blocks` for numeric tables).
:func:`format_sections` groups rows under section headings (a plan). :func:`markdown_table` writes the same DataFrames
for files (the run's ``summary.md``).
"""

from __future__ import annotations

import itertools
import math
import shutil
import textwrap
from collections.abc import Callable

import pandas as pd

GAP = "  "  # between columns
MIN_TEXT = 16  # a wrapped column narrower than this is hard to read: write blocks instead
INDENT = "    "
HANG = "  "  # a wrapped cell's later lines, and a section's rows under its heading


def terminal_width() -> int:
    """The terminal's width in columns (``COLUMNS`` when set, 80 when there is no terminal)."""
    return shutil.get_terminal_size().columns


def cell_text(value: object) -> str:
    """A cell as text: empty for a missing value, floats to 6 significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cells(df: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(df.index, pd.RangeIndex):
        df = df.reset_index()
    return df.map(cell_text).astype(str)


def _numeric(df: pd.DataFrame) -> list[bool]:
    """Which columns of :func:`_cells` hold numbers (right-aligned)."""
    return [pd.api.types.is_numeric_dtype(t) for t in (df if isinstance(df.index, pd.RangeIndex)
                                                         else df.reset_index()).dtypes]


def _longest(texts, split: bool) -> int:
    return max((len(part) for t in texts for part in (t.split() if split else t.splitlines()) or [""]), default=0)


def column_widths(df: pd.DataFrame, width: int) -> list[int] | None:
    """Each column's width so that a row fits ``width`` characters, or None when it cannot fit."""
    cells = _cells(df)
    names = [str(c) for c in cells.columns]
    natural = [max(_longest(cells[c], False), len(n)) for c, n in zip(cells.columns, names, strict=True)]
    budget = width - len(GAP) * (len(natural) - 1)
    if sum(natural) <= budget:
        return natural
    least = [min(n, max(_longest(cells[c], True), len(name), MIN_TEXT))
             for c, name, n in zip(cells.columns, names, natural, strict=True)]
    if sum(least) > budget:
        return None
    slack = [n - m for m, n in zip(least, natural, strict=True)]  # how much wider each column would like to be
    extra = budget - sum(least)  # < sum(slack), else the natural widths fit
    widths = [m + extra * s // sum(slack) for m, s in zip(least, slack, strict=True)]
    for i in sorted(range(len(widths)), key=lambda i: natural[i] - widths[i], reverse=True)[:budget - sum(widths)]:
        widths[i] += 1
    return widths


def _wrap(text: str, width: int, hang: str = "") -> list[str]:
    lines = [part for line in text.splitlines()
             for part in textwrap.wrap(line, width, subsequent_indent=hang, break_on_hyphens=False) or [""]]
    return lines or [""]


def format_records(df: pd.DataFrame, width: int | None = None) -> str:
    """One block per row: the first column's value, then ``name: value`` lines wrapped to ``width``."""
    width = width or terminal_width()
    cells = _cells(df)
    blocks = []
    for _, row in cells.iterrows():
        first, *rest = row.items()
        lines = _wrap(first[1], width)
        for name, value in rest:
            if value:
                lines += textwrap.wrap(f"{name}: {value}", width, initial_indent=INDENT,
                                   subsequent_indent=INDENT * 2, break_on_hyphens=False)
        blocks.append("\n".join(lines))
    return "\n".join(blocks)


def markdown_table(df: pd.DataFrame) -> str:
    """``df`` as a GitHub-flavoured Markdown table (numbers right-aligned; ``|`` and line breaks escaped), for files
    read on GitHub or in JupyterLab (``summary.md``)."""
    cells = _cells(df).map(lambda t: t.replace("|", "\\|").replace("\n", "<br>"))
    numeric = _numeric(df)
    rows = [[str(c) for c in cells.columns], ["---:" if right else "---" for right in numeric],
            *cells.itertuples(index=False)]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def column_blocks(df: pd.DataFrame, width: int) -> str:
    """pandas' own wrapping: as many whole columns per block as fit ``width`` (for wide numeric tables)."""
    return df.to_string(index=False, line_width=width)


def _liner(widths: list[int], numeric: list[bool], indent: str = "") -> Callable[[list[str]], str]:
    """A function that writes one line of cells in their columns (numbers right-aligned)."""
    def line(parts: list[str]) -> str:
        return (indent + GAP.join(p.rjust(w) if right else p.ljust(w)
                                  for p, w, right in zip(parts, widths, numeric, strict=True))).rstrip()
    return line


def _lines(cells: list[list[str]], line: Callable[[list[str]], str]) -> list[str]:
    """Cells already wrapped (a list of lines each) side by side, as many lines as the tallest."""
    return [line([c[i] if i < len(c) else "" for c in cells]) for i in range(max(map(len, cells)))]


def format_table(df: pd.DataFrame, width: int | None = None,
                 fallback: Callable[[pd.DataFrame, int], str] = format_records) -> str:
    """``df`` as text no wider than ``width`` (default: the terminal's): text columns wrapped; ``fallback(df,
    width)`` when the columns cannot fit."""
    width = width or terminal_width()
    widths = column_widths(df, width)
    if widths is None:
        return fallback(df, width)
    cells = _cells(df)
    line = _liner(widths, _numeric(df))
    out = _lines([_wrap(str(c), w) for c, w in zip(cells.columns, widths, strict=True)], line)
    out.append(line(["-" * w for w in widths]))
    rows = [[_wrap(v, w) for v, w in zip(row, widths, strict=True)] for row in cells.itertuples(index=False)]
    spaced = any(len(c) > 1 for r in rows for c in r)  # a blank line between rows once any of them wraps
    for r, row in enumerate(rows):
        if spaced and r:
            out.append("")
        out += _lines(row, line)
    return "\n".join(out)


def format_sections(df: pd.DataFrame, section: str = "section", width: int | None = None) -> str:
    """``df`` grouped by its ``section`` column (consecutive rows of one section): the column names once, then each
    section's name on a line of its own and its rows under it, indented; the other columns aligned across sections, a
    long cell wrapped with a hanging indent. Written as :func:`format_records` when the columns cannot fit ``width``."""
    width = width or terminal_width()
    rows = df.drop(columns=[section])
    widths = column_widths(rows, width - len(HANG))
    if widths is None:
        return format_records(df, width)
    cells = _cells(rows)
    line = _liner(widths, _numeric(rows), HANG)
    out = _lines([_wrap(str(c), w) for c, w in zip(cells.columns, widths, strict=True)], line)
    out.append(line(["-" * w for w in widths]))
    for name, group in itertools.groupby(zip(df[section], cells.itertuples(index=False), strict=True),
                                         key=lambda pair: pair[0]):
        out += ["", str(name)]
        for _, row in group:
            out += _lines([_wrap(v, w, HANG) for v, w in zip(row, widths, strict=True)], line)
    return "\n".join(out)
