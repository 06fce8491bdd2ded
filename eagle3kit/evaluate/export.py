"""An exported draft (:func:`eagle3kit.draft.model.save_draft`): reload it, compare it, the vLLM commands to serve it.

The folder is what ``speculators train`` writes and vLLM reads: ``config.json`` (an ``Eagle3SpeculatorConfig`` with a
``speculators_config`` naming the verifier) and ``model.safetensors`` (draft weights, the frozen embedding, and the
``d2t`` / ``t2d`` buffers when the draft has its own vocabulary). The verifier's ``lm_head`` and final norm are not
saved: speculators loads them from the verifier on reload.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pandas as pd
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.logs import quiet


def reload(path: str | os.PathLike, attn_implementation: str | None = "sdpa"):
    """Load an exported draft with speculators' ``SpeculatorModel.from_pretrained`` (class from the config).

    ``attn_implementation`` sets the draft layers' attention before the model is built (``None`` keeps
    speculators' default, ``simple_flex_attention``); the CPU decode loop needs ``sdpa`` or ``eager``.
    """
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} has no config.json; export the draft there first "
                                "(`eagle3kit train ... --export DIR`).")
    config = Eagle3SpeculatorConfig.from_pretrained(str(path))
    if attn_implementation is not None:
        config.transformer_layer_config._attn_implementation = attn_implementation  # noqa: SLF001
    with quiet():
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
