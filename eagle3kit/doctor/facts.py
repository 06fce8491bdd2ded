"""What a draft config, build or model says about attention: the set value, speculators' resolution, the mask kind.

The mask kind is *measured* by asking speculators' own model code to build a small mask.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from eagle3kit.masks.eagle_mask import BLOCK


@dataclass
class _Subject:
    config: object  # Eagle3SpeculatorConfig
    model: torch.nn.Module | None
    verifier_text: object | None  # the verifier's decoder config, when it can be found


def _subject(obj) -> _Subject:
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    from eagle3kit.draft.config import DraftBuild

    if isinstance(obj, DraftBuild):
        return _Subject(obj.config, None, obj.verifier.text_config)
    if isinstance(obj, Eagle3DraftModel):
        return _Subject(obj.config, obj, _verifier_text(obj.config))
    if isinstance(obj, Eagle3SpeculatorConfig):
        return _Subject(obj, None, _verifier_text(obj))
    raise TypeError(f"got {type(obj).__name__}")


def _verifier_text(config):
    """The verifier's decoder config from the draft config's verifier path, or None when it cannot be read."""
    from transformers import AutoConfig

    path = config.speculators_config.verifier.name_or_path
    if path is None:
        return None
    try:  # local directories and cached hub ids only: the doctor never waits on the network
        cfg = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception:
        return None
    return getattr(cfg, "text_config", None) or cfg


def _ttt_steps(config) -> int:
    return int(config.speculators_config.proposal_methods[0].speculative_tokens)


def mask_kind_of(model) -> str:
    """Build a 128-token EAGLE-3 mask with the model's own mask function and name its kind."""
    from eagle3kit.doctor.probe_worker import mask_kind

    doc = torch.zeros(BLOCK, dtype=torch.long)
    return mask_kind(model._build_attn_mask(doc, BLOCK, "cpu"))  # noqa: SLF001


def attention_facts(subject) -> dict:
    """What the draft sets, what speculators resolves it to, the mask it builds, the backend its layers call.

    ``subject``: an Eagle3SpeculatorConfig, DraftBuild or Eagle3DraftModel. A config is built on the meta device
    (no memory) from a copy, so that speculators' own ``__init__`` does the resolving.
    """
    s = subject if isinstance(subject, _Subject) else _subject(subject)
    set_value = s.config.transformer_layer_config._attn_implementation  # noqa: SLF001
    model = s.model
    if model is None:
        from speculators.models.eagle3 import Eagle3DraftModel

        with torch.device("meta"):
            model = Eagle3DraftModel(copy.deepcopy(s.config))
    layer_cfg = model.layers[0].self_attn.config
    return {"set": set_value, "resolved": model._attn_impl,  # noqa: SLF001
            "backend": layer_cfg._attn_implementation, "mask": mask_kind_of(model)}  # noqa: SLF001


def with_attention(config, implementation: str | None):
    """A deep copy of a draft config whose layers use ``implementation`` (None: unset, as a hand-built config)."""
    out = copy.deepcopy(config)
    out.transformer_layer_config._attn_implementation = implementation  # noqa: SLF001
    return out
