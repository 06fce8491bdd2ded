"""The draft vocabulary's cap on τ: the share of reply tokens it lacks (tokens the draft can never propose), as each
notebook counts it, in one table; and the recipe lab's ``vocab-N`` rows, the evidence for the vocab's size."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from eagle3kit.evaluate.fates import PromptView
from eagle3kit.evaluate.recipes import Lab, LabRow
from eagle3kit.evaluate.token_classes import ALL, OUTSIDE, rejected_first

ON = "held-out"  # the lab's vocab rows are read on its held-out prompts


def lab_rows(lab: Lab) -> list[LabRow]:
    """The lab's draft-vocab levers (``vocab-N``) measured on its held-out prompts."""
    return [r for r in lab.rows if r.name.startswith("vocab-") and ON in r.delta]


def size(row: LabRow) -> int:
    """N of a ``vocab-N`` row."""
    return int(row.name.split("-")[1])


def evidence(lab: Lab) -> str:
    """The lab's vocab rows as a clause ("" where it ran none)."""
    rows = lab_rows(lab)
    if not rows:
        return ""
    said = ", ".join(f"`{r.name}` {r.delta[ON].signed}" for r in rows)
    return f"the recipe lab measured {said} (held-out τ) against its base at {rows[0].budget:g} CPU minutes"


def gained(lab: Lab, vocab: int, larger: bool) -> LabRow | None:
    """The lab's larger (or smaller) vocab than ``vocab`` whose gain held (interval above 0), the largest gain of
    them; None where none did."""
    gains = [r for r in lab_rows(lab) if (size(r) > vocab) == larger and size(r) != vocab and r.delta[ON].above_zero]
    return max(gains, key=lambda r: r.delta[ON].mean) if gains else None


def advice(lab: Lab, vocab: int) -> tuple[int | None, str]:
    """(the size the lab's rows point to, None to keep ``vocab``; why, a clause after the measured rows): a larger
    vocab whose gain held first, else a smaller one whose gain held (its head trains faster, though it lowers the
    cap), else keep ``vocab``."""
    larger, smaller = gained(lab, vocab, larger=True), gained(lab, vocab, larger=False)
    if larger:
        return size(larger), f"`vocab-{size(larger)}` gained on the lab's base recipe, not yet tried on its frontier's"
    if smaller:
        return size(smaller), (f"`vocab-{size(smaller)}` gained on the lab's base recipe (its head is smaller to "
                               "train, its cap lower; the lab measured the sum, not the two apart), not yet tried on "
                               "its frontier's")
    return None, "no other size gained at this scale"


def why_this_size(lab: Lab, vocab: int) -> str:
    """What the lab's rows say about a ``vocab``-token draft vocab, in one sentence."""
    if not lab_rows(lab):
        return f"No lab row has measured another size than {vocab}."
    to, why = advice(lab, vocab)
    if to is None:
        return f"Keep {vocab}: {evidence(lab)}; {why}."
    return f"Try `--set draft_vocab_size={to}` instead of {vocab}: {evidence(lab)}; {why}."


def table(counts: list[tuple[str, str, int | None, int | None, float | None]]) -> pd.DataFrame:
    """One row per count (notebook, what it counted over, tokens outside, tokens counted, share outside; a count
    given only as a share keeps its counts empty), the share as a percentage."""
    rows = [{"notebook": nn, "counted over": over, "outside": outside, "of": of,
             "share outside": share if share is not None else (outside / of if of else None)}
            for nn, over, outside, of, share in counts]
    frame = pd.DataFrame(rows, dtype=object).set_index(["notebook", "counted over"])
    frame["share outside"] = frame["share outside"].map(lambda x: "" if x is None else f"{x:.0%}")
    for column in ("outside", "of"):  # a count given only as a share: its counts left blank
        frame[column] = frame[column].map(lambda x: "" if x is None else f"{x:,}")
    return frame


def cap_table(s04: dict, s06: dict, sets: dict[str, Sequence[PromptView]], classes: pd.DataFrame,
              held: Sequence[PromptView], tokenizer, in_draft_vocab) -> pd.DataFrame:
    """The cap counted five ways, one row each: notebook 04's held-out replies, notebook 06's scored continuations
    (both from their summaries, as shares), and here each set's replies, the class table's targets and the rejected
    first proposals of the held-out prompts."""
    rows: list[tuple[str, str, int | None, int | None, float | None]] = []
    if s04.get("held_out_coverage") is not None:
        rows.append(("04", "every token of the verifier's held-out replies", None, None, 1 - s04["held_out_coverage"]))
    if s06.get("outside_vocab_share") is not None:
        rows.append(("06", f"the continuations it scored, {s06.get('held_out_prompts')} held-out prompts", None, None,
                     s06["outside_vocab_share"]))
    for name, views in sets.items():
        tokens = [int(t) for v in views for t in v.reply]
        rows.append(("07", f"the replies of {len(views)} {name} prompts",
                     sum(not bool(in_draft_vocab[t]) for t in tokens), len(tokens), None))
    rows.append(("07", "the targets of the class table (tokens the draft was asked for)",
                 int(classes.loc[OUTSIDE, "targets"]), int(classes.loc[ALL, "targets"]), None))
    first, outside = rejected_first(held, tokenizer, in_draft_vocab)
    rows.append(("07", f"the first proposals rejected, {len(held)} held-out prompts", outside, first, None))
    return table(rows)
