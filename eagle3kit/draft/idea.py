"""The idea in one figure: a speculative-decoding round (left) and what an EAGLE-3 draft is made of (right).

Drawn from a :class:`~eagle3kit.draft.config.DraftBuild` when one is given, so the numbers in the picture (aux layer
ids, layers, vocabularies, k) are the ones of the draft being built.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from eagle3kit.draft.config import DraftBuild, draft_ttt_steps

GREEN, RED, BLUE, GREY, ORANGE = "#b7e4b0", "#f4b6b6", "#b9d3f0", "#e6e6e6", "#f8d9a8"


def _box(ax, x: float, y: float, w: float, h: float, text: str, color: str, size: int = 8) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", facecolor=color,
                                edgecolor="#555", linewidth=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)


def _arrow(ax, a: tuple[float, float], b: tuple[float, float], color: str = "#444", style: str = "-|>",
           rad: float = 0.0) -> None:
    ax.add_patch(FancyArrowPatch(a, b, arrowstyle=style, mutation_scale=9, color=color, linewidth=1,
                                 connectionstyle=f"arc3,rad={rad}"))


def _round(ax, k: int, accepted: int) -> None:
    """Left panel: k draft tokens, one verifier forward, accepted prefix + bonus token."""
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, 10)
    ax.axis("off")
    ax.set_title("1 · one speculative round", fontsize=10, loc="left")
    _box(ax, 0.2, 7.6, 2.0, 1.0, "committed\ntext", GREY)
    w = 1.2
    for i in range(k):
        _box(ax, 2.6 + i * (w + 0.2), 7.6, w, 1.0, f"d{i + 1}", ORANGE)
    ax.text(2.6, 9.0, f"the draft proposes k = {k} tokens, one at a time (cheap)", fontsize=8)
    _box(ax, 0.2, 5.0, 2.6 + k * (w + 0.2) - 0.4, 1.2, "verifier: ONE forward over [last token, d1 … dk]", BLUE)
    _arrow(ax, (1.2, 7.5), (1.2, 6.3))
    for i in range(k):
        x = 2.6 + i * (w + 0.2)
        ok = i < accepted
        _box(ax, x, 2.6, w, 1.0, f"d{i + 1} {'✓' if ok else '✗'}", GREEN if ok else RED)
    x = 2.6 + accepted * (w + 0.2)
    if accepted < k:
        _box(ax, x, 1.45, w, 0.9, "bonus", BLUE)
    else:
        _box(ax, 2.6 + k * (w + 0.2), 2.6, w, 1.0, "bonus", BLUE)
    _arrow(ax, (1.2, 4.9), (1.2, 3.1))
    ax.text(0.2, -0.4, f"kept: the accepted prefix + the verifier's own next token.\nτ = tokens per round = accepted "
            f"+ 1 (here {accepted + 1}; at most k + 1 = {k + 1}).\nThe output equals the verifier's alone.",
            fontsize=8, va="bottom")


def _draft(ax, aux: list[int], n_layers: int, verifier_layers: int, vocab: int, draft_vocab: int) -> None:
    """Right panel: the verifier's three taps -> fc -> decoder layer(s) -> lm_head over the draft vocab."""
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.axis("off")
    ax.set_title("2 · the EAGLE-3 draft", fontsize=10, loc="left")
    _box(ax, 0.2, 0.6, 1.6, 8.0, "", BLUE)
    ax.text(1.0, 8.75, f"verifier\n({verifier_layers} layers)", ha="center", fontsize=8)
    ys = [1.4 + i * 2.4 for i in range(len(aux))]
    for layer, y in zip(aux, ys, strict=True):
        _box(ax, 0.4, y, 1.2, 0.7, f"layer {layer}", "white", 7)
        _arrow(ax, (1.65, y + 0.35), (3.0, 4.9 + (y - ys[1]) * 0.12))
    _box(ax, 3.0, 4.3, 1.4, 1.4, f"concat\n{len(aux)}×h\n→ fc → h", ORANGE)
    _box(ax, 3.0, 7.2, 1.4, 1.0, "embed(next\ntoken)", GREY, 7)
    _box(ax, 5.0, 4.3, 1.6, 1.4, f"{n_layers} decoder\nlayer{'s' if n_layers > 1 else ''}\n(input 2h)", ORANGE)
    _arrow(ax, (4.45, 5.0), (4.95, 5.0))
    _arrow(ax, (3.7, 7.15), (5.4, 5.75))
    _box(ax, 7.2, 4.3, 2.6, 1.4, f"lm_head over\n{draft_vocab:,} draft tokens\nd2t → verifier id", ORANGE)
    _arrow(ax, (6.65, 5.0), (7.15, 5.0))
    _arrow(ax, (6.2, 4.25), (4.0, 4.25), color="tab:red", rad=-0.5)
    ax.text(5.3, 2.5, "TTT: steps 2…k feed the draft's own\nhidden state back instead of the\nverifier's "
            "(it trains as it is used)", fontsize=7, color="tab:red", ha="center")
    note = "t2d marks which verifier tokens are in it" if draft_vocab < vocab else "the full verifier vocab"
    ax.text(7.2, 6.0, note, fontsize=7)


def plot_idea(build: DraftBuild | None = None, k: int | None = None, accepted: int | None = None) -> Figure:
    """Speculative decoding and the EAGLE-3 draft in one figure (numbers from ``build`` when given)."""
    if build is not None:
        aux, text = build.aux_layer_ids, build.verifier.text_config
        n_layers, verifier_layers = build.config.transformer_layer_config.num_hidden_layers, text.num_hidden_layers
        vocab, draft_vocab = text.vocab_size, build.config.draft_vocab_size
        k = k or draft_ttt_steps(build.config)
    else:
        aux, n_layers, verifier_layers, vocab, draft_vocab = [2, 15, 27], 1, 30, 49152, 8192
        k = k or 3
    accepted = min(k, 2) if accepted is None else accepted
    fig = Figure(figsize=(12, 4.2))
    left, right = fig.subplots(1, 2)
    _round(left, k, accepted)
    _draft(right, list(aux), n_layers, verifier_layers, vocab, draft_vocab)
    fig.tight_layout()
    return fig
