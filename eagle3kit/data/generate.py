"""Batched greedy decoding: many replies per forward, each row stopping on its own, new prompts joining as rows end.

:func:`greedy_replies` decodes up to ``batch_size`` prompts together, one forward per new token for all of them. Each
prompt is prefilled alone (no padding: its first token comes from exactly the forward batch-1 decoding runs) and its
keys and values join a right-aligned cache (left padding, masked; each row keeps its own positions). A row that emits
an end token or reaches ``max_new_tokens`` leaves at once (its cache rows, and the padding columns no remaining row
needs, are dropped) and waiting prompts take the free places. Prompts are taken shortest first, so rows that decode
together have similar lengths. Replies equal batch-1 greedy ``generate`` except where two logits tie to floating-point
precision: batched matrix products round differently (``bench/regenerate.py`` measures the agreement).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

_SDPA_GQA = "eagle3kit_sdpa_gqa"


def _sdpa_gqa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' sdpa attention without copying key/value heads for grouped queries (``enable_gqa``).

    With a padding mask transformers repeats the cached keys and values (3 -> 9 heads for SmolLM2) at every step; that
    copy of the whole cache was ~1/3 of a decode step at batch 16 on CPU."""
    causal = query.shape[2] > 1 and attention_mask is None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(_SDPA_GQA, _sdpa_gqa)
ALL_MASK_ATTENTION_FUNCTIONS.register(_SDPA_GQA, sdpa_mask)


@contextmanager
def decoding(model) -> Iterator[None]:
    """Inference mode, and :func:`_sdpa_gqa` in place of the model's ``sdpa`` attention (restored on exit)."""
    before = model.config._attn_implementation
    with torch.inference_mode():
        if before == "sdpa":
            model.config._attn_implementation = _SDPA_GQA
        try:
            yield
        finally:
            model.config._attn_implementation = before


class _BufferLayer(DynamicLayer):
    """A cache layer over buffers allocated up front: a step writes one column instead of ``torch.cat``-ing all."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._set(keys, values, length)

    def _set(self, k_buf: torch.Tensor, v_buf: torch.Tensor, length: int) -> None:
        self.k_buf, self.v_buf, self.length = k_buf, v_buf, length
        self.keys, self.values = k_buf[:, :, :length], v_buf[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.k_buf[:, :, self.length:end] = key_states
        self.v_buf[:, :, self.length:end] = value_states
        self._set(self.k_buf, self.v_buf, end)
        return self.keys, self.values

    def select(self, rows: torch.Tensor, front: int) -> None:
        """Keep ``rows`` and drop the first ``front`` columns (padding that no kept row attends to)."""
        self._set(self.k_buf[rows, :, front:], self.v_buf[rows, :, front:], self.length - front)


def right_aligned(caches: Sequence[DynamicCache], room: int) -> tuple[DynamicCache, torch.Tensor]:
    """Prompts prefilled alone (batch-1 ``caches``) as the rows of one cache, right-aligned (left padding) in buffers
    with ``room`` free columns, and its attention mask (1: a token of the row)."""
    lengths = [c.get_seq_length() for c in caches]
    width = max(lengths)
    layers = []
    for j, first in enumerate(caches[0].layers):
        shape = (len(caches), first.keys.shape[1], width + room, first.keys.shape[3])
        k, v = first.keys.new_zeros(shape), first.keys.new_zeros(shape)
        for r, (c, n) in enumerate(zip(caches, lengths, strict=True)):
            k[r, :, width - n:width], v[r, :, width - n:width] = c.layers[j].keys[0], c.layers[j].values[0]
        layers.append(_BufferLayer(k, v, width))
    mask = torch.zeros(len(caches), width, dtype=torch.long, device=caches[0].layers[0].keys.device)
    for r, n in enumerate(lengths):
        mask[r, width - n:] = 1
    cache = DynamicCache()
    cache.layers = layers
    return cache, mask


class _Batch:
    """The rows being decoded: right-aligned cache, attention mask, next position and reply of each row."""

    def __init__(self, model, max_new_tokens: int, eos: set[int], keep_eos: bool = False):
        self.model, self.max_new_tokens, self.eos, self.keep_eos = model, max_new_tokens, eos, keep_eos
        self.index: list[int] = []  # prompt index of each row
        self.replies: list[list[int]] = []
        self.layers: list[_BufferLayer] = []
        self.mask = torch.zeros(0, 0, dtype=torch.long, device=model.device)
        self.pos = torch.zeros(0, dtype=torch.long, device=model.device)

    def __len__(self) -> int:
        return len(self.index)

    def admit(self, items: list[tuple[int, Sequence[int]]]) -> list[tuple[int, list[int]]]:
        """Prefill each prompt alone and add it as a row; returns the replies already finished by the first token."""
        model, dev, done, new = self.model, self.model.device, [], []
        for i, prompt in items:
            cache = DynamicCache(config=model.config)
            logits = model(input_ids=torch.tensor([list(prompt)], device=dev), past_key_values=cache,
                           use_cache=True, logits_to_keep=1).logits
            first = int(logits[0, -1].argmax())
            if first in self.eos or self.max_new_tokens == 1:
                done.append((i, [] if first in self.eos and not self.keep_eos else [first]))
            else:
                new.append((i, first, cache))
        if not new:
            return done
        old, width = len(self), self.mask.shape[1]
        new_width = max([width] + [c.get_seq_length() for _, _, c in new])
        mask = self.mask.new_zeros(old + len(new), new_width)
        mask[:old, new_width - width:] = self.mask
        for r, (_, _, c) in enumerate(new, old):
            mask[r, new_width - c.get_seq_length():] = 1
        layers = []
        for j in range(len(new[0][2].layers)):
            k0 = new[0][2].layers[j].keys
            shape = (old + len(new), k0.shape[1], new_width + self.max_new_tokens, k0.shape[3])
            k, v = k0.new_zeros(shape), k0.new_zeros(shape)
            if old:
                k[:old, :, new_width - width:new_width] = self.layers[j].keys
                v[:old, :, new_width - width:new_width] = self.layers[j].values
            for r, (_, _, c) in enumerate(new, old):
                n = c.get_seq_length()
                k[r, :, new_width - n:new_width] = c.layers[j].keys[0]
                v[r, :, new_width - n:new_width] = c.layers[j].values[0]
            layers.append(_BufferLayer(k, v, new_width))
        self.layers, self.mask = layers, mask
        self.pos = torch.cat([self.pos, torch.tensor([c.get_seq_length() for _, _, c in new], device=dev)])
        self.index += [i for i, _, _ in new]
        self.replies += [[t] for _, t, _ in new]
        return done

    def step(self) -> list[tuple[int, list[int]]]:
        """One forward for every row; returns the replies that ended, and drops their rows."""
        tok = torch.tensor([r[-1] for r in self.replies], device=self.mask.device)
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self), 1)], dim=1)
        cache = DynamicCache()
        cache.layers = self.layers
        logits = self.model(input_ids=tok[:, None], attention_mask=self.mask, position_ids=self.pos[:, None],
                            past_key_values=cache, use_cache=True).logits
        self.pos = self.pos + 1
        done, keep = [], []
        for r, t in enumerate(logits[:, -1].argmax(-1).tolist()):
            if t not in self.eos or self.keep_eos:
                self.replies[r].append(t)
            if t in self.eos or len(self.replies[r]) == self.max_new_tokens:
                done.append((self.index[r], self.replies[r]))
            else:
                keep.append(r)
        if done:
            rows = torch.tensor(keep, dtype=torch.long, device=self.mask.device)
            self.index, self.replies = [self.index[r] for r in keep], [self.replies[r] for r in keep]
            self.mask, self.pos = self.mask[rows], self.pos[rows]
            front = int(self.mask.any(0).int().argmax()) if keep else 0  # padding columns no kept row needs
            self.mask = self.mask[:, front:]
            for layer in self.layers:
                layer.select(rows, front)
        return done


def greedy_replies(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id: int | Sequence[int],
                   batch_size: int = 32, keep_eos: bool = False) -> Iterator[tuple[int, list[int]]]:
    """Yield ``(prompt index, reply token ids)`` as each greedy reply finishes (in no fixed order).

    A reply ends at the first id in ``eos_token_id`` (left out unless ``keep_eos``, as ``generate`` keeps it) or
    after ``max_new_tokens`` ids. Up to
    ``batch_size`` rows decode together; a place that frees up is refilled once a quarter of the batch is free."""
    _check(prompts, max_new_tokens, batch_size)
    return _replies(model, prompts, max_new_tokens,
                    {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id), batch_size, keep_eos)


def _check(prompts: Sequence[Sequence[int]], max_new_tokens: int, batch_size: int) -> None:
    if len(prompts) == 0:
        raise ValueError("No prompts to generate from; pass a non-empty list of token-id lists.")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("A prompt is empty; every prompt needs at least one token id.")
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(f"max_new_tokens and batch_size must be >= 1 (got {max_new_tokens} and {batch_size}).")


def _replies(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos: set[int],
             batch_size: int, keep_eos: bool) -> Iterator[tuple[int, list[int]]]:
    waiting = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)  # pop() = shortest
    batch = _Batch(model, max_new_tokens, eos, keep_eos)
    while waiting or len(batch):
        free = batch_size - len(batch)
        if waiting and (free >= max(1, batch_size // 4) or not len(batch)):
            take = [waiting.pop() for _ in range(min(free, len(waiting)))]
            with decoding(model):
                finished = batch.admit([(i, prompts[i]) for i in take])
            yield from finished
        if len(batch):
            with decoding(model):
                finished = batch.step()
            yield from finished


def greedy_batch(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id: int | Sequence[int],
                 batch_size: int = 32, keep_eos: bool = False) -> list[list[int]]:
    """The greedy reply of each prompt (see :func:`greedy_replies`), in the prompts' order."""
    out: list[list[int]] = [[] for _ in prompts]
    for i, reply in greedy_replies(model, prompts, max_new_tokens, eos_token_id, batch_size, keep_eos):
        out[i] = reply
    return out
