"""What a data directory says about the draft trained on it, inferred in one place: the verifier its hidden states
came from, the aux layers they are, the draft vocab it has a mapping for (:func:`spec_for_data`).

``eagle3kit train`` / ``launch`` (:mod:`eagle3kit.cli.train`) and
:class:`~eagle3kit.train.session.TrainSession` both ask it; what the user gave wins, the directory tells the rest,
and a directory without a manifest refuses in one sentence (naming the option) what it cannot say."""

from __future__ import annotations

import dataclasses
import os

from eagle3kit.data.directory import DataDir
from eagle3kit.draft.config import DraftSpec, spec_from_saved

VERIFIER_FLAG = "--verifier NAME_OR_DIR (library: draft='NAME' or DraftSpec(verifier=...))"
AUX_FLAG = "--aux-layer-ids (library: DraftSpec(aux_layer_ids=[...]))"


def spec_for_data(data: DataDir, given: dict | None = None) -> DraftSpec:
    """The :class:`DraftSpec` of a draft trained on ``data``: the fields in ``given`` (any of DraftSpec's), the rest
    from the directory: ``verifier`` (its manifest's, or the one it was told), ``aux_layer_ids`` (likewise: a guess
    would train on the wrong layers) and ``draft_vocab_size`` (the one size it has a mapping for, else the full
    vocab). What is given is told to the directory first (checked against its files when it has no manifest)."""
    fields = dict(given or {})
    data.tell(fields.get("verifier"), fields.get("aux_layer_ids"))
    if fields.get("verifier") is None:
        fields["verifier"] = data.require_verifier(VERIFIER_FLAG)
    if fields.get("aux_layer_ids") is None:
        fields["aux_layer_ids"] = data.require_aux_layer_ids(AUX_FLAG)
    fields.setdefault("draft_vocab_size", data.draft_vocab_size)
    return DraftSpec(**fields)


def spec_for(draft: DraftSpec | str | os.PathLike | None, data: DataDir) -> DraftSpec:
    """:func:`spec_for_data` for what :class:`~eagle3kit.train.session.TrainSession` accepts as ``draft``: a
    :class:`DraftSpec` (complete but for its aux layers), a saved draft config folder (its fields, the data's vocab),
    a verifier name, or None (everything from the data)."""
    if isinstance(draft, DraftSpec):
        return spec_for_data(data, dataclasses.asdict(draft))
    if isinstance(draft, os.PathLike):
        saved = dataclasses.asdict(spec_from_saved(draft))
        saved.pop("draft_vocab_size")
        return spec_for_data(data, saved)
    return spec_for_data(data, {"verifier": draft} if draft else {})
