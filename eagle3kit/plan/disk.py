"""Disk for the stored hidden states, in the layout ``eagle3kit data`` writes and ``speculators train`` reads.

Per sample: ``hidden_states/hs_{i}.safetensors`` holds ``hidden_states [seq, n_aux + 1, hidden]`` and
``token_ids [seq]`` int64 (a JSON header in front); the Arrow dataset holds ``input_ids`` (int32) and ``loss_mask``
(int64) per token and ``seq_len`` per row (plus about a kilobyte of schema); the vocab mapping is ``d2t-N.npy``
(int64 x N) and ``t2d-N.npy`` (bool x vocab).
The few-kilobyte metadata files (manifests, ``token_freq.pt``, ``held_out.jsonl``) are not predicted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from eagle3kit.data.directory import DataDir
from eagle3kit.data.hidden_states import (INT64, hidden_state_bytes_per_token, safetensors_header_bytes,  # noqa: F401
                                         sample_file_bytes)

ARROW_ROW = INT64 + 2 * 4  # seq_len (int64) and one int32 list offset per list column
ARROW_TOKEN = 4 + INT64  # input_ids (int32: datasets' optimized type for that column name) and loss_mask (int64)
NPY_HEADER = 128


@dataclass(frozen=True)
class TokenStats:
    """How many samples and tokens the data has (or will have)."""

    n_samples: int
    tokens: int

    @property
    def mean_tokens(self) -> float:
        return self.tokens / self.n_samples


def data_token_stats(data_dir: str | os.PathLike) -> TokenStats:
    """The token statistics of a data directory made by ``eagle3kit data`` (from its manifest's counts)."""
    counts = DataDir.open(data_dir).require_manifest().counts
    return TokenStats(counts["n_samples"], counts["tokens"])


@dataclass(frozen=True)
class DiskPlan:
    """Predicted bytes of a data directory, by part."""

    per_token: float  # hidden states + token ids + Arrow columns
    per_sample: float
    hidden_states: float  # the hidden_states/ folder
    arrow: float
    vocab_mapping: float

    @property
    def total(self) -> float:
        return self.hidden_states + self.arrow + self.vocab_mapping


def disk_plan(stats: TokenStats, hidden: int, n_states: int, width: int, vocab: int,
              draft_vocab_size: int | None = None) -> DiskPlan:
    """Bytes ``eagle3kit data`` writes for ``stats`` (headers sized for the mean sample)."""
    mean = stats.mean_tokens
    per_token = hidden_state_bytes_per_token(hidden, n_states, width) + INT64 + ARROW_TOKEN
    header = safetensors_header_bytes(round(mean), hidden, n_states, width)
    files = stats.tokens * (hidden_state_bytes_per_token(hidden, n_states, width) + INT64) + stats.n_samples * header
    arrow = stats.tokens * ARROW_TOKEN + stats.n_samples * ARROW_ROW
    mapping = 2 * NPY_HEADER + INT64 * draft_vocab_size + vocab if draft_vocab_size else 0
    return DiskPlan(per_token=per_token, per_sample=per_token * mean + header + ARROW_ROW, hidden_states=files,
                    arrow=arrow, vocab_mapping=mapping)
