"""Whether an exported draft is checked in vLLM here, and the check when it is: each reason to skip said in one line.

The gates, in order: vLLM's CPU build must be able to serve the draft (:class:`VllmInputError` otherwise), the check
must be asked for, and the vLLM environment must exist (:class:`VllmNotInstalled` otherwise).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from eagle3kit.evaluate.acceptance import Acceptance
from eagle3kit.evaluate.export import vllm_commands
from eagle3kit.vllm_env import MAKE_IT, VllmNotInstalled, vllm_python
from eagle3kit.evaluate.vllm.serve import VllmCheck, VllmInputError, check_sets

MAIN = ""  # the main prompts' set, named apart from any group's (a group may be called "held-out")


@dataclass
class VllmGate:
    """The serve command (None: vLLM's CPU build cannot serve the draft), the check (None: skipped) and why not."""

    command: str | None
    check: VllmCheck | None  # on the main prompts
    skipped: str | None
    groups: dict[str, VllmCheck] = field(default_factory=dict)  # on each further group of prompts (same run)

    def lines(self) -> list[str]:
        """What a reader is told: why the check was skipped, then the command that serves the draft."""
        return ([self.skipped] if self.skipped else []) + ([f"serve it: {self.command}"] if self.command else [])

    def acceptance(self, simulated: Acceptance) -> tuple[list[float], str]:
        """Acceptance per draft position and where it comes from: vLLM's counters when the check ran, else
        ``simulated`` (every start position)."""
        if self.check is not None:
            return self.check.acceptance_per_pos, "vLLM's counters"
        return simulated.rates()["cumulative"].fillna(0.0).tolist(), "simulated"


def check_in_vllm(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None, prompts: list[list[int]],
                  max_new_tokens: int, k: int, enabled: bool, groups: dict[str, list[list[int]]] | None = None
                  ) -> VllmGate:
    """Check the draft in vLLM's CPU build on ``prompts`` (token ids) when ``enabled`` and every gate is open;
    ``groups``: further named prompt lists generated in the same batch (one engine start a run), each checked apart
    with its own counters (:func:`check_sets`)."""
    try:
        command = vllm_commands(draft_dir, k, verifier_dir)["long"]
    except VllmInputError as exc:  # e.g. a head_dim vLLM's CPU attention lacks (the doctor warns about it)
        return VllmGate(None, None, f"vLLM's CPU build cannot serve this draft: {exc}")
    if not enabled:
        return VllmGate(command, None, f"skipped: vllm_check = False (install vLLM's CPU build once with {MAKE_IT}, "
                                       "then set vllm_check = True)")
    try:
        vllm_python()
    except VllmNotInstalled as exc:
        return VllmGate(command, None, f"skipped: {exc}")
    sets = {MAIN: [list(p) for p in prompts], **{name: [list(p) for p in g] for name, g in (groups or {}).items()}}
    whole, parts = check_sets(draft_dir, verifier_dir, sets, max_new_tokens, k=k)  # one engine start a run
    main = parts.pop(MAIN)
    return VllmGate(command, main if groups else whole, None, parts)
