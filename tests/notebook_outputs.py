"""What a reader of an executed notebook should not see: a Figure as text, library log lines, colour codes, errors,
text on stderr, progress bars drawn as text or saved as an unfinished widget, walls of text.

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
PROGRESS_BAR = re.compile(r"\d+%\|[^|\n]*\| *[\d.]+[kMG]?/[\d.?]*[kMG]?")  # tqdm's text: " 40%|####  | 4/10"
WIDGET = "application/vnd.jupyter.widget-view+json"  # a live widget (tqdm.auto's bar in a kernel): saved as a widget
# a widget's text is its first frame: a bar run without a frontend shows "0%" for ever (eagle3kit.progress)
WALL_LINES = 40  # a text output longer than this is a wall: show a head and where the rest is
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


def merged_streams(outputs: list) -> list[nbformat.NotebookNode]:
    """A cell's outputs with consecutive pieces of one stream joined (a kernel sends a long print in pieces)."""
    merged: list[nbformat.NotebookNode] = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (output.output_type == "stream" and last is not None and last.output_type == "stream"
                and last.get("name") == output.get("name")):
            merged[-1] = nbformat.NotebookNode({**last, "text": last.get("text", "") + output.get("text", "")})
        else:
            merged.append(output)
    return merged


def _snippet(text: str) -> str:
    text = ANSI.sub("", text).strip()
    return repr(text if len(text) <= SNIPPET else text[:SNIPPET] + "...")


def output_problems(ipynb_path: str | os.PathLike) -> list[str]:
    """Every output of an executed notebook that a reader should not see, one sentence each (empty: clean).

    Flags: a Figure shown as its text repr without an image, library log lines (loguru, ``logging``'s default
    format, Python warnings from installed packages), terminal colour codes (``\\x1b[``), error outputs, anything on
    stderr, a progress bar drawn as text, a progress bar widget whose saved text is unfinished (a reader without the
    live widget sees that frame) and a text output over :data:`WALL_LINES` lines.
    """
    nb = nbformat.read(os.fspath(ipynb_path), as_version=4)
    name = os.path.basename(ipynb_path)
    return [f"{name} cell {number}: {problem}" for number, cell in code_cells(nb)
            for output in merged_streams(cell.get("outputs", [])) for problem in problems_of(output)]


def problems_of(output: nbformat.NotebookNode) -> list[str]:
    """What is wrong with one output (stderr is named only when nothing more precise is: a log line, a bar)."""
    if output.output_type == "error":
        return [f"an error output ({output.get('ename')}: {output.get('evalue')})"]
    data = output.get("data", {})
    has_image = any(m.startswith("image/") for m in data)
    texts = output_texts(output)
    problems = []
    bar = next((m for t in texts if WIDGET not in data and (m := PROGRESS_BAR.search(ANSI.sub("", t)))), None)
    if bar:
        problems.append(f"a progress bar drawn as text ({_snippet(bar.string[:bar.end()])})")
    frozen = next((m for t in texts if WIDGET in data and (m := PROGRESS_BAR.search(ANSI.sub("", t)))), None)
    if frozen and not frozen.group(0).startswith("100%"):
        problems.append(f"a progress bar widget saved unfinished ({_snippet(frozen.string[:frozen.end()])}): run "
                        "without a frontend, the notebook shows that frame")
    seen = output.get("text", "") if output.output_type == "stream" else data.get("text/plain", "")
    seen = seen if isinstance(seen, str) else "".join(seen)
    if "text/html" not in data and not has_image and len(seen.splitlines()) > WALL_LINES:
        problems.append(f"a wall of {len(seen.splitlines())} lines of text (over {WALL_LINES}: show a head and "
                        f"where the rest is)")
    for text in texts:
        figure = FIGURE_TEXT.search(text)
        if figure and not has_image:
            problems.append(f"a Figure shown as text, not an image ({figure.group(0)})")
        if "\x1b[" in text:
            problems.append(f"terminal colour codes in the output ({_snippet(text)})")
        for line in ANSI.sub("", text).splitlines():
            kind = next((k for k, pattern in LOG_LINES.items() if pattern.search(line)), None)
            if kind:
                problems.append(f"a {kind} line from a library ({_snippet(line)})")
    if not problems and output.output_type == "stream" and output.get("name") == "stderr":
        problems.append(f"text on stderr ({_snippet(output.get('text', ''))})")
    return problems
