"""Export a draft in speculators' format (with its d2t/t2d vocab mapping), reload it, and the vLLM commands to serve it.

The folder is what ``speculators train`` writes and vLLM reads: ``config.json`` (an ``Eagle3SpeculatorConfig`` with a
``speculators_config`` naming the verifier) and ``model.safetensors`` (draft weights, the frozen embedding, and the
``d2t`` / ``t2d`` buffers when the draft has its own vocabulary). The verifier's ``lm_head`` and final norm are not
saved: speculators loads them from the verifier on reload.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from pathlib import Path

import pandas as pd
import torch

from eagle3kit.atomic import atomic_dir


def save_draft(draft, out_dir: str | os.PathLike, dtype: str = "float32") -> Path:
    """Write ``draft`` with speculators' ``save_pretrained`` into ``out_dir`` (atomically)."""
    import copy

    if getattr(draft, "use_draft_vocab", False) and (draft.d2t is None or draft.t2d is None):
        raise ValueError("The draft has a reduced vocabulary but no d2t/t2d; load them with "
                         "draft.load_vocab_mappings(t2d, d2t) before exporting.")
    target = Path(out_dir)
    model = draft if dtype == "float32" else copy.deepcopy(draft).to(getattr(torch, dtype))
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
    return target


@contextlib.contextmanager
def _quiet_speculators():
    """Silence speculators' loguru messages about where it finds the verifier's weights (they are expected)."""
    from loguru import logger

    logger.disable("speculators")
    try:
        yield
    finally:
        logger.enable("speculators")


def reload(path: str | os.PathLike, attn_implementation: str | None = "sdpa"):
    """Load an exported draft with speculators' ``SpeculatorModel.from_pretrained`` (class from the config).

    ``attn_implementation`` sets the draft layers' attention before the model is built (``None`` keeps
    speculators' default, ``simple_flex_attention``); the CPU decode loop needs ``sdpa`` or ``eager``.
    """
    from speculators import SpeculatorModel
    from speculators.models.eagle3 import Eagle3SpeculatorConfig

    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} has no config.json; export the draft there first (export_draft).")
    config = Eagle3SpeculatorConfig.from_pretrained(str(path))
    if attn_implementation is not None:
        config.transformer_layer_config._attn_implementation = attn_implementation  # noqa: SLF001
    with _quiet_speculators():
        return SpeculatorModel.from_pretrained(str(path), config=config).eval()


def reload_check(draft, path: str | os.PathLike) -> pd.DataFrame:
    """Compare every saved tensor of ``draft`` with the reloaded model: one row per tensor, max |difference|."""
    reloaded = reload(path, attn_implementation=None)
    mine, theirs = draft.state_dict(), reloaded.state_dict()
    rows = []
    for name, tensor in mine.items():
        other = theirs.get(name)
        if other is None:
            rows.append({"tensor": name, "shape": tuple(tensor.shape), "max_abs_diff": None, "ok": False})
            continue
        diff = (tensor.double() - other.double()).abs().max().item() if tensor.numel() else 0.0
        rows.append({"tensor": name, "shape": tuple(tensor.shape), "max_abs_diff": diff,
                     "ok": tensor.shape == other.shape and diff == 0.0})
    return pd.DataFrame(rows)


def files(path: str | os.PathLike) -> pd.DataFrame:
    """The exported files and their sizes."""
    rows = [{"file": p.name, "MB": round(p.stat().st_size / 1e6, 2)} for p in sorted(Path(path).iterdir())]
    return pd.DataFrame(rows)


def vllm_commands(path: str | os.PathLike, k: int | None = None, verifier: str | None = None) -> dict[str, str]:
    """How to serve the exported draft with vLLM.

    ``short``: ``vllm serve DRAFT`` (vLLM reads ``speculators_config``: verifier, method, speculative tokens).
    ``long``: the verifier first and the draft in ``--speculative-config`` (lets you change ``k`` or the verifier,
    e.g. a quantized one). ``verifier`` defaults to the one recorded in ``config.json``.
    """
    path = Path(path).resolve()
    cfg = json.loads((path / "config.json").read_text())
    spec = cfg["speculators_config"]
    k = k or spec["proposal_methods"][0]["speculative_tokens"]
    verifier = verifier or spec["verifier"]["name_or_path"]
    speculative = json.dumps({"model": str(path), "num_speculative_tokens": k, "method": "eagle3"})
    return {
        "short": f"vllm serve {shlex.quote(str(path))}",
        "long": f"vllm serve {shlex.quote(str(verifier))} --speculative-config {shlex.quote(speculative)}",
    }
