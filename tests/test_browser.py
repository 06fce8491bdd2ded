"""The notebooks in a real JupyterLab, in Debian's chromium: widgets render and respond to a person's clicks.

Run: ``.venv/bin/pytest -m browser -s tests/test_browser.py`` (``-s`` shows the screenshot folder and step times).
Skipped only when /usr/bin/chromium is absent (``make browser`` installs it).
"""

from __future__ import annotations

import pytest
from browser_support import REPO, Notebook, copy_notebook, needs_chromium

pytest_plugins = ["browser_support"]  # fixtures: lab (JupyterLab), browser (chromium), page, steps

pytestmark = [pytest.mark.browser, needs_chromium]
NOTEBOOKS = REPO / "notebooks"


def _stage(lab, number: str, overrides: dict) -> str:
    """Copy notebook ``number`` into the lab root with the ci preset plus ``overrides``; its path in the lab."""
    from eagle3kit.runner import notebook_parameters, notebooks

    (source,) = notebooks(NOTEBOOKS, [number])
    workdir = lab.root / "work"
    params = notebook_parameters(source, "ci", overrides, workdir)
    copy_notebook(source, lab.root / source.name, params)
    return source.name


def test_harness_runs_notebook_01(lab, page, steps):
    """Notebook 01 runs to the end through Run > Run All Cells, and an ipywidget renders (the harness itself)."""
    import nbformat

    name = _stage(lab, "01", {"verifier": "tiny", "forward_tokens": 64})
    nb = nbformat.read(lab.root / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import ipywidgets\nipywidgets.IntSlider(value=7, description='harness')"))
    nbformat.write(nb, lab.root / name)
    book = Notebook(page, lab, name)
    with steps("open-notebook-01"):
        book.open()
    with steps("run-all"):
        book.run_all()
        state = book.wait_run_complete(timeout=240)
        assert len(state["counts"]) == sum(c.cell_type == "code" for c in nb.cells)
    with steps("widget-renders"):
        book.assert_widgets_rendered()
        slider = page.locator(".jp-OutputArea-output .widget-slider").last
        assert "harness" in slider.inner_text()
        steps.shot("notebook-01-done")
