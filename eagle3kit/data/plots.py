"""Figures and views of a data directory: hidden-state norms, vocab coverage, a packed batch and its mask.

Each plot function returns a ``matplotlib.figure.Figure`` built without pyplot (safe from a widget's worker thread)
and never calls ``plt.show``. The loss mask over a sample's tokens: :mod:`eagle3kit.data.loss_mask_plot`.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from safetensors.torch import load_file

from eagle3kit.data.directory import DataDir
from eagle3kit.masks.eagle_mask import MaskInputError
from eagle3kit.masks.plots import plot_layout_thumbnail


def _state_names(data: DataDir) -> list[str]:
    aux = data.aux_layer_ids or [f"#{k}" for k in range((data.n_states or 1) - 1)]  # no manifest: by position
    return [f"aux layer {i}" for i in aux] + ["last (pre-norm)"]


def hidden_state_norms(data_dir: str | os.PathLike, n_samples: int = 4) -> pd.DataFrame:
    """Per stored state (aux layers, then the pre-norm last state): L2 norm per token, summarised over samples."""
    data = DataDir.open(data_dir)
    names = _state_names(data)
    paths = data.hidden_state_files()
    norms = torch.cat([load_file(str(p))["hidden_states"].float().norm(dim=-1) for p in paths[:n_samples]])
    rows = [{"state": name, "mean": float(norms[:, k].mean()), "median": float(norms[:, k].median()),
             "p99": float(norms[:, k].quantile(0.99)), "max": float(norms[:, k].max()),
             "first token": float(norms[0, k])} for k, name in enumerate(names)]
    return pd.DataFrame(rows).round(2)


def plot_hidden_state_norms(data_dir: str | os.PathLike, sample: int = 0) -> Figure:
    """L2 norm of each stored state along the positions of one sample (log scale)."""
    data = DataDir.open(data_dir)
    names = _state_names(data)
    h = load_file(str(data.hidden_state_file(sample)))["hidden_states"].float()
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    for k, name in enumerate(names):
        ax.plot(h[:, k].norm(dim=-1).numpy(), label=name, lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("‖h‖₂")
    ax.set_title(f"hidden-state norms, sample {sample}")
    ax.legend(fontsize=8, ncol=len(names))
    fig.tight_layout()
    return fig


def plot_coverage(curve: list[tuple[int, float]], draft_vocab_size: int | None = None) -> Figure:
    """Share of assistant tokens covered by a draft vocab of each size (most frequent tokens kept)."""
    fig = Figure(figsize=(6, 3.2))
    ax = fig.subplots()
    ax.plot([k for k, _ in curve], [c for _, c in curve], marker=".")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("draft vocab size")
    ax.set_ylabel("assistant-token coverage")
    if draft_vocab_size:
        ax.axvline(draft_vocab_size, color="tab:red", ls="--", lw=1, label=f"chosen: {draft_vocab_size}")
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_documents(document_ids, loss_mask=None, title: str = "packed batch") -> Figure:
    """A strip of the batch: one colour per packed document (padding white), the loss mask underneath."""
    doc = np.asarray(document_ids).reshape(-1)
    rows = [np.where(doc < 0, np.nan, doc)]
    labels = ["document"]
    if loss_mask is not None:
        rows.append(np.where(doc < 0, np.nan, np.asarray(loss_mask).reshape(-1).astype(float) * max(doc.max(), 1)))
        labels.append("loss mask")
    fig = Figure(figsize=(7, 0.6 + 0.45 * len(rows)), layout="constrained")
    ax = fig.subplots()
    ax.imshow(np.vstack(rows), aspect="auto", interpolation="nearest", cmap="tab20")
    ax.set_yticks(range(len(rows)), labels)
    n_docs = int(doc.max()) + 1 if (doc >= 0).any() else 0
    ax.set_title(f"{title}: {n_docs} document(s), {int((doc >= 0).sum())} of {doc.size} tokens used", fontsize=9)
    ax.set_xlabel("token position")
    return fig


def plot_batch(document_ids, ttt_steps: int | None = None, loss_mask=None) -> Figure:
    """A packed batch's layout. With ``ttt_steps``: the documents and the EAGLE-3 mask at the last TTT step
    (:func:`eagle3kit.masks.plots.plot_layout_thumbnail`) when the length suits speculators' flex mask (a multiple
    of 128); otherwise, or without ``ttt_steps``, :func:`plot_documents` (documents and loss mask)."""
    if ttt_steps is not None:
        try:
            return plot_layout_thumbnail(torch.as_tensor(document_ids).reshape(-1), ttt_steps)
        except MaskInputError:
            pass
    return plot_documents(document_ids, loss_mask)
