"""eagle3kit: build, debug and train EAGLE-3 draft models with speculators, on a CPU first."""

__version__ = "0.1.0"

from eagle3kit.figures import show_figures_as_png  # noqa: E402

show_figures_as_png()  # in a notebook, the library's Figures display as images whatever the backend
