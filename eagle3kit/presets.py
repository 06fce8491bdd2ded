"""Named parameter presets for the notebooks: ``ci`` (small budgets, real SmolLM2) and ``demo`` (the full run).

``COMMON`` holds keys shared by several notebooks; ``NOTEBOOKS[nn]`` the keys of notebook ``nn``. The runner passes
a notebook only the keys it declares in its ``parameters`` cell, plus ``workdir`` (the run's shared folder).
"""

from __future__ import annotations

COMMON: dict[str, dict[str, object]] = {
    "ci": {"verifier": "smollm2", "seed": 0},
    "demo": {"verifier": "smollm2", "seed": 0},
}

NOTEBOOKS: dict[str, dict[str, dict[str, object]]] = {
    "01": {
        "ci": {"num_layers": 1, "draft_arch": "llama", "ttt_steps": 3, "forward_tokens": 128},
        "demo": {"num_layers": 1, "draft_arch": "llama", "ttt_steps": 3, "forward_tokens": 256},
    },
}

NAMES = tuple(COMMON)


def parameters(preset: str, notebook: str) -> dict[str, object]:
    """The preset's parameters for notebook ``nn`` (common keys first, then the notebook's own)."""
    if preset not in COMMON:
        raise ValueError(f"Unknown preset {preset!r}; use one of {', '.join(NAMES)}.")
    return {**COMMON[preset], **NOTEBOOKS.get(notebook, {}).get(preset, {})}
