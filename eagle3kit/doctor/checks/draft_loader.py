"""A draft folder read from disk, any speculators-format one (an eagle3kit export, a ``speculators train`` output, a
downloaded draft): found (:func:`locate`), its config and tensors read (:func:`open_draft`), its verifier named
(:func:`resolve_verifier`), the model loaded through speculators (:func:`load_draft`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.draft.config import with_attention
from eagle3kit.errors import UserError
from eagle3kit.logs import quiet
from eagle3kit.verifier import Verifier, resolve

CONFIG = "config.json"

BEST = "checkpoint_best"  # speculators train: a symlink to the best epoch's folder

RUN_FILE = "run.yaml"  # speculators train: the resolved run config, next to the epoch folders



class NotADraftError(UserError):
    """A folder that holds no speculators-format draft."""


@dataclass
class DraftFolder:
    """A draft folder as found on disk: its raw config, its tensors, and the run that trained it when recorded."""

    path: Path
    raw: dict
    tensors: dict[str, torch.Tensor]
    run: dict = field(default_factory=dict)  # speculators' run.yaml (flattened keys), {} when absent


def locate(path: str | os.PathLike) -> Path:
    """The folder holding the draft's config.json: ``path`` itself, or in a ``speculators train`` output folder its
    ``checkpoint_best``, else its last epoch folder."""
    root = Path(path)
    if not root.is_dir():
        raise NotADraftError(f"{root} is not a folder; pass the draft's folder (with config.json and "
                             "model.safetensors).")
    if (root / CONFIG).exists():
        return root
    if (root / BEST / CONFIG).exists():
        return (root / BEST).resolve()
    epochs = sorted((int(p.name), p) for p in root.iterdir() if p.name.isdigit() and (p / CONFIG).exists())
    if epochs:
        return epochs[-1][1]
    raise NotADraftError(f"{root} holds no draft: no config.json (nor a speculators train checkpoint folder); pass "
                         "the folder an export or `speculators train` wrote.")


def _flatten(tree: dict, out: dict | None = None) -> dict:
    out = {} if out is None else out
    for key, value in tree.items():
        _flatten(value, out) if isinstance(value, dict) else out.setdefault(key, value)
    return out


def read_run(draft_dir: Path) -> dict:
    """speculators train's run.yaml (in the draft folder or its parent), flattened to its leaf keys; {} if none."""
    import yaml

    for folder in (draft_dir, draft_dir.parent):
        if (folder / RUN_FILE).exists():
            return _flatten(yaml.safe_load((folder / RUN_FILE).read_text()) or {})
    return {}


def open_draft(path: str | os.PathLike) -> DraftFolder:
    """Read a draft folder's config and tensors; a folder that is not a draft raises :class:`NotADraftError`."""
    import json

    folder = locate(path)
    try:
        raw = json.loads((folder / CONFIG).read_text())
    except json.JSONDecodeError as exc:
        raise NotADraftError(f"{folder / CONFIG} is not JSON ({exc}); it is not a draft's config.") from exc
    if "speculators_model_type" not in raw:
        raise NotADraftError(f"{folder / CONFIG} has no speculators_model_type: not a speculators-format draft "
                             "(convert it with `speculators convert`, or pass the draft's folder).")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise NotADraftError(f"{folder} has a draft config but no *.safetensors weights; copy the whole folder.")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return DraftFolder(folder, raw, tensors, read_run(folder))


def resolve_verifier(folder: DraftFolder, verifier: str | os.PathLike | None) -> Verifier:
    """``verifier`` (a name or a directory), else the one the draft's config names; a :class:`UserError` if it
    cannot be read locally."""
    named = ((folder.raw.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    wanted = verifier if verifier is not None else named
    if wanted is None:
        raise UserError(f"{folder.path / CONFIG} names no verifier (speculators_config.verifier); pass --verifier.")
    return resolve(wanted)


def load_draft(folder: DraftFolder, config: Eagle3SpeculatorConfig, verifier: Verifier):
    """The draft through speculators' ``SpeculatorModel.from_pretrained``, its verifier-owned weights from
    ``verifier`` (sdpa attention, as the CPU decode loop needs), in float32 like the verifier the doctor runs
    (a bfloat16 folder would not take float32 hidden states)."""
    config = with_attention(config, "sdpa")
    config.speculators_config.verifier.name_or_path = verifier.path
    with quiet():
        return SpeculatorModel.from_pretrained(str(folder.path), config=config).float().eval()


def trained_length(path: str | os.PathLike) -> int | None:
    """The longest context the draft in ``path`` was trained at, where its folder says it: eagle3kit's training
    record (an export or a checkpoint), else speculators train's run.yaml (``total_seq_len``); None otherwise."""
    from eagle3kit.draft.model import read_training
    from eagle3kit.draft.model import trained_length as from_record

    folder = locate(path)
    return from_record(read_training(folder)) or from_record(read_run(folder))


def sliding_window(config: Eagle3SpeculatorConfig) -> int | None:
    """The draft's sliding window when one of its layers uses it (speculators' ``layer_types``), else None."""
    layer = config.transformer_layer_config
    if "sliding_attention" not in (getattr(layer, "layer_types", None) or []):
        return None
    return getattr(layer, "sliding_window", None)
