"""The eagle3kit manifest of a data directory: verifier identity, aux layer ids, settings, counts; what it holds.

A directory made with another verifier or other aux layers is refused with a clear message.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pandas as pd

from eagle3kit.errors import UserError
from eagle3kit.verifier import Verifier, resolve

MANIFEST = "eagle3kit_data.json"


class DataError(UserError):
    """A data directory that cannot be used as asked, with the fix in the message."""


def verifier_identity(v: Verifier) -> dict:
    """Name, path, shape and a fingerprint of the config and weight files (cheap: headers and sizes)."""
    text = v.text_config
    shape = {k: v for k, v in text.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    h = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode())
    if v.path and Path(v.path).is_dir():
        for f in sorted(Path(v.path).glob("*.safetensors")):
            h.update(f"{f.name}:{f.stat().st_size}".encode())
            with f.open("rb") as fh:
                h.update(fh.read(1 << 16))
    return {"name": v.name, "path": v.path, "num_hidden_layers": text.num_hidden_layers,
            "hidden_size": text.hidden_size, "vocab_size": text.vocab_size, "fingerprint": h.hexdigest()[:16]}


def read_manifest(data_dir: str | os.PathLike) -> dict | None:
    path = Path(data_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def require_manifest(data_dir: str | os.PathLike) -> dict:
    m = read_manifest(data_dir)
    if m is None:
        raise DataError(f"{data_dir} has no {MANIFEST}; make the data with `eagle3kit data --out DIR`.")
    return m


def check_compatible(data_dir: str | os.PathLike, verifier: Verifier | str | None = None,
                     aux_layer_ids: list[int] | None = None) -> dict:
    """The manifest, after refusing a directory made with another verifier or other aux layers."""
    m = require_manifest(data_dir)
    if verifier is not None:
        mine, theirs = verifier_identity(resolve(verifier)), m["verifier"]
        if mine["fingerprint"] != theirs["fingerprint"]:
            raise DataError(
                f"{data_dir} was made with verifier {theirs['name']!r} ({theirs['path']}), not {mine['name']!r} "
                f"({mine['path']}); its hidden states do not fit this verifier. Use verifier={theirs['name']!r} "
                "or build a new data directory."
            )
    if aux_layer_ids is not None and list(aux_layer_ids) != m["aux_layer_ids"]:
        raise DataError(
            f"{data_dir} holds hidden states of aux layers {m['aux_layer_ids']}, but {list(aux_layer_ids)} were "
            f"asked for; build the draft with aux_layer_ids={m['aux_layer_ids']} or build a new data directory."
        )
    return m


def data_verifier(data_dir: str | os.PathLike) -> str:
    """The verifier a data directory was made with (its path, else its name)."""
    v = check_compatible(data_dir)["verifier"]
    return v.get("path") or v["name"]


def data_draft_vocab_size(data_dir: str | os.PathLike) -> int | None:
    """The draft vocab size the data directory has a mapping for, when it has exactly one (else None)."""
    sizes = list(check_compatible(data_dir).get("vocab") or {})
    return int(sizes[0]) if len(sizes) == 1 else None


def files_table(data_dir: str | os.PathLike) -> pd.DataFrame:
    """What a data directory holds: one row per top-level entry (a folder's name ends in ``/``), with its size in
    MB and how many files it is."""
    rows = []
    for p in sorted(Path(data_dir).iterdir()):
        files = [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else [p]
        rows.append({"name": p.name + "/" * p.is_dir(), "MB": round(sum(f.stat().st_size for f in files) / 1e6, 2),
                     "files": len(files)})
    return pd.DataFrame(rows, columns=["name", "MB", "files"])
