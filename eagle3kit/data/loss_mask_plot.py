"""What trains: the loss mask drawn over the text of a conversation (or a packed batch).

Each token is drawn as its text on a coloured cell: assistant tokens (loss mask 1, the draft learns to predict
them) in green, context tokens (system, user, template markers) in grey, padding (document id -1) hatched. In a packed
batch a thick bar and a label mark where each document starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

CHAR_INCHES = 0.0595  # one monospace character at 7 pt
COLORS = {"assistant": "#b7e4b0", "context": "#e6e6e6", "padding": "white"}


def _cells(tokenizer, input_ids: Sequence[int], width: int) -> list[tuple[int, int, str]]:
    """(row, column, text) per token, wrapping at ``width`` characters and after newlines."""
    out, row, col = [], 0, 0
    for tok in input_ids:
        text = tokenizer.decode([int(tok)]).replace("\t", " ")
        newline = "\n" in text
        text = text.replace("\n", "↵") or "∅"
        if col and col + len(text) > width:
            row, col = row + 1, 0
        out.append((row, col, text[:width]))
        col += min(len(text), width)
        if newline:
            row, col = row + 1, 0
    return out


def plot_loss_mask(tokenizer, input_ids: Sequence[int], loss_mask: Sequence[int],
                   document_ids: Sequence[int] | None = None, max_tokens: int = 300, width: int = 110,
                   title: str | None = None, start: int = 0) -> Figure:
    """The tokens of a sample as text, coloured by the loss mask; document starts and padding marked.

    ``input_ids`` / ``loss_mask`` / ``document_ids``: lists or 1-D tensors of one sample or one packed row. At most
    ``max_tokens`` tokens are drawn, from token ``start`` (e.g. :func:`window_start`); the title says which.
    """
    start = max(0, min(int(start), len(input_ids) - 1)) if len(input_ids) else 0
    ids = [int(t) for t in input_ids][start:start + max_tokens]
    mask = [int(m) for m in loss_mask][start:start + len(ids)]
    all_docs = [int(d) for d in document_ids] if document_ids is not None else [0] * len(input_ids)
    docs = all_docs[start:start + len(ids)]
    before = all_docs[start - 1] if start else None  # the document of the token before the window
    if len(mask) != len(ids) or len(docs) != len(ids):
        raise ValueError(f"input_ids ({len(ids)}), loss_mask ({len(mask)}) and document_ids must be equally long; "
                         "pass the same sample's three sequences.")
    cells = _cells(tokenizer, ids, width)
    rows = cells[-1][0] + 1 if cells else 1
    fig = Figure(figsize=(width * CHAR_INCHES + 0.3, 0.9 + rows * 0.2))
    ax = fig.subplots()
    ax.set_xlim(-0.5, width + 0.5)
    ax.set_ylim(rows, -0.2)
    ax.axis("off")
    for i, ((row, col, text), m, d) in enumerate(zip(cells, mask, docs, strict=True)):
        kind = "padding" if d < 0 else "assistant" if m else "context"
        ax.add_patch(Rectangle((col, row + 0.05), len(text), 0.9, facecolor=COLORS[kind], edgecolor="white",
                               linewidth=0.5, hatch="///" if kind == "padding" else None))
        ax.text(col + 0.05, row + 0.5, text, fontsize=7, family="monospace", va="center", ha="left",
                color="#999" if kind == "padding" else "black")
        if d >= 0 and (before if i == 0 else docs[i - 1]) != d:
            ax.plot([col, col], [row, row + 1], color="tab:blue", linewidth=2.5)
            ax.text(col + 0.3, row + 0.12, f"doc {d}", fontsize=5, color="tab:blue", va="bottom")
    supervised = sum(mask)
    more = (f" (tokens {start}-{start + len(ids) - 1} of {len(input_ids)})" if start else
            f" (first {len(ids)} tokens)" if len(input_ids) > len(ids) else "")
    ax.set_title(f"{title}{more}" if title else f"{supervised} of {len(ids)} tokens train the draft{more}",
                 fontsize=9, loc="left")
    ax.legend(handles=[Patch(facecolor=COLORS["assistant"], label="assistant: in the loss"),
                       Patch(facecolor=COLORS["context"], label="context: not in the loss"),
                       Patch(facecolor="white", edgecolor="grey", hatch="///", label="padding"),
                       Patch(facecolor="tab:blue", label="document start")],
              loc="upper right", bbox_to_anchor=(1.0, 0.0), ncol=4, fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def window_start(document_ids: Sequence[int], max_tokens: int) -> int:
    """Where a window of ``max_tokens`` tokens starts so that it is centred on the row's first document boundary
    (0 when the row holds one document)."""
    docs = [int(d) for d in document_ids]
    boundary = next((i for i in range(1, len(docs)) if docs[i] != docs[i - 1]), 0)
    return max(0, min(boundary - max_tokens // 2, len(docs) - max_tokens))
