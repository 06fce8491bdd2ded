"""τ live while training: every N steps, the draft's simulated τ on a small fixed set of held-out prompts.

The verifier's greedy replies to the prompts are written once, and its hidden states over them are kept after the
first measurement (:func:`eagle3kit.evaluate.acceptance.simulate_each` with ``states``): each later measurement is
draft forwards only, speculators' own forward in eval mode under ``no_grad``, the session's training forward untouched.
SpecForge picks checkpoints by such a simulated acceptance (without the bonus token); this τ counts it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eagle3kit.evaluate.defaults import MAX_PROMPT_TOKENS
from eagle3kit.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import torch

EVERY = 10  # the default frequency: a measurement every this many steps (bench/live_tau.py measures its cost)
PROMPTS = 4  # held-out prompts measured
NEW_TOKENS = 32  # the verifier's greedy reply to each
TAU = "tau"  # the key a step's record carries τ under (TrainSession.history)
TAU_SECONDS = "tau_seconds"  # ... and the seconds the measurement took (not counted in the step's "seconds")
TAU_PROMPTS = "tau_prompts"  # ... and on how many held-out prompts


@dataclass
class LiveTau:
    """The prompts, the verifier's replies and its cached hidden states; :meth:`measure` scores a draft on them."""

    verifier: object
    prompts: list[torch.Tensor]
    conts: list[list[int]]
    k: int
    every: int = EVERY
    states: dict = field(default_factory=dict)  # the verifier's hidden states (acceptance.VerifierStates)

    @classmethod
    def for_session(cls, session, every: int = EVERY, n_prompts: int = PROMPTS, max_new_tokens: int = NEW_TOKENS,
                    max_prompt_tokens: int = MAX_PROMPT_TOKENS, verifier: torch.nn.Module | None = None) -> LiveTau:
        """The first ``n_prompts`` held-out prompts of the session's data directory (its held-out conversations, or
        for a directory speculators made, its validation rows), the session's verifier and TTT steps. ``verifier``:
        the session's verifier already loaded (on the session's device), else it is loaded here."""
        from eagle3kit.data.loader import held_out_conversations, held_out_prompt_ids
        from eagle3kit.evaluate import acceptance as ev
        from eagle3kit.verifier import load_model, load_tokenizer

        if every < 1:
            raise UserError(f"--eval-every must be at least 1 step (got {every}).")
        build, data = session.build, session.data
        tokenizer = load_tokenizer(build.verifier)
        if verifier is None:
            verifier = load_model(build.verifier, device=session.device)
        held = held_out_conversations(data.path)
        prompts = (ev.chat_prompts(tokenizer, held, n_prompts, max_prompt_tokens) if held else
                   held_out_prompt_ids(data.path, n_prompts, max_prompt_tokens, session.settings.train_data_ratio))
        conts = ev.continuations(verifier, prompts, max_new_tokens, tokenizer.eos_token_id, progress=False)
        return cls(verifier, prompts, conts, session.ttt_steps, every)

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def measure(self, draft) -> dict[str, float]:
        """The draft's τ on the prompts (eval mode, no_grad; its training mode restored), and the seconds it took."""
        from eagle3kit.evaluate import acceptance as ev

        t0, was_training = time.perf_counter(), draft.training
        draft.eval()
        try:
            parts = ev.simulate_each(self.verifier, draft, self.prompts, self.conts, self.k, progress=False,
                                     states=self.states)
        finally:
            draft.train(was_training)
        return {TAU: ev.merge(parts).tau, TAU_SECONDS: time.perf_counter() - t0, TAU_PROMPTS: len(self.prompts)}

    def describe(self) -> str:
        from eagle3kit.evaluate.conventions import TAU_LABEL

        return (f"{TAU_LABEL}, simulated on the first {len(self.prompts)} prompts of the held-out set "
                f"(the verifier's greedy replies: {', '.join(str(len(c)) for c in self.conts)} tokens, shorter than "
                f"notebook 06's), every {self.every} steps")


def tau_points(history: list[dict]) -> tuple[list[int], list[float]]:
    """(steps, τ) of the records that carry a live τ."""
    rows = [(r["step"], r[TAU]) for r in history if r.get(TAU) is not None]
    return [s for s, _ in rows], [t for _, t in rows]


def trajectory(history: list[dict]) -> str | None:
    """Where live τ started and ended, and the range it moved in (a sentence), or None with fewer than two
    measurements. No peak is singled out: a few prompts' τ moves by a few tokens' luck from one measurement to the
    next, so its highest point is no better checkpoint than its neighbours."""
    steps, taus = tau_points(history)
    if len(taus) < 2:
        return None
    prompts = next((r[TAU_PROMPTS] for r in reversed(history) if r.get(TAU_PROMPTS)), None)
    return (f"live τ: {taus[0]:.3f} at step {steps[0]}, {taus[-1]:.3f} at step {steps[-1]} (between {min(taus):.3f} "
            f"and {max(taus):.3f} over {len(taus)} measurements); measured on {prompts or 'a few'} prompts kept out of "
            "training, a rough guide while training (on so few prompts one measurement moves by a few tokens' luck): "
            "notebook 06 measures τ on all of its held-out set")


MILESTONE_WINDOW = 50  # steps averaged into each row of :func:`milestones` (one batch's loss is noisy)


def milestones(history: list[dict], ttt_steps: int, window: int = MILESTONE_WINDOW) -> pd.DataFrame:
    """The run at a glance: its first step, each step that measured live τ, and its last, with the loss and each TTT
    step's accuracy (``full_acc_k``: the share of positions whose first k + 1 draft tokens were all right), each the
    mean of the ``window`` steps up to that row (one batch's figures move with the batch), and τ."""
    import pandas as pd  # noqa: F811 (at run time; the module stays light to import)

    columns = ["loss"] + [f"full_acc_{k}" for k in range(ttt_steps)]
    rows = []
    for i, r in enumerate(history):
        if i in (0, len(history) - 1) or r.get(TAU) is not None:
            recent = history[max(0, i - window + 1): i + 1]
            rows.append({"step": r["step"], "steps averaged": len(recent),
                         **{c: round(sum(x[c] for x in recent) / len(recent), 3) for c in columns if c in r},
                         "live τ": round(r[TAU], 3) if r.get(TAU) is not None else None})
    return pd.DataFrame(rows).drop_duplicates("step", keep="last").set_index("step")
