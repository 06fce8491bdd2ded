"""eagle3kit: build, debug and train EAGLE-3 draft models with speculators, on a CPU first."""

__version__ = "0.1.0"
