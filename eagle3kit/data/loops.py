"""Greedy decoding's rut: a reply that loops on one sentence (a small verifier often writes them), told by how many
of its word 4-grams repeat; notebooks show a typical reply first, not a loop."""

from __future__ import annotations

import re

LOOP_SHARE = 0.4  # a reply whose word 4-grams repeat an earlier one more often than this loops (greedy decoding's rut)


def repetition(text: str, n: int = 4) -> float:
    """The share of the text's word ``n``-grams (words: runs of letters and digits) that repeat an earlier one: 0
    for none, near 1 for a reply that loops on one sentence (a small verifier decoding greedily often does)."""
    words = re.findall(r"\w+", text.lower())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def loops(turns: list[dict]) -> bool:
    """Whether the conversation's last reply loops (:func:`repetition` over :data:`LOOP_SHARE`)."""
    return repetition(turns[-1]["content"]) > LOOP_SHARE


def first_not_looping(replies: list[str]) -> int:
    """The index of the first reply that does not loop (:data:`LOOP_SHARE`), 0 when every one does: the example a
    notebook prints, a typical reply rather than a rut."""
    return next((i for i, text in enumerate(replies) if repetition(text) <= LOOP_SHARE), 0)
