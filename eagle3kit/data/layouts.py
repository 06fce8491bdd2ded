"""Document-length layouts for the mask demos: real conversation lengths, packed into one batch.

Lengths come from ShareGPT V3 through the verifier's chat template, read by :mod:`eagle3kit.data.conversations`
(the one ShareGPT reader); packing follows speculators' collator: whole documents back to back, the rest padding.
"""

from __future__ import annotations

from itertools import islice

from eagle3kit.data.conversations import ordered, prompt_turns, read_sharegpt, turns_of
from eagle3kit.masks.eagle_mask import MaskInputError


def sharegpt_lengths(tokenizer, n: int = 16, seed: int = 0, max_len: int | None = None) -> list[int]:
    """Token lengths of ``n`` ShareGPT V3 conversations (chat template applied), in the data stage's seeded order."""
    chats = islice(ordered(read_sharegpt(), seed=seed), n)
    lengths = [len(tokenizer.apply_chat_template(c, tokenize=True, return_dict=False)) for c in chats]
    return [min(x, max_len) for x in lengths] if max_len else lengths


def _cut(tokenizer, text: str, tokens: int) -> str:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer.decode(ids[:tokens]) if len(ids) > tokens else text


def exchange_lengths(tokenizer, n: int = 32, seed: int = 0, prompt_tokens: int = 128, reply_tokens: int = 96
                     ) -> list[int]:
    """Token lengths of ``n`` ShareGPT V3 first exchanges in the shape of the demo's training samples: the first user
    turn cut to ``prompt_tokens`` and the reply that follows it to ``reply_tokens`` (notebook 04's verifier writes
    its own reply, at most that long), chat template applied; in the data stage's seeded order."""
    out = []
    for turns in ordered(read_sharegpt(), seed=seed):
        head, norm = prompt_turns(turns), turns_of(turns)
        user = next((j for j, t in enumerate(norm) if t["role"] == "user"), None)
        reply = next((t for t in norm[user + 1:] if t["role"] == "assistant"), None) if user is not None else None
        if head is None or reply is None or not reply["content"].strip():
            continue
        head[-1] = {**head[-1], "content": _cut(tokenizer, head[-1]["content"], prompt_tokens)}
        answer = {"role": "assistant", "content": _cut(tokenizer, reply["content"], reply_tokens)}
        out.append(len(tokenizer.apply_chat_template([*head, answer], tokenize=True, return_dict=False)))
        if len(out) == n:
            break
    return out


def pack(lengths: list[int], total_seq_len: int) -> list[int]:
    """Documents taken in order (cycling if needed), skipping any that no longer fit, until none fits; the rest of
    ``total_seq_len`` is padding."""
    lengths = [n for n in lengths if 0 < n <= total_seq_len]
    if not lengths:
        raise MaskInputError(f"No document fits into total_seq_len={total_seq_len}; raise it or pass shorter ones.")
    packed, used = [], 0
    while used + min(lengths) <= total_seq_len:
        for n in lengths:
            if used + n <= total_seq_len:
                packed.append(n)
                used += n
    return packed
