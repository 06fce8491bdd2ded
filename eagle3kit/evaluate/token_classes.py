"""Where the draft fails, by token class: counted from the token fates (:mod:`eagle3kit.evaluate.fates`), not guessed.

A reply token the draft was asked for (accepted, or corrected after the draft's proposal was rejected) is a *target*;
a corrected one is a *failure*. Each target falls in every class its text and id say it is in:

===========================  =====================================================================================
``word start``               a letter starting a word: after whitespace, or the token opens with whitespace
``number``                   its text holds a digit
``punctuation``              its text is punctuation or symbols only (whitespace aside)
``code``                     it lies inside a fenced code block (an odd number of ``` before it in the reply)
``outside the draft vocab``  the draft vocabulary (t2d) lacks it: the draft can never propose it
===========================  =====================================================================================
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

import pandas as pd

from eagle3kit.evaluate.fates import ACCEPTED, CORRECTED, PromptView

WORD_START = "word start"
NUMBER = "number"
PUNCTUATION = "punctuation"
CODE = "code"
OUTSIDE = "outside the draft vocab"
CLASSES = (WORD_START, NUMBER, PUNCTUATION, CODE, OUTSIDE)
ALL = "every target"
PROPOSABLE = "every target it could propose"  # every target but those outside the draft vocab
FENCE = "```"
MIN_TARGETS = 20  # a class is compared with the others only with this many targets (fewer: its interval says little)
Z95 = 1.96  # a two-sided 95 % normal quantile, for the failure rates' intervals


def wilson(failed: int, targets: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a failure rate ``failed / targets`` (wide for a class of few targets)."""
    if not targets:
        return float("nan"), float("nan")
    p, z2 = failed / targets, Z95 * Z95
    centre, scale = (p + z2 / (2 * targets)), 1 + z2 / targets
    half = Z95 * math.sqrt(p * (1 - p) / targets + z2 / (4 * targets * targets))
    return max(0.0, (centre - half) / scale), min(1.0, (centre + half) / scale)


def _punctuation(text: str) -> bool:
    core = "".join(text.split())
    return bool(core) and all(unicodedata.category(c)[0] in "PS" for c in core)


def classes_of(texts: Sequence[str], ids: Sequence[int], in_draft_vocab=None) -> list[frozenset[str]]:
    """The classes of each token of a reply, from its decoded ``texts`` (one per token) and verifier ``ids``;
    ``in_draft_vocab``: a boolean mask over the verifier vocab (the draft's t2d), None for a full-vocab draft."""
    out, before = [], ""
    for text, token in zip(texts, ids, strict=True):
        found = set()
        stripped = text.lstrip()
        if stripped[:1].isalpha() and (text[:1].isspace() or not before or before[-1:].isspace()):
            found.add(WORD_START)
        if any(c.isdigit() for c in text):
            found.add(NUMBER)
        if _punctuation(text):
            found.add(PUNCTUATION)
        if before.count(FENCE) % 2 == 1:
            found.add(CODE)
        if in_draft_vocab is not None and not bool(in_draft_vocab[int(token)]):
            found.add(OUTSIDE)
        out.append(frozenset(found))
        before += text
    return out


def draft_vocab_mask(draft):
    """The draft's t2d (which verifier ids its vocabulary holds), None for a draft over the verifier's whole vocab."""
    return draft.t2d.bool().cpu() if getattr(draft, "use_draft_vocab", False) and draft.t2d is not None else None


def outside_share(replies: Sequence[Sequence[int]], in_draft_vocab) -> float | None:
    """The share of the reply tokens (verifier ids) that the draft vocabulary lacks, None for a full-vocab draft or no
    tokens: those tokens the draft can never propose, so they cap its acceptance."""
    tokens = [int(t) for reply in replies for t in reply]
    if in_draft_vocab is None or not tokens:
        return None
    return sum(not bool(in_draft_vocab[t]) for t in tokens) / len(tokens)


def reply_classes(view: PromptView, tokenizer, in_draft_vocab=None) -> list[frozenset[str]]:
    """:func:`classes_of` for a view's reply (each token decoded alone)."""
    return classes_of([tokenizer.decode([t]) for t in view.reply], view.reply, in_draft_vocab)


def class_table(views: Sequence[PromptView], tokenizer, in_draft_vocab=None) -> pd.DataFrame:
    """Per class (and over every target): targets, accepted, failed, the failure rate and the class's share of all
    failures; classes overlap, so the shares need not add up to 1. A target outside the draft vocab counts under
    that row alone (and over every target): it always fails, so the other classes' rates are of what the draft can
    propose."""
    counts = {c: [0, 0] for c in (*CLASSES, ALL)}  # class -> [accepted, failed]
    for view in views:
        for fate, found in zip(view.fates, reply_classes(view, tokenizer, in_draft_vocab), strict=True):
            if fate.kind not in (ACCEPTED, CORRECTED):
                continue
            if OUTSIDE in found:
                found = frozenset({OUTSIDE})
            for c in (*found, ALL):
                counts[c][fate.kind == CORRECTED] += 1
    if in_draft_vocab is not None:  # the fair base for the classes' rates: every target but the outside-vocab ones
        (a_all, f_all), (a_out, f_out) = counts.pop(ALL), counts[OUTSIDE]
        counts[PROPOSABLE], counts[ALL] = [a_all - a_out, f_all - f_out], [a_all, f_all]
    failures = counts[ALL][1]
    rows = [{"class": c, "targets": a + f, "accepted": a, "failed": f,
             "failure rate": round(f / (a + f), 3) if a + f else float("nan"),
             "share of failures": round(f / failures, 3) if failures else float("nan")} for c, (a, f) in counts.items()]
    return pd.DataFrame(rows).set_index("class")


def worst_line(table: pd.DataFrame) -> str:
    """One sentence from the counts: the class with the highest failure rate among those the draft can propose and
    with at least :data:`MIN_TARGETS` targets, named only when its 95 % interval (:func:`wilson`) lies above every
    other's; else the highest-failing class whose interval lies above some other's, with those below it (else that no
    two separate, with each interval); beside the rate over every target; then, when some
    targets lie outside the draft vocab (always failures, by construction), their share, as the cap it is rather than
    a class to name."""
    total = table.loc[ALL]
    if not total["targets"]:
        return "The draft was asked for no token here (every reply ended before its first round)."
    classes = table.drop(index=[ALL, OUTSIDE, PROPOSABLE], errors="ignore")
    rated = classes[classes["targets"] >= MIN_TARGETS]
    few = classes[(classes["targets"] > 0) & (classes["targets"] < MIN_TARGETS)]
    outside = int(table.loc[OUTSIDE, "targets"]) if OUTSIDE in table.index else 0
    proposable = int(total["targets"]) - outside  # every target outside the vocab fails: the rest is the fair base
    overall = (f"Over the {proposable} targets it could propose, {int(total['failed']) - outside} failed "
               f"({(int(total['failed']) - outside) / proposable:.0%}); over all {int(total['targets'])}, "
               f"{int(total['failed'])} ({total['failure rate']:.0%})" if outside and proposable else
               f"Over every target, {int(total['failed'])} of {int(total['targets'])} failed "
               f"({total['failure rate']:.0%})")
    if len(few):
        overall = (", ".join(f"{c} {int(r['failed'])}/{int(r['targets'])}" for c, r in few.iterrows())
                   + f": too few targets to compare (under {MIN_TARGETS}). " + overall)
    cap = (f" {outside} of the {int(total['targets'])} targets ({outside / total['targets']:.0%}) lie outside the "
           "draft vocab, which it can never propose: a cap on τ (the table below weighs it against the cost of a "
           "larger vocab)." if outside else "")
    if rated.empty:
        return f"No class the draft can propose has {MIN_TARGETS} targets yet. {overall}.{cap}"
    bounds = {c: wilson(int(r["failed"]), int(r["targets"])) for c, r in rated.iterrows()}
    name = rated["failure rate"].idxmax()
    row = rated.loc[name]
    if all(bounds[name][0] > bounds[c][1] for c in rated.index if c != name):  # an ordering only where they separate
        return (f"By class, of those with at least {MIN_TARGETS} targets, it fails most on {name} tokens: "
                f"{int(row['failed'])} of "
                f"{int(row['targets'])} failed ({row['failure rate']:.0%}, 95 % interval {bounds[name][0]:.0%}–"
                f"{bounds[name][1]:.0%}). {overall}.{cap}")
    def said(c: str) -> str:
        return (f"{c} {int(rated.loc[c, 'failed'])}/{int(rated.loc[c, 'targets'])} "
                f"({bounds[c][0]:.0%}–{bounds[c][1]:.0%})")

    ranked = list(rated.sort_values("failure rate", ascending=False).index)
    # the highest-failing class whose interval lies above some other's: the one difference worth a sentence
    top = next((c for c in ranked if any(bounds[c][0] > bounds[o][1] for o in ranked)), None)
    if top is None:  # no two intervals separate: no ordering to state
        return (f"By class, no kind of token stands out: no two of the 95 % intervals of the failure rates separate "
                f"({', '.join(map(said, ranked))}). {overall}.{cap}")
    below = [c for c in ranked if bounds[top][0] > bounds[c][1]]
    others = [c for c in ranked if c != top and c not in below]
    rest = (f"; {', '.join(map(said, others))} cannot be told apart from {top} by these counts" if others else "")
    return (f"By class, one difference is measured: {top} tokens ({said(top)}) fail more often than "
            f"{', '.join(map(said, below))}: their 95 % intervals separate{rest}. {overall}.{cap}")


def rejected_first(views: Sequence[PromptView], tokenizer, in_draft_vocab=None) -> tuple[int, int]:
    """(rounds whose first proposal was rejected, how many of those rejected targets lie outside the draft vocab)."""
    first_rejected = outside = 0
    for view in views:
        accepted_in = {f.round for f in view.fates if f.kind == ACCEPTED}
        found = reply_classes(view, tokenizer, in_draft_vocab)
        for fate, classes in zip(view.fates, found, strict=True):
            if fate.kind == CORRECTED and fate.round not in accepted_in:
                first_rejected += 1
                outside += OUTSIDE in classes
    return first_rejected, outside


def how_tau_adds_up(views: Sequence[PromptView], tokenizer, in_draft_vocab=None) -> str:
    """τ over ``views`` as the sum it is (1 a round for the verifier's own token, plus the draft tokens accepted per
    round at each depth), then how often the round's first proposal was rejected and how many of those rejected
    targets the draft could never have proposed (outside its vocab): counts, one sentence each."""
    rounds = sum(v.rounds for v in views)
    if not rounds:
        return "No round was taken here (every reply ended before its first round)."
    depths = [sum(d) for d in zip(*(v.by_depth() for v in views), strict=True)]
    terms = " + ".join(f"{d / rounds:.2f}" for d in depths)
    first_rejected, outside = rejected_first(views, tokenizer, in_draft_vocab)
    tau = 1 + sum(depths) / rounds
    share = (f"; {outside} of those {first_rejected} rejected tokens ({outside / first_rejected:.0%}) lie outside the "
             "draft vocab, where no training helps" if first_rejected and in_draft_vocab is not None else "")
    prompts = f"{len(views)} prompt" + ("s" if len(views) != 1 else "")
    unchecked = rounds - depths[0] - first_rejected  # rounds that met the reply's end before a proposal was checked
    ended = (f"; {unchecked} round{'s' if unchecked != 1 else ''} met the reply's end before a proposal was checked"
             if unchecked else "")
    return (f"How τ {tau:.2f} adds up over {prompts} ({rounds} rounds): 1 (the verifier's own token, every "
            f"round) + {terms} (draft tokens accepted per round at depth 1 … {len(depths)}). The first proposal "
            f"was accepted in {depths[0]} of the {rounds} rounds (the {depths[0] / rounds:.2f} above) and rejected "
            f"in {first_rejected} ({first_rejected / rounds:.0%}), which ends a round at once{ended}{share}.")
