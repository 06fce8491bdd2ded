"""The ``long-context`` prompt set and τ against context length.

Drafts are trained on short packs and served on long chats; speculators issue 684 measured τ 2.30 at 2k tokens and
1.08 at 20k. This set asks the verifier to answer multi-turn ShareGPT histories cut at a user turn, in buckets of
context length: 256, 1k, 2k, 4k tokens and the verifier's limit (its ``max_position_embeddings``: 8k for SmolLM2). A
prompt of bucket ``L`` holds between :data:`MIN_FILL` · L and L tokens, chat template included (at the limit, the
reply's room less); a long document pasted into a user turn counts as it comes.

Held out: the histories come from the *end* of ShareGPT's seed-0 order, while every eagle3kit data build (the presets,
the recipe lab) takes its conversations from the start of an order; with a data directory
(:func:`training_prompts`), each conversation whose first user turn it trained on is left out as well. A
conversation gives one prompt at most, named in its ``conversation`` by the :func:`key` of its uncut first user turn
(a drawn prompt's own turn may be cut at its front), the name ``exclude`` matches.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence

import torch

from eagle3kit.errors import UserError
from eagle3kit.evaluate.acceptance import VerifierStates
from eagle3kit.evaluate.benchmarks import LONG_CONTEXT as NAME
from eagle3kit.evaluate.benchmarks import BenchPrompt, template_ids
from eagle3kit.evaluate.decode import aux_hidden_states
from eagle3kit.progress import tqdm

BUCKETS = (256, 1024, 2048, 4096)  # context lengths (tokens); the verifier's limit is the last bucket
PER_BUCKET = 6  # prompts a bucket holds (the full curve; --n-prompts takes fewer, the buckets in turn)
MIN_FILL = 0.75  # a prompt of bucket L holds at least this share of L tokens
REPLY_ROOM = 64  # tokens left under the verifier's limit for the reply, at least
KEY_CHARS = 64  # a conversation is named by the first characters of its first user turn (whitespace collapsed)
SOURCE_SEED = 0  # the order whose end the histories come from
CHARS_PER_TOKEN = 2  # a conversation is tokenized for a bucket only with this many characters a token it needs
BATCH_TOKENS = 16384  # prompts decode together while rows x (widest prompt + reply) stays within this (its cache)


def label(length: int) -> str:
    """``256``, ``1k``, ``2k``, ``8k``: a bucket's name (its category in score tables)."""
    return f"{length // 1024}k" if length >= 1024 and length % 1024 == 0 else str(length)


def buckets(limit: int) -> list[int]:
    """The context lengths measured under a verifier whose positions end at ``limit``: :data:`BUCKETS` below it,
    then ``limit`` itself."""
    return [b for b in BUCKETS if b < limit] + [limit]


def key(text: str) -> str:
    """How a conversation is recognised across sources (a regenerated copy cuts its user turn): the first
    :data:`KEY_CHARS` characters of its first user turn, whitespace collapsed."""
    return re.sub(r"\s+", " ", text).strip()[:KEY_CHARS]


def training_prompts(data_dir: str | os.PathLike) -> set[str]:
    """The :func:`key` of every conversation a data directory trained on (its held-out ones are not), rebuilt from
    its manifest's request as :func:`eagle3kit.data.dataset.training_rows` made its rows."""
    from eagle3kit.data.dataset import training_rows
    from eagle3kit.data.directory import DataDir
    from eagle3kit.verifier import load_tokenizer

    data = DataDir.open(data_dir)
    if not data.has_manifest:
        raise UserError(f"{data_dir} has no eagle3kit manifest, so the conversations it trained on are unknown; "
                        "leave --data out (the long-context set then relies on its held-out source alone).")
    manifest = data.manifest
    rows = manifest.counts.get("n_samples", 0)
    _held, stream = training_rows(load_tokenizer(manifest.verifier.ref), manifest.request)
    out = set()
    for n, (turns, _row) in enumerate(stream):
        if n >= rows:
            break
        out.add(key(next(t["content"] for t in turns if t["role"] == "user")))
    return out


def _history(tokenizer, turns: list[dict], low: int, high: int) -> tuple[dict, ...] | None:
    """The longest prefix of ``turns`` that ends with a user turn and renders (chat template included) to between
    ``low`` and ``high`` tokens; else the first prefix that renders past ``high``, with its last user turn cut at
    the front to fit (a long document keeps its end, where the question is); None when neither reaches ``low``.
    Lengths are estimated from each turn's own tokens, then the chosen prefix is rendered exactly."""
    chars = itertools.accumulate(len(t["content"]) for t in turns)
    reach = next((n for n, c in enumerate(chars, 1) if c > 8 * high), len(turns))  # a token has < 8 characters
    turns = turns[:reach]
    sizes = [len(ids) for ids in tokenizer([t["content"] for t in turns], add_special_tokens=False)["input_ids"]]
    overhead = len(template_ids(tokenizer, turns[:1])) - sizes[0]  # template tokens around the first turn
    total, best = 0, None
    for end, (turn, size) in enumerate(zip(turns, sizes, strict=True), 1):
        total += size + overhead
        if turn["role"] != "user" or not turn["content"].strip():
            continue
        if total > high:
            return _cut(tokenizer, turns[:end], low, high) if best is None else best
        if total >= low:
            exact = len(template_ids(tokenizer, turns[:end]))
            if low <= exact <= high:
                best = tuple(turns[:end])
    return best


def _cut(tokenizer, turns: list[dict], low: int, high: int) -> tuple[dict, ...] | None:
    """``turns`` with its last (user) turn cut at the front so that the whole renders to at most ``high`` tokens."""
    ids = tokenizer(turns[-1]["content"], add_special_tokens=False)["input_ids"]
    for _ in range(3):  # the cut text re-tokenizes a little differently: shrink until it fits
        over = len(template_ids(tokenizer, turns)) - high
        if over <= 0:
            break
        ids = ids[over + 8:]
        if not ids:
            return None
        turns = [*turns[:-1], {**turns[-1], "content": tokenizer.decode(ids)}]
    n = len(template_ids(tokenizer, turns))
    return tuple(turns) if low <= n <= high else None


def long_context_set(tokenizer, limit: int, per_bucket: int = PER_BUCKET, exclude: set[str] | frozenset = frozenset(),
                     conversations: Sequence | None = None, reply_room: int = REPLY_ROOM,
                     lengths: Sequence[int] | None = None) -> list[BenchPrompt]:
    """``per_bucket`` histories for each of :func:`buckets` (``limit``: the verifier's positions, of which
    ``reply_room`` stay free for the reply; ``lengths``: other context lengths instead), from ``conversations``
    (default: ShareGPT V3) taken from the end of their seed-0 order, none whose uncut first user turn's :func:`key`
    is in ``exclude`` (:func:`training_prompts`, or drawn prompts' ``conversation``). Fewer when the source runs
    out."""
    from eagle3kit.data import conversations as conv
    from eagle3kit.logs import quiet

    lengths = sorted(set(lengths)) if lengths else buckets(limit)
    cap = {b: min(b, limit - max(reply_room, REPLY_ROOM)) for b in lengths}
    found: dict[int, list[BenchPrompt]] = {b: [] for b in lengths}
    with quiet(stdout=True):  # speculators' normaliser names every unknown ShareGPT role it maps
        source = conv.read(None) if conversations is None else list(conversations)
        for turns in conv.ordered(source, SOURCE_SEED, from_end=True):  # normalised as reached
            open_ = [b for b in reversed(lengths) if len(found[b]) < per_bucket]
            if not open_:
                break
            name = key(next((t["content"] for t in turns if t["role"] == "user"), ""))
            if name in exclude:
                continue
            chars = sum(len(t["content"]) for t in turns)
            for b in open_:  # the longest open bucket it can fill
                if chars < CHARS_PER_TOKEN * MIN_FILL * b:
                    continue  # too short to be worth tokenizing for this bucket
                history = _history(tokenizer, turns, int(MIN_FILL * b), cap[b])
                if history is not None:
                    found[b].append(BenchPrompt(f"{NAME}/{label(b)}/{len(found[b])}", label(b), history,
                                                conversation=name))
                    break
    return [p for b in lengths for p in found[b]]


def _groups(ids: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Prompt indices, shortest first, in groups that decode together: rows x widest row <= :data:`BATCH_TOKENS`."""
    out: list[list[int]] = []
    for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
        if out and (len(out[-1]) + 1) * (len(ids[i]) + max_new_tokens) <= BATCH_TOKENS:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _continue_together(verifier, prompts: list[Sequence[int]], max_new_tokens: int, eos: set[int],
                       layers: list[int], bar) -> tuple[list[list[int]], list[torch.Tensor]]:
    """The greedy continuations of ``prompts`` and their aux states ``[T, n_aux * H]`` over prompt + continuation:
    each prompt prefilled alone, then one forward a token for all of them; a row stays until its last token is read."""
    from transformers import DynamicCache

    from eagle3kit.data.generate import right_aligned

    dev, caches, parts, conts = next(verifier.parameters()).device, [], [], []
    for p in prompts:
        caches.append(DynamicCache(config=verifier.config))
        out = verifier(input_ids=torch.tensor([list(p)], device=dev), past_key_values=caches[-1], use_cache=True,
                       output_hidden_states=True, logits_to_keep=1)
        parts.append([aux_hidden_states(out.hidden_states, layers)[0]])
        conts.append([int(out.logits[0, -1].argmax())])
        bar.update()
    cache, mask = right_aligned(caches, max_new_tokens)
    caches.clear()
    pos, reading = torch.tensor([len(p) for p in prompts], device=dev), list(range(len(prompts)))
    while reading:
        mask = torch.cat([mask, mask.new_ones(len(prompts), 1)], dim=1)
        out = verifier(input_ids=torch.tensor([[c[-1]] for c in conts], device=dev), attention_mask=mask,
                       position_ids=pos[:, None], past_key_values=cache, use_cache=True, output_hidden_states=True)
        aux, pos = aux_hidden_states(out.hidden_states, layers), pos + 1
        following = out.logits[:, -1].argmax(-1).tolist()
        for r in list(reading):
            parts[r].append(aux[r])
            if conts[r][-1] in eos or len(conts[r]) == max_new_tokens:
                reading.remove(r)  # its last token's states are read: the row idles until the group ends
            else:
                conts[r].append(following[r])
    return conts, [torch.cat(p) for p in parts]


def continuations_with_states(verifier, ids: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id,
                              aux_layer_ids: Sequence[int], states: VerifierStates, progress: bool = True
                              ) -> list[list[int]]:
    """The verifier's greedy continuation of each prompt (ending with the end token that stops it), and its aux hidden
    states over prompt + continuation kept in ``states`` as the simulation keys them. Each prompt is prefilled alone
    (its first token as batch-1 decoding finds it), then prompts of similar length decode together, one forward a
    token for all (:func:`eagle3kit.data.generate.right_aligned`): where a forward per prompt and token, or a forward
    over each whole sequence after its continuation, would read a long prompt twice."""
    from eagle3kit.data.generate import decoding

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens}).")
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id or [])
    layers, conts = list(aux_layer_ids), [[] for _ in ids]
    with decoding(verifier), tqdm(total=len(ids), desc="long-context prompts", disable=not progress) as bar:
        for group in _groups(ids, max_new_tokens):
            made, aux = _continue_together(verifier, [ids[i] for i in group], max_new_tokens, eos, layers, bar)
            for i, cont, a in zip(group, made, aux, strict=True):
                conts[i] = cont
                states[(tuple(int(t) for t in ids[i]) + tuple(cont), tuple(layers))] = a[None]
    return conts


def score(verifier, drafts: dict, tokenizer, prompts: list[BenchPrompt], max_new_tokens: int, k: int,
          states: VerifierStates | None = None, progress: bool = True) -> tuple[list[list[int]], list[list[int]], dict]:
    """Each named draft's per-prompt records on the set: the verifier's replies and its hidden states in one pass
    (:func:`continuations_with_states`, the first draft's aux layers), then the drafts alone
    (:func:`eagle3kit.evaluate.scores.simulated_scores`). Returns (prompt ids, continuations, {draft: records})."""
    from eagle3kit.evaluate.benchmarks import render
    from eagle3kit.evaluate.scores import simulated_scores

    states = {} if states is None else states
    ids = render(tokenizer, prompts)
    layers = next(iter(drafts.values())).config.eagle_aux_hidden_state_layer_ids
    conts = continuations_with_states(verifier, ids, max_new_tokens, tokenizer.eos_token_id, layers, states, progress)
    return simulated_scores(verifier, tokenizer, drafts, prompts, max_new_tokens, k, progress, conts, ids, states)
