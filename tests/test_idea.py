"""The idea figure is drawn from the draft being built: its aux layers, layers, vocabularies and k."""

from __future__ import annotations

from matplotlib.figure import Figure

from eagle3kit.draft.config import build_config
from eagle3kit.draft.idea import plot_idea


def _texts(fig: Figure) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_the_figure_carries_the_builds_numbers(tiny_verifier):
    build = build_config(verifier="tiny", ttt_steps=4, draft_vocab_size=512, device="cpu")
    fig = plot_idea(build)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    text = _texts(fig)
    for layer in build.aux_layer_ids:
        assert f"layer {layer}" in text
    assert "k = 4" in text and "512 draft tokens" in text and "t2d" in text
    assert f"({build.verifier.text_config.num_hidden_layers} layers)" in text


def test_the_round_marks_accepted_rejected_and_the_bonus():
    text = _texts(plot_idea(k=5, accepted=3))
    assert text.count("✓") == 3 and text.count("✗") == 2 and "bonus" in text
    assert "here 4; at most k + 1 = 6" in text
