"""The verifier's hidden states of scored sequences, kept beside what was scored, so that a later look at the same
sequences (notebook 07 after 06) runs the draft alone: :data:`~eagle3kit.evaluate.acceptance.VerifierStates` on disk."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from eagle3kit.atomic import atomic_file
from eagle3kit.evaluate.acceptance import VerifierStates


def states_path(scored: str | os.PathLike) -> Path:
    """Where the states of a scored file (:func:`eagle3kit.evaluate.scored.write_scored`'s) are kept."""
    scored = Path(scored)
    return scored.with_name(f"{scored.stem}_states.pt")


def save_states(states: VerifierStates, scored: str | os.PathLike, verifier: str) -> Path:
    """Write ``states`` (computed by ``verifier``, its name or path) beside ``scored``, atomically."""
    path = states_path(scored)
    with atomic_file(path) as tmp:
        torch.save({"verifier": verifier, "states": {k: v.cpu() for k, v in states.items()}}, tmp)
    return path


def load_states(scored: str | os.PathLike, verifier: str) -> VerifierStates:
    """The states kept beside ``scored`` when ``verifier`` computed them; empty otherwise (computed again)."""
    path = states_path(scored)
    if not path.exists():
        return {}
    saved = torch.load(path, weights_only=True)
    return saved["states"] if saved.get("verifier") == verifier else {}
