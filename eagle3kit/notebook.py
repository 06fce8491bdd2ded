"""What the notebooks share: the first cell's :func:`setup`, and the workdir places they hand each other.

Notebook 01 saves the draft config to ``workdir/draft_config`` (05 takes its shape); 04 writes the training data to
``workdir/data`` (05 and 06 train on it); 05 checkpoints to ``workdir/checkpoint_05`` (06 resumes it). Run without
04, 05 and 06 share one small set in ``workdir/data_small``, built once by :func:`training_data` with
:data:`SMALL_DATA` (the one home of its size).
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import torch

from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.directory import DataDir
from eagle3kit.runner import read_summary

MAX_COLWIDTH = 120  # characters of a table cell before pandas cuts it (the repository's line length)
DRAFT_CONFIG = "draft_config"  # notebook 01's draft config.json folder in the workdir
DATA = "data"  # notebook 04's data directory
CHECKPOINT_05 = "checkpoint_05"  # notebook 05's checkpoint, which 06 resumes
SMALL_DATA_DIR = "data_small"  # the small set 05 and 06 build when 04's data is missing
SMALL_DATA = {"n_conversations": 8, "seq_length": 256, "draft_vocab_size": 2048, "held_out": 4}
DATA_SUMMARY_KEYS = ("regenerate_seconds", "hidden_states_seconds")  # notebook 04's summary: its data minutes


def setup(workdir: str | os.PathLike, seed: int | None = None, threads: int | None = None) -> Path:
    """The first code cell of every notebook: seed torch, set the thread count (``None``: torch's own, which follows
    ``OMP_NUM_THREADS``), widen pandas' table cells, make ``workdir``; return it as a Path.

    Library log lines are silenced where they happen (:func:`eagle3kit.logs.quiet`, inside eagle3kit's loaders), and
    figures display as images once ``eagle3kit`` is imported (:func:`eagle3kit.figures.show_figures_as_png`)."""
    if seed is not None:
        torch.manual_seed(seed)
    if threads is not None:
        torch.set_num_threads(threads)
    pd.set_option("display.max_colwidth", MAX_COLWIDTH)
    path = Path(workdir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def training_data(workdir: str | os.PathLike, verifier: str, seed: int = 0, rebuild: bool = False) -> DataDir:
    """Notebook 04's data when it is complete (and not ``rebuild``); else the small set of :data:`SMALL_DATA` in
    ``workdir/data_small``, built here (resumable: files already written are kept; ``rebuild``: made again)."""
    theirs = DataDir(Path(workdir) / DATA)
    if not rebuild and theirs.complete:
        return theirs
    small = Path(workdir) / SMALL_DATA_DIR
    build_dataset(verifier, small, seed=seed, overwrite=rebuild, **SMALL_DATA)
    return DataDir(small)


def minutes_to_make(workdir: str | os.PathLike, history: list[dict]) -> tuple[float, float]:
    """Minutes this run spent making its draft: (data, training). Data: notebook 04's regeneration and hidden states,
    from its summary (0 without one); training: every step in ``history`` (a session's, 05's steps included)."""
    made = read_summary(workdir, "04") or {}
    return sum(made.get(key, 0) for key in DATA_SUMMARY_KEYS) / 60, sum(r["seconds"] for r in history) / 60


def continue_or_start(workdir: str | os.PathLike, resume: bool, verifier: str, seed: int = 0, **settings):
    """Notebook 06's session: notebook 05's checkpoint continued when ``resume`` and it is there (same data, draft
    and optimizer state), else a new session on :func:`training_data` with ``settings``; and a line saying which."""
    from eagle3kit.train.checkpoint import SESSION_FILE
    from eagle3kit.train.session import TrainSession

    checkpoint = Path(workdir) / CHECKPOINT_05
    if resume and (checkpoint / SESSION_FILE).exists():
        session = TrainSession.resume(checkpoint)
        return session, f"resumed notebook 05's session at step {session.global_step}"
    data = training_data(workdir, verifier, seed=seed)
    session = TrainSession(data, seed=seed, **settings)
    return session, f"new session on {data.path}"

