"""An exported draft (:func:`eagle3kit.draft.model.save_draft`): reload it, compare it, the vLLM commands to serve it.

The folder is what ``speculators train`` writes and vLLM reads: ``config.json`` (an ``Eagle3SpeculatorConfig`` with a
``speculators_config`` naming the verifier) and ``model.safetensors`` (draft weights, the frozen embedding, and the
``d2t`` / ``t2d`` buffers when the draft has its own vocabulary). The verifier's ``lm_head`` and final norm are not
saved: speculators loads them from the verifier on reload.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pandas as pd
import torch
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.draft.config import set_attention
from eagle3kit.evaluate.vllm import serve
from eagle3kit.logs import quiet


def reload(path: str | os.PathLike, attn_implementation: str | None = "sdpa", dtype: torch.dtype = torch.float32):
    """Load an exported draft with speculators' ``SpeculatorModel.from_pretrained`` (class from the config).

    ``attn_implementation`` sets the draft layers' attention before the model is built (``None`` keeps
    speculators' default, ``simple_flex_attention``); the CPU decode loop needs ``sdpa`` or ``eager``. The weights
    come back in ``dtype`` (float32: the verifier's width in evaluation; speculators' checkpoints are bf16).
    """
    path = Path(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} has no config.json; export the draft there first "
                                "(`eagle3kit train ... --export DIR`).")
    config = Eagle3SpeculatorConfig.from_pretrained(str(path))
    if attn_implementation is not None:
        set_attention(config, attn_implementation)
    with quiet():
        return SpeculatorModel.from_pretrained(str(path), config=config).to(dtype).eval()


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


def serve_line(path: str | os.PathLike) -> str:
    """``vllm serve DRAFT``: vLLM reads the verifier, the method and the speculative tokens from the draft's config."""
    return shlex.join(["vllm", "serve", str(Path(path).absolute())])


def vllm_commands(path: str | os.PathLike, k: int | None = None, verifier: str | os.PathLike | None = None
                  ) -> dict[str, str]:
    """How to serve the exported draft with vLLM.

    ``short``: ``vllm serve DRAFT`` (vLLM reads ``speculators_config``: verifier, method, speculative tokens).
    ``long``: :func:`~eagle3kit.evaluate.vllm.serve.serve_command` as a shell line, for vLLM's CPU build: the verifier
    directory first (``verifier``, default: the one recorded in ``config.json``), the draft and ``k`` in
    ``--speculative-config``. A draft that build cannot serve raises
    :class:`~eagle3kit.evaluate.vllm.serve.VllmInputError` saying why.
    """
    path = Path(path).resolve()
    return {"short": serve_line(path),
            "long": serve.shell_command(serve.serve_command(path, verifier, k))}
