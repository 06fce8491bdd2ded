"""What the doctor needs of a data directory when it checks a draft folder against it: the one adapter between the
two (:func:`read_data_dir` -> :class:`DataFacts`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from eagle3kit.data.directory import DataDir
from eagle3kit.data.loader import held_out_conversations
from eagle3kit.data.vocab import load_mapping
from eagle3kit.verifier import Verifier, resolve


@dataclass
class DataFacts:
    """What the doctor needs of a data directory."""

    verifier: str
    aux_layer_ids: list[int]
    t2d: torch.Tensor | None  # the mapping for the draft's vocab size; None when the draft uses the full vocab
    d2t: torch.Tensor | None
    conversations: list[list[dict]]  # held out of training
    aux_source: str = "manifest"  # or "measured": a directory without a manifest, its aux slices matched to layers


def read_data_dir(data_dir: str | os.PathLike, draft_vocab_size: int | None = None,
                  verifier: Verifier | None = None) -> DataFacts:
    """The one adapter between the doctor and a data directory (its manifest, mapping and held-out conversations).
    A directory without a manifest (speculators' pipeline) is read with ``verifier`` (the draft's) and its aux layers
    are measured: which verifier layer each stored slice is (:func:`eagle3kit.data.supervision.audit_aux`)."""
    from eagle3kit.data.supervision import audit_aux

    d = DataDir.open(data_dir, verifier)  # told only to a directory without a manifest (one with names its own)
    ref = d.require_verifier()
    aux, source = d.aux_layer_ids, "manifest"
    if not d.has_manifest:
        aux, source = audit_aux(d, ref)["matched"], "measured"
    vocab = d.manifest.verifier.vocab_size if d.has_manifest else resolve(ref).text_config.vocab_size
    t2d = d2t = None
    if draft_vocab_size is not None and draft_vocab_size < vocab:
        t2d, d2t = load_mapping(d, draft_vocab_size, vocab)
    return DataFacts(ref, list(aux), t2d, d2t, held_out_conversations(d), source)
