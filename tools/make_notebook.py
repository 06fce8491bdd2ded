"""Write a notebook from a list of (kind, source) cells; the first code cell tagged 'parameters' if asked.

Usage from a build script: make_notebook(path, [("md", "..."), ("params", "..."), ("code", "...")]).
"""

from __future__ import annotations

import sys

import nbformat


def make_notebook(path: str, cells: list[tuple[str, str]]) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, source in cells:
        source = source.strip("\n")
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cell = nbformat.v4.new_code_cell(source)
            if kind == "params":
                cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):  # stable ids so rewrites give identical files
        cell["id"] = f"c{i:02d}"
    nbformat.write(nb, path)


if __name__ == "__main__":
    sys.exit("import make_notebook from a notebook build script")
