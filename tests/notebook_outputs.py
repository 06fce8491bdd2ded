"""What a reader of an executed notebook should not see: a Figure as text, library log lines, colour codes, errors.

:func:`output_problems` reads a notebook executed by papermill and names every such output by its code cell
(numbered as in the source notebook: papermill's injected-parameters cell does not count).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import nbformat

FIGURE_TEXT = re.compile(r"<(?:matplotlib\.figure\.)?Figure size [\d.]+x[\d.]+ with \d+ Axes>")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LEVELS = "TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL"
LOG_LINES = {
    "loguru": re.compile(rf"^\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ *\| *({LEVELS}) *\|"),
    "logging": re.compile(rf"^({LEVELS}):[\w.]+:"),
    "library warning": re.compile(r"(site|dist)-packages[/\\]\S+\.py:\d+: \w*Warning: "),
}
SNIPPET = 200


def code_cells(nb: nbformat.NotebookNode) -> Iterator[tuple[int, nbformat.NotebookNode]]:
    """(number, cell) for each code cell as numbered in the source notebook (the injected parameters skipped)."""
    number = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue
        number += 1
        yield number, cell


def output_texts(output: nbformat.NotebookNode) -> list[str]:
    """The text a reader sees in one output: a stream's text, or a result's ``text/plain`` and ``text/html``."""
    if output.output_type == "stream":
        return [output.get("text", "")]
    data = output.get("data", {})
    return [data[m] if isinstance(data[m], str) else "".join(data[m]) for m in ("text/plain", "text/html") if m in data]


def _snippet(text: str) -> str:
    text = ANSI.sub("", text).strip()
    return repr(text if len(text) <= SNIPPET else text[:SNIPPET] + "...")


def output_problems(ipynb_path: str | os.PathLike) -> list[str]:
    """Every output of an executed notebook that a reader should not see, one sentence each (empty: clean).

    Flags: a Figure shown as its text repr without an image, library log lines (loguru, ``logging``'s default
    format, Python warnings from installed packages), terminal colour codes (``\\x1b[``) and error outputs.
    """
    nb = nbformat.read(os.fspath(ipynb_path), as_version=4)
    name = os.path.basename(ipynb_path)
    problems = []
    for number, cell in code_cells(nb):
        where = f"{name} cell {number}"
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                problems.append(f"{where}: an error output ({output.get('ename')}: {output.get('evalue')})")
                continue
            has_image = any(m.startswith("image/") for m in output.get("data", {}))
            for text in output_texts(output):
                figure = FIGURE_TEXT.search(text)
                if figure and not has_image:
                    problems.append(f"{where}: a Figure shown as text, not an image ({figure.group(0)})")
                if "\x1b[" in text:
                    problems.append(f"{where}: terminal colour codes in the output ({_snippet(text)})")
                for line in ANSI.sub("", text).splitlines():
                    kind = next((k for k, pattern in LOG_LINES.items() if pattern.search(line)), None)
                    if kind:
                        problems.append(f"{where}: a {kind} line from a library ({_snippet(line)})")
    return problems
