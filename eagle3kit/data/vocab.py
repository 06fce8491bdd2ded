"""Draft vocabulary mapping (d2t/t2d) from assistant-token frequencies, through speculators' own functions.

Files live where ``speculators train --data-path DIR --draft-vocab-size N`` looks for them: ``DIR/token_freq.pt``,
``DIR/d2t-{N}.npy`` (offsets: target id = i + d2t[i]) and ``DIR/t2d-{N}.npy`` (boolean mask over the verifier vocab);
their paths are :class:`~eagle3kit.data.directory.DataDir`'s (``token_freq_path``, ``mapping_paths``).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from speculators.models.eagle3 import Eagle3DraftModel
from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution, save_token_frequency_distribution

from eagle3kit.atomic import atomic_file
from eagle3kit.logs import quiet
from eagle3kit.data.directory import as_data_dir
from eagle3kit.draft.config import DraftBuild
from eagle3kit.draft.model import build_model



def save_token_freq(dataset, data_dir: str | os.PathLike) -> Path:
    """Count assistant tokens (loss_mask == 1) with speculators' counter (its bar off); written atomically."""
    target = as_data_dir(data_dir).token_freq_path
    with atomic_file(target) as tmp, quiet():
        tmp.unlink()  # speculators reuses an existing file without recounting
        save_token_frequency_distribution(dataset, tmp)
    return target


def load_token_freq(data_dir: str | os.PathLike) -> dict[int, int]:
    path = as_data_dir(data_dir).token_freq_path
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; make the data with `eagle3kit data --out DIR` first.")
    return torch.load(path, weights_only=True)


def _save_npy(path: Path, array: np.ndarray) -> None:
    with atomic_file(path) as tmp, tmp.open("wb") as f:
        np.save(f, array)


def build_mapping(data_dir: str | os.PathLike, draft_vocab_size: int, target_vocab_size: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Make (t2d, d2t) from ``token_freq.pt`` with speculators' function and save both .npy files."""
    if not 0 < draft_vocab_size <= target_vocab_size:
        raise ValueError(
            f"draft_vocab_size={draft_vocab_size} must be in 1..{target_vocab_size} (the verifier's vocab)."
        )
    d2t, t2d = build_vocab_mappings_from_distribution(load_token_freq(data_dir), draft_vocab_size, target_vocab_size)
    d2t_path, t2d_path = as_data_dir(data_dir).mapping_paths(draft_vocab_size)
    _save_npy(d2t_path, d2t.cpu().numpy())
    _save_npy(t2d_path, t2d.cpu().numpy())
    return t2d, d2t


def load_mapping(data_dir: str | os.PathLike, draft_vocab_size: int | None, target_vocab_size: int
                 ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(t2d, d2t) as speculators' CLI loads them; (None, None) for the full vocab; made from token_freq.pt if absent."""
    if draft_vocab_size is None or draft_vocab_size == target_vocab_size:
        return None, None
    d2t_path, t2d_path = as_data_dir(data_dir).mapping_paths(draft_vocab_size)
    if not (d2t_path.exists() and t2d_path.exists()):
        return build_mapping(data_dir, draft_vocab_size, target_vocab_size)
    d2t = torch.from_numpy(np.load(d2t_path))
    t2d = torch.from_numpy(np.load(t2d_path))
    if d2t.shape[0] != draft_vocab_size or t2d.shape[0] != target_vocab_size or int(t2d.sum()) != draft_vocab_size:
        raise ValueError(
            f"{d2t_path.name}/{t2d_path.name} do not describe a {draft_vocab_size}-token draft vocab over "
            f"{target_vocab_size} verifier tokens; delete them and they are made again from token_freq.pt."
        )
    return t2d, d2t


def coverage(token_freq: dict[int, int], t2d: torch.Tensor | None) -> float:
    """Share of assistant tokens whose id is inside the draft vocab (1.0 for the full vocab)."""
    total = sum(token_freq.values())
    if t2d is None or total == 0:
        return 1.0
    return sum(c for t, c in token_freq.items() if bool(t2d[t])) / total


def coverage_curve(token_freq: dict[int, int], sizes: list[int] | None = None) -> list[tuple[int, float]]:
    """(draft vocab size, coverage) when the draft keeps the most frequent tokens (speculators' rule)."""
    counts = np.sort(np.fromiter(token_freq.values(), dtype=np.int64))[::-1]
    total = counts.sum()
    cum = np.cumsum(counts) / max(total, 1)
    sizes = sizes or sorted({int(x) for x in np.geomspace(16, max(len(counts), 16), 24)})
    return [(k, float(cum[min(k, len(cum)) - 1]) if len(cum) else 1.0) for k in sizes]


def build_for_data(build: DraftBuild, data_dir: str | os.PathLike,
                   warm_start_layer: int | None = None) -> Eagle3DraftModel:
    """:func:`build_model` with the vocab mapping (d2t/t2d) of a data directory made by ``eagle3kit data``."""
    t2d, d2t = load_mapping(data_dir, build.config.draft_vocab_size, build.verifier.text_config.vocab_size)
    return build_model(build, t2d, d2t, warm_start_layer)
