"""Disk for the stored hidden states, in the layout ``eagle3kit data`` writes and ``speculators train`` reads.

Per sample: ``hidden_states/hs_{i}.safetensors`` holds ``hidden_states [seq, n_aux + 1, hidden]`` and
``token_ids [seq]`` int64 (a JSON header in front); the Arrow dataset holds ``input_ids`` (int32) and ``loss_mask``
(int64) per token and ``seq_len`` per row (plus about a kilobyte of schema); the vocab mapping is ``d2t-N.npy``
(int64 x N) and ``t2d-N.npy`` (bool x vocab).
The few-kilobyte metadata files (manifests, ``token_freq.pt``, ``held_out.jsonl``) are not predicted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from eagle3kit.data.directory import DataDir

INT64 = 8
ARROW_ROW = INT64 + 2 * 4  # seq_len (int64) and one int32 list offset per list column
ARROW_TOKEN = 4 + INT64  # input_ids (int32: datasets' optimized type for that column name) and loss_mask (int64)
NPY_HEADER = 128
SAFETENSORS_DTYPE = {1: "U8", 2: "BF16", 4: "F32", 8: "F64"}


@dataclass(frozen=True)
class TokenStats:
    """How many samples and tokens the data has (or will have)."""

    n_samples: int
    tokens: int

    @property
    def mean_tokens(self) -> float:
        return self.tokens / self.n_samples


def data_token_stats(data_dir: str | os.PathLike | DataDir) -> TokenStats:
    """The token statistics of a data directory made by ``eagle3kit data`` (from its manifest's counts)."""
    counts = DataDir.open(data_dir).require_manifest().counts
    return TokenStats(counts["n_samples"], counts["tokens"])


def hidden_state_bytes_per_token(hidden: int, n_states: int, width: int) -> int:
    """Payload bytes per token of the stored states: ``n_states`` (aux layers + last) x ``hidden`` x ``width``."""
    return n_states * hidden * width


def safetensors_header_bytes(tokens: int, hidden: int, n_states: int, width: int) -> int:
    """The header of one sample's file: an 8-byte length, then safetensors' JSON padded to 8 bytes."""
    ids = tokens * INT64
    header = {"token_ids": {"dtype": "I64", "shape": [tokens], "data_offsets": [0, ids]},
              "hidden_states": {"dtype": SAFETENSORS_DTYPE.get(width, "F16"), "shape": [tokens, n_states, hidden],
                                "data_offsets": [ids, ids + tokens * n_states * hidden * width]}}
    text = len(json.dumps(header, separators=(",", ":")))
    return 8 + -(-text // 8) * 8


def sample_file_bytes(tokens: int, hidden: int, n_states: int, width: int) -> int:
    """One ``hs_{i}.safetensors`` file of ``tokens`` tokens."""
    payload = tokens * (hidden_state_bytes_per_token(hidden, n_states, width) + INT64)
    return payload + safetensors_header_bytes(tokens, hidden, n_states, width)


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
