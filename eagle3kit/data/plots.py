"""Figures and views of a data directory: loss mask, hidden-state norms, vocab coverage, a packed batch.

Each plot function returns a ``matplotlib.figure.Figure`` and never calls ``plt.show``.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd
import torch
from matplotlib.figure import Figure
from safetensors.torch import load_file

from eagle3kit.data.manifest import read_manifest


def mask_html(tokenizer, input_ids: list[int], loss_mask: list[int], max_tokens: int = 400) -> str:
    """The sample as HTML: supervised (assistant) tokens highlighted, context tokens grey."""
    parts = []
    for tok, m in zip(input_ids[:max_tokens], loss_mask[:max_tokens], strict=True):
        text = html.escape(tokenizer.decode([tok])).replace("\n", "↵<br>")
        style = "background:#c8f7c5;color:#000" if m else "color:#888"
        parts.append(f'<span style="{style}">{text}</span>')
    more = f"<br><i>... {len(input_ids) - max_tokens} more tokens</i>" if len(input_ids) > max_tokens else ""
    return '<div style="font-family:monospace;font-size:12px;line-height:1.6">' + "".join(parts) + more + "</div>"


def hidden_state_norms(data_dir: str | os.PathLike, n_samples: int = 4) -> pd.DataFrame:
    """Per stored state (aux layers, then the pre-norm last state): L2 norm per token, summarised over samples."""
    m = read_manifest(data_dir)
    names = [f"aux layer {i}" for i in m["aux_layer_ids"]] + ["last (pre-norm)"]
    paths = sorted((Path(data_dir) / "hidden_states").glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
    norms = torch.cat([load_file(str(p))["hidden_states"].float().norm(dim=-1) for p in paths[:n_samples]])
    rows = [{"state": name, "mean": float(norms[:, k].mean()), "median": float(norms[:, k].median()),
             "p99": float(norms[:, k].quantile(0.99)), "max": float(norms[:, k].max()),
             "first token": float(norms[0, k])} for k, name in enumerate(names)]
    return pd.DataFrame(rows).round(2)


def plot_hidden_state_norms(data_dir: str | os.PathLike, sample: int = 0) -> Figure:
    """L2 norm of each stored state along the positions of one sample (log scale)."""
    m = read_manifest(data_dir)
    names = [f"aux layer {i}" for i in m["aux_layer_ids"]] + ["last (pre-norm)"]
    h = load_file(str(Path(data_dir) / "hidden_states" / f"hs_{sample}.safetensors"))["hidden_states"].float()
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


def plot_batch(batch: dict) -> Figure:
    """A collated packed batch: document id and loss mask per position (-1 = padding)."""
    docs = batch["document_ids"][0].numpy()
    mask = batch["loss_mask"][0].float().numpy()
    fig = Figure(figsize=(10, 2.2))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    ax1.imshow(docs[None], aspect="auto", cmap="tab20", interpolation="nearest")
    ax1.set_yticks([])
    ax1.set_ylabel("doc id", rotation=0, ha="right")
    ax2.imshow(mask[None], aspect="auto", cmap="Greens", vmin=0, vmax=1, interpolation="nearest")
    ax2.set_yticks([])
    ax2.set_ylabel("loss mask", rotation=0, ha="right")
    ax2.set_xlabel("position in the packed sequence")
    n_docs = int(docs.max()) + 1 if (docs >= 0).any() else 0
    ax1.set_title(f"{n_docs} documents packed into {len(docs)} positions, {(docs < 0).sum()} padding")
    fig.tight_layout()
    return fig
