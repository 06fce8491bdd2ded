"""Is a data directory usable? Every hidden-state file is checked and each bad one is named with why and with the
command that remakes it (``eagle3kit data`` with the directory's own settings resumes: it keeps the good files and
makes the bad ones again, see :func:`eagle3kit.data.dataset.build_dataset`).

A file is bad when it is missing, its safetensors header is unreadable (a cut-off write), its token ids differ from
its dataset row, its shape is not ``[seq, n_aux + 1, hidden]``, or it holds a NaN or an infinity. The check reads
every file once (measured on 2 cores at load average ~12: 0.18 s for the tests' 12-file tiny directory, 0.53 s for
24 SmolLM2 files of 256 tokens, 53 MB), so training runs it before its first step and ``eagle3kit doctor --data DIR``
runs it too.
"""

from __future__ import annotations

import shlex

from eagle3kit.data import hidden_states as hs
from eagle3kit.data.dataset import input_id_rows
from eagle3kit.data.directory import DataDir, DataError
from eagle3kit.draft.config import resolve_aux_layer_ids

SHOWN = 5  # bad files named one by one in an error message (all of them are in bad_files)


def remake_command(data: DataDir) -> str:
    """The command that (re)makes ``data_dir`` with the settings it was made with (resuming: only what is missing or
    bad is made again): ``eagle3kit data --out DIR ...``, or the ``build_dataset`` call when the directory uses aux
    layers other than the verifier's default. A directory without a manifest (speculators' prepared dataset) gets
    the ``eagle3kit data`` call that fills its hidden states (:mod:`eagle3kit.data.fill`)."""
    m = data.manifest
    if m is None:  # speculators' prepared dataset: eagle3kit data fills its hidden states (resuming)
        aux = data.aux_layer_ids
        return shlex.join(["eagle3kit", "data", "--out", str(data.path), "--verifier", data.verifier_ref or "V",
                           *(["--aux-layer-ids", *map(str, aux)] if aux else [])])
    r, verifier = m.request, m.verifier.ref
    if m.aux_layer_ids != resolve_aux_layer_ids(verifier):
        settings = {k: getattr(r, k) for k in ("n_conversations", "seq_length", "held_out", "seed", "source", "dtype")}
        kwargs = ", ".join(f"{k}={v!r}" for k, v in {**settings, "aux_layer_ids": m.aux_layer_ids}.items())
        return f"build_dataset({verifier!r}, {str(data.path)!r}, {kwargs})  # from eagle3kit.data.dataset"
    args = ["eagle3kit", "data", "--out", str(data.path), "--verifier", verifier,
            "--n-conversations", "all" if r.n_conversations is None else str(r.n_conversations),
            "--seq-length", str(r.seq_length),
            "--held-out", str(r.held_out), "--seed", str(r.seed), "--dtype", r.dtype]
    if r.source:
        args += ["--source", r.source]
    return shlex.join(args)


def bad_files(data: DataDir) -> dict[str, str]:
    """``{file path: why}`` for every hidden-state file of ``data_dir`` that is missing or unusable (empty: all
    good). Reads every file: header, token ids against the dataset rows, shape, finite values. Without an eagle3kit
    manifest the shape expected is the first readable file's (:attr:`DataDir.n_states`, :attr:`DataDir.hidden_size`)."""
    samples = input_id_rows(data.path)
    state = hs.scan(data.hidden_states_dir, samples, data.n_states, data.hidden_size)
    found = {i: "missing" for i in state["missing"]} | state["bad"]
    return {str(data.hidden_state_file(i)): why for i, why in sorted(found.items())}


def require_healthy(data: DataDir) -> None:
    """Raise :class:`DataError` naming each bad hidden-state file and why, with the command that remakes them (when
    the directory has an eagle3kit manifest to remake it from)."""
    found = bad_files(data)
    if found:
        listed = "; ".join(f"{path}: {why}" for path, why in list(found.items())[:SHOWN])
        more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        fix = f"remake them with: {remake_command(data)}"
        raise DataError(f"{data.path} has {len(found)} unusable hidden-state file(s) ({listed}{more}); {fix}")
