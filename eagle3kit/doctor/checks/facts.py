"""What a draft config, build or model says about attention: the set value, speculators' resolution, the mask kind.

The mask kind is *measured* by asking speculators' own model code to build a small mask.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from torch.nn.attention.flex_attention import BlockMask
from transformers import AutoConfig

from eagle3kit.draft.config import DraftBuild
from eagle3kit.masks.eagle_mask import BLOCK
from eagle3kit.verifier import Verifier


@dataclass
class DoctorSubject:
    """What the doctor examines, whatever it was handed: the draft config, the model if any, the verifier if found."""

    config: Eagle3SpeculatorConfig
    model: Eagle3DraftModel | None
    verifier: Verifier | None  # None when the config's verifier cannot be read locally


def doctor_subject(obj) -> DoctorSubject:
    """An ``Eagle3SpeculatorConfig``, ``DraftBuild`` or ``Eagle3DraftModel`` as a :class:`DoctorSubject`."""
    if isinstance(obj, DoctorSubject):
        return obj
    if isinstance(obj, DraftBuild):
        return DoctorSubject(obj.config, None, obj.verifier)
    if isinstance(obj, Eagle3DraftModel):
        return DoctorSubject(obj.config, obj, local_verifier(obj.config))
    if isinstance(obj, Eagle3SpeculatorConfig):
        return DoctorSubject(obj, None, local_verifier(obj))
    raise TypeError(f"got {type(obj).__name__}")


def local_verifier(config: Eagle3SpeculatorConfig) -> Verifier | None:
    """The verifier named in the draft config, when its config can be read without the network; else None."""
    path = config.speculators_config.verifier.name_or_path
    if path is None:
        return None
    try:  # local directories and cached hub ids only: the doctor never waits on the network
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception:
        return None
    return Verifier(Path(path).name, str(path), cfg, "local" if Path(path).is_dir() else "hub")


def mask_kind(mask) -> str:
    """Name the kind of attention mask speculators built: BlockMask, bool dense or float additive."""
    if isinstance(mask, BlockMask):
        return "BlockMask"
    if isinstance(mask, torch.Tensor):
        if mask.dtype == torch.bool:
            return "bool dense"
        return "float additive" if mask.is_floating_point() else "int dense"
    return type(mask).__name__


def mask_kind_of(model: Eagle3DraftModel) -> str:
    """Build a 128-token EAGLE-3 mask with the model's own mask function and name its kind."""
    doc = torch.zeros(BLOCK, dtype=torch.long)
    return mask_kind(model._build_attn_mask(doc, BLOCK, "cpu"))  # noqa: SLF001


def attention_facts(subject) -> dict:
    """What the draft sets, what speculators resolves it to, the mask it builds, the backend its layers call.

    ``subject``: an Eagle3SpeculatorConfig, DraftBuild or Eagle3DraftModel. A config is built on the meta device
    (no memory) from a copy, so that speculators' own ``__init__`` does the resolving.
    """
    s = doctor_subject(subject)
    set_value = s.config.transformer_layer_config._attn_implementation  # noqa: SLF001
    model = s.model
    if model is None:
        with torch.device("meta"):
            model = Eagle3DraftModel(copy.deepcopy(s.config))
    layer_cfg = model.layers[0].self_attn.config
    return {"set": set_value, "resolved": model._attn_impl,  # noqa: SLF001
            "backend": layer_cfg._attn_implementation, "mask": mask_kind_of(model)}  # noqa: SLF001
