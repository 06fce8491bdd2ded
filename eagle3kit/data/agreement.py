"""eagle3kit's loss mask against speculators' ``prepare-data`` mask on the same conversations, token for token.

speculators' rows come from its own ``build_speculator_training_dataset`` (what ``speculators prepare-data`` runs on
natural-language conversations) against a vLLM render endpoint: ``vllm launch render MODEL`` (vLLM's GPU-less render
server: it loads the tokenizer and chat template, no weights) or ``vllm serve MODEL --enable-scale-out``. eagle3kit's
rows come from :func:`eagle3kit.data.conversations.rows`.

speculators makes one row per reply (the history unsupervised); eagle3kit one row per conversation with every reply
supervised, when the template's renders extend each other. So speculators' row for reply *j* is compared with
eagle3kit's row for the same conversation prefix ``turns[:j+1]``: the token ids, then the mask. A position eagle3kit
supervises in an earlier run of that row than reply *j*'s is an earlier reply (``layout``: speculators supervises it
in that reply's own row; docs/failures.md ``mixed-row-layout``); any other difference is counted in ``mask_differ``.
"""

from __future__ import annotations

import pandas as pd
from datasets import Dataset
from datasets.utils import logging as progress_bars
from speculators.data_generation.preprocessing import build_speculator_training_dataset

from eagle3kit.data import conversations as conv
from eagle3kit.logs import quiet

COLUMNS = ["conversation", "reply", "tokens", "ids_differ", "mask_differ", "layout", "supervised"]


def speculators_rows(tokenizer, turns: conv.Turns, endpoint: str, seq_length: int) -> list[tuple[list[int], list[int]]]:
    """(input_ids, loss_mask) of each row speculators' prepare-data makes from one conversation, in reply order."""
    data = Dataset.from_list([{"conversations": turns}])
    bars = progress_bars.is_progress_bar_enabled()
    progress_bars.disable_progress_bar()  # one map per conversation: no bar each
    try:
        with quiet():
            out = build_speculator_training_dataset(data, tokenizer, max_length=seq_length, num_proc=1,
                                                    render_endpoint=endpoint).with_format(None)
    finally:
        if bars:
            progress_bars.enable_progress_bar()
    return list(zip(out["input_ids"], out["loss_mask"], strict=True))


def _differ(a: list[int], b: list[int]) -> int:
    """Positions where two sequences differ (a length difference counts each missing position)."""
    return sum(x != y for x, y in zip(a, b, strict=False)) + abs(len(a) - len(b))


def _last_run_start(mask: list[int]) -> int:
    """The first position of the last run of 1s in ``mask`` (its length when there is none)."""
    p = len(mask)
    while p > 0 and not mask[p - 1]:
        p -= 1
    while p > 0 and mask[p - 1]:
        p -= 1
    return p if any(mask) else len(mask)


def compare_conversation(tokenizer, turns: conv.Turns, theirs: list[tuple[list[int], list[int]]],
                         seq_length: int) -> list[dict]:
    """One record per speculators row of ``turns`` (see the module doc); a reply one side has and the other has not
    is a record with ``ids_differ`` = its tokens."""
    replies = [j for j, t in enumerate(turns) if t["role"] == "assistant" and j > 0]
    records = []
    for k, j in enumerate(replies):
        mine = conv.rows(tokenizer, turns[: j + 1], seq_length)
        ids, mask = (mine[-1].input_ids, mine[-1].loss_mask) if mine else ([], [])
        their_ids, their_mask = theirs[k] if k < len(theirs) else ([], [])
        own = _last_run_start(mask)  # where eagle3kit's row supervises reply j; earlier runs are earlier replies
        layout = sum(1 for p in range(min(own, len(their_mask))) if mask[p] and not their_mask[p])
        records.append({"conversation": None, "reply": k, "tokens": len(their_ids),
                        "ids_differ": _differ(ids, their_ids),
                        "mask_differ": _differ(mask, their_mask) - layout, "layout": layout,
                        "supervised": sum(their_mask)})
    for k in range(len(replies), len(theirs)):  # rows speculators made for no reply eagle3kit sees
        records.append({"conversation": None, "reply": k, "tokens": len(theirs[k][0]), "ids_differ":
                        len(theirs[k][0]), "mask_differ": sum(theirs[k][1]), "layout": 0,
                        "supervised": sum(theirs[k][1])})
    return records


def compare_masks(tokenizer, conversations: dict[str, conv.Conversation], endpoint: str,
                  seq_length: int = 4096) -> pd.DataFrame:
    """Every conversation (by name) through both pipelines: one row per speculators row (:data:`COLUMNS`)."""
    records = []
    for name, conversation in conversations.items():
        turns = conv.normalize(conv.turns_of(conversation))
        raw = conversation if isinstance(conversation, list) else turns  # speculators normalises its own input
        for r in compare_conversation(tokenizer, turns, speculators_rows(tokenizer, raw, endpoint, seq_length),
                                      seq_length):
            records.append({**r, "conversation": name})
    return pd.DataFrame(records, columns=COLUMNS)


def summary(table: pd.DataFrame, kinds: dict[str, str] | None = None) -> pd.DataFrame:
    """Per conversation kind (``kinds``: conversation name -> kind; default: the name): rows, tokens compared, ids
    and mask positions that differ, and the earlier-reply positions eagle3kit supervises in the same row."""
    kind = table["conversation"].map(kinds) if kinds else table["conversation"]
    return table.assign(kind=kind).groupby("kind", sort=False).agg(
        rows=("reply", "size"), tokens=("tokens", "sum"), supervised=("supervised", "sum"),
        ids_differ=("ids_differ", "sum"), mask_differ=("mask_differ", "sum"), layout=("layout", "sum")).reset_index()
