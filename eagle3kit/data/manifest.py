"""``eagle3kit_data.json``, the manifest ``eagle3kit data`` writes into a data directory: the verifier's identity, the
aux layer ids, the request the directory was made with, counts, vocab coverage. Read through
:class:`eagle3kit.data.directory.DataDir`, which also opens directories without one (speculators' own pipeline).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eagle3kit.atomic import write_text
from eagle3kit.verifier import Verifier

MANIFEST = "eagle3kit_data.json"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class VerifierIdentity:
    """The verifier a directory was made with: name, path, shape and a fingerprint of its config and weight files."""

    name: str
    path: str | None
    num_hidden_layers: int
    hidden_size: int
    vocab_size: int
    fingerprint: str

    @property
    def ref(self) -> str:
        """What :func:`eagle3kit.verifier.resolve` takes to find it again: its path, else its name."""
        return self.path or self.name


def verifier_identity(v: Verifier) -> VerifierIdentity:
    """The identity of ``v`` (cheap: the config, the weight files' names, sizes and first 64 KiB)."""
    text = v.text_config
    shape = {k: v for k, v in text.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    h = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode())
    if v.path and Path(v.path).is_dir():
        for f in sorted(Path(v.path).glob("*.safetensors")):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
            with f.open("rb") as fh:
                h.update(fh.read(1 << 16))
    return VerifierIdentity(v.name, v.path, text.num_hidden_layers, text.hidden_size, text.vocab_size,
                            h.hexdigest()[:16])


@dataclass(frozen=True)
class Request:
    """The settings a directory was made with (``build_dataset``'s arguments that shape its content)."""

    n_conversations: int | None  # None: all the source's
    seq_length: int
    seed: int
    held_out: int
    source: str | None
    dtype: str

    def changes(self, other: Request) -> str:
        """What differs in ``other``, as ``"field: mine -> theirs, ..."`` (empty when nothing does)."""
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        return ", ".join(f"{k}: {mine[k]!r} -> {v!r}" for k, v in theirs.items() if mine[k] != v)


@dataclass
class Manifest:
    """``eagle3kit_data.json``: written by ``build_dataset`` (after tokenizing, and when complete)."""

    verifier: VerifierIdentity
    aux_layer_ids: list[int]
    request: Request
    counts: dict[str, int]  # n_samples, n_held_out, tokens, assistant_tokens, skipped_unusable, dropped_empty, ...
    tokenized: bool = True
    complete: bool = False
    extraction: dict[str, Any] | None = None  # tokens_per_s, device, batch_size, seconds of the last extraction
    vocab: dict[int, float] = field(default_factory=dict)  # draft vocab size -> assistant-token coverage
    format: int = FORMAT_VERSION

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        return cls(verifier=VerifierIdentity(**d["verifier"]), aux_layer_ids=list(d["aux_layer_ids"]),
                   request=Request(**d["request"]), counts=dict(d.get("counts") or {}),
                   tokenized=bool(d.get("tokenized")), complete=bool(d.get("complete")), extraction=d.get("extraction"),
                   vocab={int(n): v["coverage"] for n, v in (d.get("vocab") or {}).items()},
                   format=d.get("format", FORMAT_VERSION))

    def to_dict(self) -> dict[str, Any]:
        d = {"format": self.format, "verifier": dataclasses.asdict(self.verifier), "aux_layer_ids": self.aux_layer_ids,
             "request": dataclasses.asdict(self.request), "tokenized": self.tokenized, "complete": self.complete,
             "counts": self.counts}
        if self.extraction is not None:
            d["extraction"] = self.extraction
        if self.vocab:
            d["vocab"] = {str(n): {"coverage": c} for n, c in self.vocab.items()}
        return d

    def write(self, data_dir: str | os.PathLike) -> None:
        """Write it into ``data_dir`` (atomically)."""
        write_text(Path(data_dir) / MANIFEST, json.dumps(self.to_dict(), indent=2))


def load_manifest(data_dir: str | os.PathLike) -> Manifest | None:
    """The manifest of ``data_dir``, or None when it has none (the one place it is read from disk)."""
    path = Path(data_dir) / MANIFEST
    return Manifest.from_dict(json.loads(path.read_text())) if path.exists() else None
