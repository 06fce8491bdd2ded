"""Reported pipeline bugs applied to a real data directory, in place: the broken artifacts the doctor's and the
overfit check's tests (and ``bench/overfit_verdict.py``) are built from. Each function names the bug it replays."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from eagle3kit.data.directory import DataDir
from eagle3kit.data.hidden_states import extract, final_norm
from eagle3kit.verifier import load_model


def _rewrite_states(data: DataDir, fn: Callable[[dict[str, torch.Tensor]], torch.Tensor]) -> None:
    for path in data.hidden_state_files():
        tensors = load_file(str(path))
        tensors["hidden_states"] = fn(tensors).contiguous()
        save_file(tensors, str(path))


@torch.no_grad()
def aux_one_layer_late(data_dir: str | os.PathLike, verifier=None) -> None:
    """Aux states captured as the *output* of layer i (HF ``hidden_states[i + 1]``) instead of its input."""
    data = DataDir.open(data_dir)
    model = load_model(verifier if verifier is not None else data.verifier_ref)
    late_ids = [i + 1 for i in data.aux_layer_ids]

    def late(t: dict[str, torch.Tensor]) -> torch.Tensor:
        h = t["hidden_states"].clone()
        h[:, :-1] = extract(model, t["token_ids"][None], late_ids)[0, :, :-1].to(h.dtype)
        return h
    _rewrite_states(data, late)


@torch.no_grad()
def last_state_normed(data_dir: str | os.PathLike, verifier=None) -> None:
    """The last state stored after the final norm (transformers' ``hidden_states[-1]``)."""
    data = DataDir.open(data_dir)
    norm = final_norm(load_model(verifier if verifier is not None else data.verifier_ref))

    def normed(t: dict[str, torch.Tensor]) -> torch.Tensor:
        h = t["hidden_states"].clone()
        h[:, -1] = norm(h[:, -1].float()).to(h.dtype)
        return h
    _rewrite_states(data, normed)


def d2t_all_zero(data_dir: str | os.PathLike) -> None:
    """Every ``d2t-{N}.npy`` set to zeros (SafeAILab/EAGLE issue 222): draft id i decodes as verifier id i."""
    data = DataDir.open(data_dir)
    for n in data.draft_vocab_sizes:
        d2t_path = data.mapping_paths(n)[0]
        np.save(d2t_path, np.zeros_like(np.load(d2t_path)))


def d2t_one_id_off(data_dir: str | os.PathLike) -> None:
    """Every ``d2t-{N}.npy`` offset by one: draft token i decodes as the verifier id after the right one (a mapping
    whose ids and offsets disagree by one, as when absolute ids and offsets are mixed)."""
    data = DataDir.open(data_dir)
    for n in data.draft_vocab_sizes:
        d2t_path = data.mapping_paths(n)[0]
        np.save(d2t_path, np.load(d2t_path) + 1)
