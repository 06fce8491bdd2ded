"""Every token's fate, on the page: HTML of a prompt's reply with each token marked by its fate
(:mod:`eagle3kit.evaluate.fates`), the token-class summary (:mod:`eagle3kit.evaluate.token_classes`), and a
self-contained page of many prompts (``eagle3kit evaluate --show FILE.html``).

Styles are inline, so a fragment looks the same in a notebook, an ipywidget and the page. Each token is a ``<span>``
carrying ``data-kind`` (and ``data-depth``); its ``title`` (shown on hover) says its fate and, after a rejection, what
the draft proposed instead.
"""

from __future__ import annotations

import html
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from eagle3kit.atomic import write_text
from eagle3kit.evaluate.conventions import TAU_CONVENTION, TAU_LABEL
from eagle3kit.evaluate.fates import ACCEPTED, BONUS, CORRECTED, FIRST, Fate, PromptView
from eagle3kit.evaluate.token_classes import class_table, worst_line

DEPTH_COLOURS = ("#2e7d32", "#66bb6a", "#a5d6a7", "#c8e6c9", "#e8f5e9")  # accepted at depth 1, 2, ... (darker first)
COLOURS = {CORRECTED: "#ef9a9a", BONUS: "#90caf9", FIRST: "#e0e0e0"}
PROMPT_TAIL = 300  # characters of the prompt shown before its reply
FONT = "font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 13px"


def _colour(fate: Fate) -> str:
    if fate.kind == ACCEPTED:
        return DEPTH_COLOURS[min(fate.depth, len(DEPTH_COLOURS)) - 1]
    return COLOURS[fate.kind]


def _text(tokenizer, token: int) -> str:
    text = tokenizer.decode([token])
    return text.replace("\n", "↵\n") if text else "∅"


def _title(fate: Fate, tokenizer, k: int) -> str:
    if fate.kind == ACCEPTED:
        return f"accepted from the draft at depth {fate.depth} of {k}"
    if fate.kind == CORRECTED:
        return f"the verifier's own token: the draft proposed {tokenizer.decode([fate.proposed])!r} instead"
    if fate.kind == BONUS:
        return "bonus token: the verifier's own, after every proposal of the round was accepted"
    return "first token: the verifier's, from the prompt's prefill (no draft yet)"


def tokens_html(view: PromptView, tokenizer) -> str:
    """The reply, one marked ``<span>`` per token."""
    spans = []
    for f in view.fates:
        depth = f' data-depth="{f.depth}"' if f.kind == ACCEPTED else ""
        fg = "color: white; " if f.kind == ACCEPTED and f.depth == 1 else ""
        spans.append(f'<span data-kind="{f.kind}"{depth} title="{html.escape(_title(f, tokenizer, view.k))}" '
                     f'style="{fg}background: {_colour(f)}; border-radius: 2px">'
                     f"{html.escape(_text(tokenizer, f.token))}</span>")
    return "".join(spans)


def numbers_line(view: PromptView) -> str:
    """The prompt's τ as counted from its fates, and vLLM's beside it where it ran."""
    depths = ", ".join(f"{n} at depth {d}" for d, n in enumerate(view.by_depth(), 1))
    line = (f"{TAU_LABEL} {view.tau:.3f} = 1 + {view.accepted} accepted / {view.rounds} rounds (k = {view.k}; "
            f"the accepted draft tokens: {depths})")
    if view.vllm_tau is not None:
        same, agree = view.vllm_same_output, view.vllm_counts_agree
        line += (f"; vLLM's per-request counters: τ {view.vllm_tau:.3f}, rounds that accepted 0, 1, ... {view.k} "
                 f"draft tokens {view.vllm_histogram} (simulated {view.histogram()}); vLLM's output "
                 f"{'equals' if same else 'differs from'} this reply, the counts {'agree' if agree else 'differ'}")
    return line


def legend_html(k: int) -> str:
    items = [(DEPTH_COLOURS[min(d, len(DEPTH_COLOURS)) - 1], f"accepted at depth {d}") for d in range(1, k + 1)]
    items += [(COLOURS[CORRECTED], "verifier's token after a rejection (hover: the draft's proposal)"),
              (COLOURS[BONUS], "bonus token"), (COLOURS[FIRST], "first token (prefill)")]
    keys = " ".join(f'<span style="background: {c}; padding: 0 6px; border-radius: 2px">&nbsp;</span> {html.escape(t)}'
                    for c, t in items)
    return f'<div style="{FONT}; margin: 4px 0">{keys}<br><i>{html.escape(TAU_CONVENTION)}</i></div>'


def prompt_html(view: PromptView, tokenizer) -> str:
    """One prompt: its id and category, its numbers, the prompt's tail (grey) and the marked reply."""
    prompt = tokenizer.decode(view.prompt_ids)
    tail = ("…" if len(prompt) > PROMPT_TAIL else "") + prompt[-PROMPT_TAIL:]
    return (f'<div class="prompt" data-id="{html.escape(view.id)}" style="{FONT}; margin: 10px 0">'
            f"<div><b>{html.escape(view.id)}</b> (the set's own id; {html.escape(view.category)}): "
            f"{html.escape(numbers_line(view))}"
            f'</div><div style="color: #777; white-space: pre-wrap">{html.escape(tail)}</div>'
            f'<div style="white-space: pre-wrap; line-height: 1.7">{tokens_html(view, tokenizer)}</div></div>')


def summary_html(views: Sequence[PromptView], tokenizer, in_draft_vocab=None) -> str:
    """The token-class table and its one-sentence reading, as HTML."""
    table = class_table(views, tokenizer, in_draft_vocab)
    return (f'<div style="{FONT}"><p>{html.escape(worst_line(table))}</p>'
            f"{table.to_html(border=0, float_format=lambda x: f'{x:.3f}')}</div>")


def figure_html(fig, caption: str) -> str:
    """A Figure as an inline PNG (the page stays one file)."""
    import base64

    from eagle3kit.figures import png_bytes

    data = base64.b64encode(png_bytes(fig, dpi=100)).decode()
    return f'<figure><img src="data:image/png;base64,{data}"><figcaption>{html.escape(caption)}</figcaption></figure>'


def page(sections: dict[str, Sequence[PromptView]], tokenizer, title: str, vocab: dict | None = None,
         about: str = "", figures: Sequence[str] = ()) -> str:
    """A self-contained HTML page: the legend, then per section (a draft on a prompt set) the token-class summary and
    every prompt; ``vocab``: each section's draft-vocab mask (t2d), ``figures``: :func:`figure_html` blocks."""
    k = max((v.k for views in sections.values() for v in views), default=1)
    body = "".join(f"<h3>{html.escape(name)}: where the draft fails, by token class</h3>"
                   f"{summary_html(views, tokenizer, (vocab or {}).get(name))}"
                   f"<h3>{html.escape(name)}: every token's fate</h3>"
                   + "".join(prompt_html(v, tokenizer) for v in views) for name, views in sections.items())
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title></head>'
            f'<body style="max-width: 1100px; margin: auto"><h2>{html.escape(title)}</h2>'
            f"<p>{html.escape(about)}</p>{legend_html(k)}{''.join(figures)}{body}</body></html>")


def write_page(path: str | os.PathLike, sections: dict[str, Sequence[PromptView]], tokenizer, title: str,
               vocab: dict | None = None, about: str = "", figures: Sequence[str] = ()) -> Path:
    """:func:`page` written to ``path`` (atomically)."""
    write_text(path, page(sections, tokenizer, title, vocab, about, figures))
    return Path(path)


def comparison_table(views: Sequence[PromptView], only_differing: bool = False) -> pd.DataFrame:
    """Per prompt where vLLM ran: τ simulated (from the fates) beside vLLM's per-request τ, whether vLLM's output
    equals the simulated reply and whether the rounds-by-accepted counts agree; ``only_differing``: the prompts where
    either does not (:func:`vllm_line` counts the rest)."""
    rows = [{"prompt": v.id, "category": v.category, f"{TAU_LABEL} simulated": round(v.tau, 3),
             f"{TAU_LABEL} vLLM": round(v.vllm_tau, 3), "same output": v.vllm_same_output,
             "same counts": v.vllm_counts_agree} for v in views if v.vllm_tau is not None
            and not (only_differing and v.vllm_same_output and v.vllm_counts_agree)]
    return pd.DataFrame(rows)


def one_round_more(view: PromptView) -> bool:
    """vLLM's rounds-by-accepted counts exceed the simulation's by what one round explains: one round more, or one
    round with more accepted draft tokens. vLLM's scheduler counts a round's accepted draft tokens before it cuts the
    output at ``max_tokens`` or the end of the turn (vllm/v1/core/sched/scheduler.py), so the reply's last round can
    count accepted tokens past the reply's end, which the simulation, walking the reply itself, cannot."""
    mine, theirs = view.histogram(), list(view.vllm_histogram or [])
    width = max(len(mine), len(theirs))
    diff = [t - m for m, t in zip(mine + [0] * (width - len(mine)), theirs + [0] * (width - len(theirs)), strict=True)]
    plus = [j for j, d in enumerate(diff) for _ in range(max(d, 0))]
    minus = [j for j, d in enumerate(diff) for _ in range(max(-d, 0))]
    return len(plus) == 1 and (not minus or (len(minus) == 1 and minus[0] < plus[0]))


def vllm_line(views: Sequence[PromptView]) -> str:
    """Where vLLM's per-request counts were kept: on how many prompts its output with the draft equals the simulated
    reply, on how many of those the rounds-by-accepted counts agree, and where they differ, on how many one round
    at the reply's end explains it (:func:`one_round_more`; empty when vLLM did not run)."""
    ran = [v for v in views if v.vllm_tau is not None]
    if not ran:
        return ""
    same = [v for v in ran if v.vllm_same_output]
    agree = sum(bool(v.vllm_counts_agree) for v in same)
    apart = [v for v in same if not v.vllm_counts_agree]
    higher = sum(v.vllm_tau > v.tau for v in apart)
    ends = [v for v in apart if one_round_more(v)]
    rest = len(apart) - len(ends)
    gap = sum(v.vllm_tau - v.tau for v in ends) / len(ends) if ends else 0.0
    direction = (f" Where only the counts differ, vLLM's τ is the higher on {higher} of {len(apart)}. On {len(ends)} "
                 "of them one round explains it: vLLM counts a round's accepted draft tokens before it cuts the "
                 "output at the token limit or the end of the turn, so the reply's last round can count tokens past "
                 f"the reply's end (τ higher by {gap:.3f} on average there); vLLM's τ on replies this short runs a "
                 "little high for it." + (f" The other {rest} are not explained by that (near ties in the hidden "
                                          "states vLLM computes with its own kernels, in a batch)." if rest else "")
                 if apart else "")
    sets = Counter(v.id.split("/")[0] for v in ran if "/" in v.id)  # ids are SET/N: say which sets the count holds
    of = f" ({', '.join(f'{n} {name}' for name, n in sets.items())})" if len(sets) > 1 else ""
    return (f"vLLM beside the simulation, {len(ran)} prompts{of}: its output with the draft equals the simulated "
            f"reply on {len(same)}; on those, its per-request counts (rounds by accepted tokens) equal the "
            f"simulation's on {agree}." + (" Where the outputs differ, the two walked different replies."
                                            if len(same) < len(ran) else "") + direction)
