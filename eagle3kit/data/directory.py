"""A data directory as one object: :class:`DataDir` reads ``eagle3kit_data.json`` once and owns its format, the
paths inside the folder, the verifier identity and the compatibility check.

Two kinds of directory open:

* one made by :func:`eagle3kit.data.dataset.build_dataset`: ``has_manifest`` is True and ``manifest`` is a
  :class:`Manifest` (verifier identity, aux layer ids, the request it was made with, counts, vocab mappings);
* one made by speculators' own pipeline (``speculators prepare-data`` + ``generate-offline-data``): the same Arrow
  dataset and ``hidden_states/hs_{i}.safetensors`` but no eagle3kit manifest. ``has_manifest`` is False,
  ``manifest`` None, and what the files tell is still read: ``hidden_size`` and ``n_states`` from the first
  hidden-state file's header, ``draft_vocab_sizes`` from the ``t2d-{N}.npy`` files; what only the manifest knows
  (``verifier_ref``, ``aux_layer_ids``, ``seq_length``, ``dtype``, ``n_samples``, ``complete``) is None.
  :meth:`DataDir.require_manifest` and :meth:`DataDir.check_compatible` refuse such a directory with one sentence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from safetensors import safe_open
from speculators.data_generation.offline import get_existing_hidden_state_indices

from eagle3kit.atomic import write_text
from eagle3kit.data import hidden_states as hs
from eagle3kit.errors import UserError
from eagle3kit.verifier import Verifier, resolve

MANIFEST = "eagle3kit_data.json"
HIDDEN_STATES = "hidden_states"  # speculators' folder of hs_{i}.safetensors (its ArrowDataset reads it by this name)
FORMAT_VERSION = 1


class DataError(UserError):
    """A data directory that cannot be used as asked, with the fix in the message."""


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

    n_conversations: int
    seq_length: int
    seed: int
    held_out: int
    source: str | None
    dtype: str


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


class DataDir:
    """A data directory, its manifest read once. ``DataDir.open(path)``; ``str()`` / ``os.fspath()`` give its path,
    so it goes wherever a path does. See the module doc for a directory without an eagle3kit manifest."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.manifest: Manifest | None = load_manifest(self.path)

    @classmethod
    def open(cls, data: DataDir | str | os.PathLike) -> DataDir:
        """``data`` itself when it is a :class:`DataDir`, else the directory at that path (manifest read now)."""
        return data if isinstance(data, DataDir) else cls(data)

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"DataDir({str(self.path)!r}, has_manifest={self.has_manifest})"

    # ------------------------------------------------------------------------------------------- paths
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def hidden_states_dir(self) -> Path:
        return self.path / HIDDEN_STATES

    def hidden_state_file(self, index: int) -> Path:
        """``hidden_states/hs_{index}.safetensors`` (speculators' name for dataset row ``index``)."""
        return hs.hs_path(self.hidden_states_dir, index)

    def hidden_state_files(self) -> list[Path]:
        """The ``hs_*.safetensors`` files present, by row index (speculators' own listing)."""
        return [self.hidden_state_file(i) for i in get_existing_hidden_state_indices(self.hidden_states_dir)]

    @property
    def has_arrow(self) -> bool:
        """True when the Arrow dataset (``save_to_disk``: state.json, dataset_info.json, data-*.arrow) is there."""
        p = self.path
        return (p / "state.json").exists() and (p / "dataset_info.json").exists() and any(p.glob("data-*.arrow"))

    # ------------------------------------------------------------------------------------------- manifest facts
    @property
    def has_manifest(self) -> bool:
        """False for a directory made without eagle3kit (e.g. by speculators' own pipeline) or not made yet."""
        return self.manifest is not None

    def require_manifest(self) -> Manifest:
        if self.manifest is None:
            raise DataError(f"{self.path} has no {MANIFEST}; make the data with `eagle3kit data --out DIR`.")
        return self.manifest

    @property
    def verifier(self) -> VerifierIdentity | None:
        return self.manifest.verifier if self.manifest else None

    @property
    def verifier_ref(self) -> str | None:
        """The verifier the directory was made with (its path, else its name); None without a manifest."""
        return self.manifest.verifier.ref if self.manifest else None

    @property
    def aux_layer_ids(self) -> list[int] | None:
        return list(self.manifest.aux_layer_ids) if self.manifest else None

    @property
    def request(self) -> Request | None:
        return self.manifest.request if self.manifest else None

    @property
    def seq_length(self) -> int | None:
        return self.manifest.request.seq_length if self.manifest else None

    @property
    def dtype(self) -> str | None:
        """The dtype the verifier ran and stored the hidden states in (per the manifest)."""
        return self.manifest.request.dtype if self.manifest else None

    @property
    def n_samples(self) -> int | None:
        """Training rows (the manifest's count; None without a manifest)."""
        return self.manifest.counts.get("n_samples") if self.manifest else None

    @property
    def complete(self) -> bool | None:
        """True once every hidden-state file was written (None without a manifest: unknown)."""
        return self.manifest.complete if self.manifest else None

    @property
    def draft_vocab_sizes(self) -> list[int]:
        """Draft vocab sizes with a mapping: the manifest's, else the ``t2d-{N}.npy`` files present."""
        if self.manifest:
            return sorted(self.manifest.vocab)
        found = (re.fullmatch(r"t2d-(\d+)\.npy", p.name) for p in self.path.glob("t2d-*.npy"))
        return sorted(int(m[1]) for m in found if m)

    @property
    def draft_vocab_size(self) -> int | None:
        """The draft vocab size the directory has a mapping for, when it has exactly one (else None)."""
        sizes = self.draft_vocab_sizes
        return sizes[0] if len(sizes) == 1 else None

    # ------------------------------------------------------------------------------------------- file facts
    def _first_file_shape(self) -> tuple[int, ...] | None:
        for p in self.hidden_state_files():
            try:
                with safe_open(str(p), "pt") as f:
                    return tuple(f.get_slice("hidden_states").get_shape())
            except Exception:  # a cut-off or foreign file: try the next one  # noqa: BLE001
                continue
        return None

    @property
    def hidden_size(self) -> int | None:
        """The verifier's hidden size: the manifest's, else the first readable hidden-state file's last dim."""
        if self.manifest:
            return self.manifest.verifier.hidden_size
        shape = self._first_file_shape()
        return shape[-1] if shape else None

    @property
    def n_states(self) -> int | None:
        """States stored per token (aux layers + the last): from the manifest, else the first readable file."""
        if self.manifest:
            return len(self.manifest.aux_layer_ids) + 1
        shape = self._first_file_shape()
        return shape[1] if shape and len(shape) == 3 else None

    # ------------------------------------------------------------------------------------------- checks
    def check_compatible(self, verifier: Verifier | str | None = None,
                         aux_layer_ids: list[int] | None = None) -> DataDir:
        """Refuse a directory made with another verifier (fingerprinted once here) or other aux layers; self."""
        m = self.require_manifest()
        if verifier is not None:
            mine, theirs = verifier_identity(resolve(verifier)), m.verifier
            if mine.fingerprint != theirs.fingerprint:
                raise DataError(
                    f"{self.path} was made with verifier {theirs.name!r} ({theirs.path}), not {mine.name!r} "
                    f"({mine.path}); its hidden states do not fit this verifier. Use verifier={theirs.name!r} "
                    "or build a new data directory."
                )
        if aux_layer_ids is not None and list(aux_layer_ids) != m.aux_layer_ids:
            raise DataError(
                f"{self.path} holds hidden states of aux layers {m.aux_layer_ids}, but {list(aux_layer_ids)} were "
                f"asked for; build the draft with aux_layer_ids={m.aux_layer_ids} or build a new data directory."
            )
        return self

    def files_table(self) -> pd.DataFrame:
        """What the directory holds: one row per top-level entry (a folder's name ends in ``/``), with its size in
        MB and how many files it is."""
        rows = []
        for p in sorted(self.path.iterdir()):
            files = [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else [p]
            rows.append({"name": p.name + "/" * p.is_dir(),
                         "MB": round(sum(f.stat().st_size for f in files) / 1e6, 2), "files": len(files)})
        return pd.DataFrame(rows, columns=["name", "MB", "files"])
