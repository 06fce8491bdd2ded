"""eagle3kit's Figures display as PNG images in IPython, whatever the kernel's matplotlib backend.

The plot functions build ``matplotlib.figure.Figure`` without pyplot (safe from a widget's worker thread). IPython
draws a Figure only once matplotlib's inline backend has registered its printer (``%matplotlib inline``, or pyplot
imported under the inline backend); before that a returned Figure shows as the text ``<Figure size 1100x320 with 3
Axes>``. :func:`show_figures_as_png` registers IPython's own printer (``IPython.core.pylabtools.print_figure``, what
``%matplotlib inline`` registers) on the running shell when none is there; ``eagle3kit/__init__.py`` calls it once.
:func:`png_bytes` renders a Figure for the widgets' image views. :func:`widget_bundle` / :func:`show_widget` display a
widget with a static fallback: a notebook saved by papermill keeps no widget state, so a viewer shows the bundle's
image (the widget's current figure) or its text instead of the widget's ``VBox(children=...`` repr.

Log-scale ticks are drawn with mathtext, which looks for the STIX and Computer Modern fonts matplotlib ships. A font
cache (``~/.cache/matplotlib/fontlist-*.json``) written by a matplotlib without them lists only the system's fonts,
and each lookup then writes ``findfont: Font family ['STIXGeneral'] not found`` to stderr; matplotlib keeps such a
cache while its version matches. :func:`use_bundled_fonts` adds the shipped fonts the cache lacks (in memory only).
"""

from __future__ import annotations

import io
import os
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

IMAGE_FORMATS = ("image/png", "image/svg+xml", "image/jpeg", "application/pdf")


def use_bundled_fonts(manager: Any = None) -> list[str]:
    """Add to ``manager`` (default: matplotlib's ``fontManager``) the fonts matplotlib ships that it does not list;
    return their file names (empty when the cache is whole, the usual case)."""
    import matplotlib
    from matplotlib import font_manager

    manager = manager if manager is not None else font_manager.fontManager
    listed = {os.path.realpath(f.fname) for f in manager.ttflist}
    shipped = sorted(Path(matplotlib.get_data_path(), "fonts", "ttf").glob("*.ttf"))
    missing = [p for p in shipped if os.path.realpath(p) not in listed]
    for path in missing:
        manager.addfont(path)
    return [p.name for p in missing]


def png_bytes(fig: Figure, dpi: int = 80) -> bytes:
    """A matplotlib Figure as PNG bytes (what a widget's ``ipywidgets.Image`` shows; no pyplot state)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


WIDGET_NOTE = "interactive: run this cell in JupyterLab to use the controls (a saved notebook keeps no widget state)"


def widget_bundle(widget: Any, still: Figure | None = None, note: str = WIDGET_NOTE) -> dict[str, Any]:
    """``widget``'s display bundle with a static fallback: ``note`` as its text and, given ``still`` (the widget's
    current figure), that figure as its PNG. A live kernel's front end renders the widget; a saved notebook, without
    widget state, shows the image or the note."""
    import base64

    data = dict(widget._repr_mimebundle_())
    data["text/plain"] = note
    if still is not None:
        data["image/png"] = base64.b64encode(png_bytes(still)).decode("ascii")
    return data


def show_widget(widget: Any, still: Figure | None = None, note: str = WIDGET_NOTE) -> None:
    """Display ``widget`` with the static fallback of :func:`widget_bundle` (use it instead of ``display(widget)``)."""
    from IPython.display import display

    display(widget_bundle(widget, still, note), raw=True)


def show_figures_as_png(shell: Any = None) -> bool:
    """Make ``shell`` (default: the running IPython shell, if any) display matplotlib Figures as PNG.

    A printer already registered for Figure (``%matplotlib inline``, ``set_matplotlib_formats('svg')``, ipympl) is
    kept. Returns whether a Figure now has an image printer; False outside IPython (nothing to do there).
    """
    if shell is None:
        ipython = sys.modules.get("IPython")  # not imported: no shell is running, and importing it would cost time
        shell = ipython.get_ipython() if ipython is not None else None
    formatter = getattr(shell, "display_formatter", None)
    if formatter is None:
        return False
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    use_bundled_fonts()  # also under ``%matplotlib inline`` (its printer returns early below)

    printers = [formatter.ipython_display_formatter]  # ipympl / nbagg show Figures as widgets there
    printers += [formatter.formatters[m] for m in IMAGE_FORMATS if m in formatter.formatters]
    if any(has_printer(p, Figure) for p in printers):
        return True
    formatter.formatters["image/png"].for_type(Figure, partial(print_figure, fmt="png", base64=True))
    return True


def has_printer(formatter: Any, cls: type) -> bool:
    """Whether an IPython formatter has a printer for ``cls`` (registered for it or a base class)."""
    try:
        formatter.lookup_by_type(cls)
    except KeyError:
        return False
    return True

