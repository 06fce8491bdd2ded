"""Probe cells measured once, read back when the same cell is asked for again with the same setting.

Notebook 02 runs two of the matrix's cells before the matrix (the replay's ``flex_attention`` twist and its eager
reference); with a cache folder, the matrix reads them back instead of starting a worker to crash again. A cell's key
holds everything its result depends on: the cell (backend, mode, length, TTT steps, repeats), its time limit, the
verifier (its path, ``config.json`` and weight files' sizes and times), the device, seed, threads, draft vocab and the
TTT steps the worker builds with, the versions of python, torch, transformers and speculators, and a digest of
eagle3kit's own source. Change any of them and the cell runs again. A ``timeout`` is never kept (it depends on load),
nor the rows of a worker that failed before its first cell (its environment's failure, not the cell's).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from importlib.metadata import version
from pathlib import Path

from eagle3kit.atomic import write_text

KEPT = ("ok", "error", "crashed")  # statuses read back; a timeout is measured again
PACKAGE = Path(__file__).resolve().parent.parent


def source_digest() -> str:
    """sha256 over eagle3kit's python files (their paths and bytes): any edit to the code the worker runs reruns."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def verifier_fingerprint(path: str | None) -> dict:
    """The verifier directory's ``config.json`` digest and each weight file's size and mtime (a hub id as given)."""
    if path is None or not Path(path).is_dir():
        return {"id": path}
    d = Path(path)
    config = d / "config.json"
    files = sorted(p for p in d.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
    return {"path": str(d.resolve()),
            "config": hashlib.sha256(config.read_bytes()).hexdigest() if config.exists() else None,
            "weights": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def setting(verifier_path: str | None, worker_spec: dict) -> dict:
    """What every cell of one probe call shares: the worker's spec without its cells and paths, the verifier's
    fingerprint, the versions and the source digest."""
    import torch  # lazy: the versions only

    shared = {k: v for k, v in worker_spec.items() if k not in ("cells", "weights", "run", "verifier")}
    return {**shared, "verifier": verifier_fingerprint(verifier_path), "python": platform.python_version(),
            "torch": torch.__version__, "transformers": version("transformers"), "speculators": version("speculators"),
            "eagle3kit": source_digest()}


def key(cell_spec: dict, shared: dict) -> str:
    """The cache key of one cell under ``shared`` (:func:`setting`)."""
    return hashlib.sha256(json.dumps({"cell": cell_spec, **shared}, sort_keys=True).encode()).hexdigest()[:32]


class ProbeCache:
    """A folder of one JSON file per measured cell, named by its :func:`key`."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def get(self, cell_key: str) -> dict | None:
        path = self.directory / f"{cell_key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def put(self, cell_key: str, result: dict) -> None:
        if result.get("status") in KEPT and result.get("measured", True):  # not a worker that never started
            self.directory.mkdir(parents=True, exist_ok=True)
            write_text(self.directory / f"{cell_key}.json", json.dumps(result))
