"""The draft as a model: speculators' ``Eagle3DraftModel`` built from a :class:`DraftBuild`, saved, tried once.

Every place in eagle3kit that needs a draft builds it here: verifier-owned weights (embedding, ``lm_head`` rows,
final norm) are loaded through speculators, quietly; the vocab mapping (d2t/t2d) is passed in
(:func:`eagle3kit.data.vocab.build_for_data` reads a data directory's); an optional
warm start copies a verifier layer in (:mod:`eagle3kit.draft.warm_start`).
"""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path

import torch
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.atomic import atomic_dir
from eagle3kit.draft.config import DraftBuild, draft_ttt_steps
from eagle3kit.draft.warm_start import warm_start
from eagle3kit.logs import quiet

TRAINING_RECORD = "eagle3kit_training.json"  # beside an export: how long the sequences it was trained on were


def build_model(build: DraftBuild, t2d: torch.Tensor | None = None, d2t: torch.Tensor | None = None,
                warm_start_layer: int | None = None) -> Eagle3DraftModel:
    """Instantiate ``Eagle3DraftModel`` with the verifier-owned weights loaded through speculators.

    Config-only presets are built on the meta device (shapes and parameter counts, no memory).
    ``warm_start_layer``: start the draft from that verifier decoder layer (None: speculators' random init).
    """
    config = build.config
    if not build.verifier.has_weights:
        with torch.device("meta"):
            return Eagle3DraftModel(config)
    if config.draft_vocab_size != build.verifier.text_config.vocab_size and (t2d is None or d2t is None):
        raise ValueError(
            f"draft_vocab_size={config.draft_vocab_size} is smaller than the verifier's vocab, so the draft needs "
            "t2d/d2t; make them from token frequencies with `eagle3kit data --draft-vocab-size N` "
            "(or leave draft_vocab_size unset)."
        )
    model = Eagle3DraftModel(config)
    model.load_vocab_mappings(t2d, d2t)
    with quiet():
        model.load_verifier_weights()
        if warm_start_layer is not None:
            warm_start(model, build, warm_start_layer)
    return model.to(build.device)


def save_draft(model: Eagle3DraftModel, out_dir: str | os.PathLike, dtype: str = "float32",
               training: dict | None = None) -> Path:
    """The draft in speculators' format (``save_pretrained``), in ``dtype``, written atomically; ``training`` (what
    :meth:`eagle3kit.train.session.TrainSession.export` knows: the pack and document lengths, the steps) is written
    beside it as :data:`TRAINING_RECORD`, which engines ignore.

    The model itself is not changed: a copy is cast (and speculators' ``save_pretrained`` writes
    ``architectures`` / ``auto_map`` into the config it saves, so that too is a copy's).
    """
    if getattr(model, "use_draft_vocab", False) and (model.d2t is None or model.t2d is None):
        raise ValueError("The draft has a reduced vocabulary but no d2t/t2d; load them with "
                         "draft.load_vocab_mappings(t2d, d2t) before saving.")
    twin = copy.deepcopy(model).to(getattr(torch, dtype))
    with atomic_dir(out_dir) as tmp, quiet():
        twin.save_pretrained(tmp)
        if training is not None:
            (tmp / TRAINING_RECORD).write_text(json.dumps(training, indent=1))
    return Path(out_dir)


def read_training(draft_dir: str | os.PathLike) -> dict:
    """The :data:`TRAINING_RECORD` an eagle3kit export holds ({} for a folder without one)."""
    path = Path(draft_dir) / TRAINING_RECORD
    return json.loads(path.read_text()) if path.exists() else {}


def trained_length(training: dict) -> int | None:
    """The longest context a draft was trained at, from a training record (or speculators' run.yaml keys): the
    shortest of its pack (``total_seq_len``), the data's document cap (``seq_length``) and its longest training
    document (``longest_document``, eagle3kit's record only); None when none is known."""
    known = [int(training[k]) for k in ("total_seq_len", "seq_length", "longest_document") if training.get(k)]
    return min(known) if known else None


def forward_random(draft: Eagle3DraftModel, build: DraftBuild, tokens: int) -> tuple[list[torch.Tensor], float]:
    """One no-grad forward of ``draft`` on ``tokens`` random aux hidden states and token ids (one document): the draft
    tokens of each TTT step ([1, tokens] each) and the seconds it took."""
    tl = build.config.transformer_layer_config
    hidden_states = torch.randn(1, tokens, len(build.aux_layer_ids) * tl.hidden_size)
    input_ids = torch.randint(0, tl.vocab_size, (1, tokens))
    document_ids = torch.zeros(1, tokens, dtype=torch.long)
    t0 = time.perf_counter()
    with torch.no_grad():
        draft_tokens = draft(hidden_states=hidden_states, input_ids=input_ids, document_ids=document_ids,
                             ttt_steps=draft_ttt_steps(build.config))
    return draft_tokens, time.perf_counter() - t0
