"""Bad layouts refused before torch sees them, each in one sentence (notebook 03): what :func:`build_mask` says.

:data:`EXAMPLES` holds one layout per rule (lengths past ``total_seq_len``, an empty document, a ``total_seq_len`` that
is not a multiple of 128 with TTT steps) and two that are fine (one block or less, without extension).
"""

from __future__ import annotations

from eagle3kit.masks.eagle_mask import MaskInputError, build_mask

EXAMPLES: dict[str, dict] = {
    "lengths past total_seq_len": {"lengths": [2000, 1500], "total_seq_len": 3072},
    "an empty document": {"lengths": [300, 0, 200], "total_seq_len": 1024},
    "total_seq_len 300 with 3 TTT steps": {"lengths": [200, 100], "total_seq_len": 300},
    "64 tokens with 3 TTT steps": {"lengths": [64], "total_seq_len": 64},
    "64 tokens with 1 TTT step": {"lengths": [40, 24], "total_seq_len": 64, "ttt_steps": 1},
}


def verdicts(examples: dict[str, dict] | None = None) -> list[str]:
    """One line per layout (``label: build_mask arguments``, default :data:`EXAMPLES`): the mask it makes, or the
    sentence :class:`MaskInputError` refuses it with."""
    lines = []
    for label, kwargs in (EXAMPLES if examples is None else examples).items():
        try:
            mask = build_mask(**kwargs)
        except MaskInputError as exc:
            lines.append(f"{label}: {exc}")
        else:
            lines.append(f"{label}: fine, a {mask.total_seq_len} x {mask.kv_len()} mask")
    return lines
