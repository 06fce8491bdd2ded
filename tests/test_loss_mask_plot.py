"""The loss mask drawn over a real chat-templated conversation: one cell per token, coloured by what trains."""

from __future__ import annotations

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle

from eagle3kit.data import conversations as conv
from eagle3kit.data.loss_mask_plot import COLORS, plot_loss_mask, window_start
from eagle3kit.verifier import load_tokenizer

TURNS = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "It is 4.\nAnything else?"},
         {"role": "user", "content": "No"}, {"role": "assistant", "content": "Bye!"}]


@pytest.fixture(scope="module")
def sample(tiny_verifier):
    tokenizer = load_tokenizer(tiny_verifier)
    return tokenizer, conv.tokenize(tokenizer, TURNS, 256)


def _cells(fig, color: str) -> int:
    return sum(isinstance(p, Rectangle) and to_hex(p.get_facecolor()) == to_hex(color) for p in fig.axes[0].patches)


def test_assistant_tokens_are_the_green_cells(sample):
    tokenizer, s = sample
    fig = plot_loss_mask(tokenizer, s.input_ids, s.loss_mask)
    assert 0 < sum(s.loss_mask) < len(s.input_ids)
    assert _cells(fig, COLORS["assistant"]) == sum(s.loss_mask)
    assert _cells(fig, COLORS["context"]) == len(s.input_ids) - sum(s.loss_mask)
    assert f"{sum(s.loss_mask)} of {len(s.input_ids)} tokens train the draft" in fig.axes[0].get_title(loc="left")
    shown = "".join(t.get_text() for t in fig.axes[0].texts)
    assert "Anything" in shown and "Bye" in shown


def test_packed_documents_and_padding_are_marked(sample):
    tokenizer, s = sample
    n = len(s.input_ids)
    ids, mask = s.input_ids * 2 + [0] * 5, s.loss_mask * 2 + [0] * 5
    docs = [0] * n + [1] * n + [-1] * 5
    fig = plot_loss_mask(tokenizer, ids, mask, docs)
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("doc ")]
    assert labels == ["doc 0", "doc 1"]
    hatched = [p for p in fig.axes[0].patches if isinstance(p, Rectangle) and p.get_hatch()]
    assert len(hatched) == 5


def test_a_window_around_the_first_boundary_marks_only_real_document_starts(sample):
    tokenizer, s = sample
    n = len(s.input_ids)
    ids, mask, docs = s.input_ids * 3, s.loss_mask * 3, [0] * n + [1] * n + [2] * n
    start = window_start(docs, 6)
    assert start == n - 3
    fig = plot_loss_mask(tokenizer, ids, mask, docs, max_tokens=6, start=start, title="row")
    labels = [t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("doc ")]
    assert labels == ["doc 1"]  # the window starts inside doc 0: no start drawn there
    assert fig.axes[0].get_title(loc="left") == f"row (tokens {n - 3}-{n + 2} of {3 * n})"


def test_mismatched_lengths_are_one_clear_error(sample):
    tokenizer, s = sample
    with pytest.raises(ValueError, match="equally long"):
        plot_loss_mask(tokenizer, s.input_ids, s.loss_mask[:-3])
