"""Does τ fall past the length the draft was trained at? ``doctor --why-tau`` measures the draft on held-out long
contexts (:mod:`eagle3kit.evaluate.long_context`) at its training length and at twice it (within the
verifier's limit), and says so with the two lengths and what to change (:class:`eagle3kit.evaluate.context_curve.Fall`).

The training length comes from the draft's folder (:func:`eagle3kit.doctor.checks.draft_loader.trained_length`:
eagle3kit's
training record, speculators' run.yaml); a folder that records none is not measured.
"""

from __future__ import annotations

import os

from eagle3kit.doctor.checks.draft_loader import trained_length
from eagle3kit.evaluate import context_curve, long_context

PROMPTS = 2  # held-out long contexts at each length
PAST = (2,)  # the lengths past training measured, as multiples of the training length
NEW_TOKENS = 32  # the verifier's reply to each


def lengths(trained: int, limit: int) -> list[int]:
    """The training length, then the :data:`PAST` multiples of it that fit under ``limit`` (only the training length
    when none does: nothing past it can be served)."""
    return [trained] + [m * trained for m in PAST if m * trained <= limit]


def context_fall(draft_dir: str | os.PathLike, draft, verifier_model, tokenizer, k: int,
                 data_dir: str | os.PathLike | None = None, per_length: int = PROMPTS,
                 max_new_tokens: int = NEW_TOKENS) -> context_curve.Fall | None:
    """τ within the training length against τ past it, measured here (None when the folder records no training
    length, or the verifier serves nothing past it). ``data_dir``: its training conversations are left out."""
    trained = trained_length(draft_dir)
    limit = verifier_model.config.max_position_embeddings
    if not trained or len(measured := lengths(trained, limit)) < 2:
        return None
    exclude = long_context.training_prompts(data_dir) if data_dir else set()
    prompts = long_context.long_context_set(tokenizer, limit, per_length, exclude, lengths=measured,
                                            reply_room=max_new_tokens)
    _ids, _conts, records = long_context.score(verifier_model, {"draft": draft}, tokenizer, prompts, max_new_tokens, k,
                                               progress=False)
    return context_curve.fall(context_curve.curve_table(records["draft"]), trained)
