"""Catalogue rows broken live on the seed replay's draft (notebook 02): the doctor reads the artifact, then it runs.

``verifier-weights-nan``: the draft built without ``load_verifier_weights()``; ``block-size-128``: speculators' flex
path on a batch whose length is not a multiple of 128 (:func:`odd_length`). Each returns
:func:`~eagle3kit.doctor.catalogue.rows.demonstrate`'s text: the row, the doctor's finding, what running it did, the
fix.
"""

from __future__ import annotations

import torch
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.doctor.catalogue.rows import demonstrate
from eagle3kit.doctor.catalogue.seed_replay import SeedReplay
from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.probe import matrix as probe
from eagle3kit.doctor.probe.worker import make_batch
from eagle3kit.draft.config import with_attention
from eagle3kit.logs import quiet

ODD_TOKENS = 44  # added to the replay's length: one that is not a multiple of 128


def odd_length(seq_len: int) -> int:
    """A length past ``seq_len`` that is not a multiple of 128 (speculators' BlockMask works in 128-token blocks)."""
    return seq_len + ODD_TOKENS


def extra_cells(seq_len: int, ttt_steps: int) -> list[probe.Cell]:
    """Probe cells beyond the matrix: the unset setting in every mode, and flex and sdpa at :func:`odd_length`."""
    odd = odd_length(seq_len)
    return [probe.Cell("unset", mode, seq_len, ttt_steps) for mode in probe.MODES] + [
        probe.Cell("simple_flex_attention", "forward", odd, ttt_steps), probe.Cell("sdpa", "forward", odd, ttt_steps)]


def forgotten_verifier_weights(replay: SeedReplay) -> str:
    """``verifier-weights-nan`` live: the replay's draft (sdpa) built without ``load_verifier_weights()``, so
    speculators' NaN placeholders for the embedding, ``lm_head`` and norm stay; the doctor reads it, then it steps."""
    unloaded = Eagle3DraftModel(with_attention(replay.config, "sdpa")).to(replay.device)

    def step() -> str:
        with torch.no_grad(), quiet():
            _tokens, loss, _ = unloaded(**replay.batch, ttt_steps=replay.ttt_steps, loss_config=replay.loss_config)
        return f"a no-grad step gives loss {float(loss):.4g}"

    return demonstrate("verifier-weights-nan", check(unloaded, device=replay.device, training=False, loss="eager"),
                       step)


def flex_at_odd_length(replay: SeedReplay) -> str:
    """``block-size-128`` live: the replay's flex draft on a batch of :func:`odd_length` tokens."""
    n = odd_length(replay.seq_len)
    flex = replay.model("simple_flex_attention")
    tl = replay.config.transformer_layer_config
    batch = make_batch(n, len(replay.build.aux_layer_ids), tl.hidden_size, tl.vocab_size, replay.seed, replay.device)

    def step() -> str:
        with torch.no_grad(), quiet():
            _tokens, loss, _ = flex(**batch, ttt_steps=replay.ttt_steps, loss_config=replay.loss_config)
        return f"a no-grad step of {n} tokens gives loss {float(loss):.4g}"

    return demonstrate("block-size-128", check(flex, device=replay.device, training=False, loss="eager", seq_len=n,
                                               ttt_steps=replay.ttt_steps), step)
