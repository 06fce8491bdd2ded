"""eagle3kit: build, debug and train EAGLE-3 draft models with speculators, on a CPU first.

Shared modules at the top, below every stage: ``errors``, ``atomic``, ``logs``, ``device``, ``figures``, ``tables``,
``assets``, ``validate`` (the rule of each named value), ``outputs`` (the places a command writes, checked first),
``params`` (a notebook's parameters cell: types, value checks).
"""

__version__ = "0.1.0"

from eagle3kit.figures import show_figures_as_png  # noqa: E402

show_figures_as_png()  # in a notebook, the library's Figures display as images whatever the backend
