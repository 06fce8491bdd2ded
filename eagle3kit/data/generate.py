"""Batched greedy decoding: many prompts per forward, each row stopping on its own.

``greedy_batch`` writes the verifier's greedy continuation of each prompt with one forward per new token for the
whole batch: prompts are left-padded, positions follow each row's own tokens (cumsum of the mask - 1), keys and values
live in a preallocated cache, and a row that emits an end token leaves the batch (its cache rows are dropped, and
padding columns no remaining row needs are cut off), so finished rows cost nothing afterwards. The result equals
batch-1 greedy ``model.generate`` except where two logits tie to floating-point precision (see ``bench/regenerate.py``).
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
    """transformers' sdpa attention without copying the key/value heads for grouped queries (``enable_gqa``).

    transformers repeats the cached keys and values (3 -> 9 heads for SmolLM2) at every step when a padding mask is
    present; that copy of the whole cache was ~1/3 of a decode step at batch 16 on CPU."""
    causal = query.shape[2] > 1 and attention_mask is None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(_SDPA_GQA, _sdpa_gqa)
ALL_MASK_ATTENTION_FUNCTIONS.register(_SDPA_GQA, sdpa_mask)


@contextmanager
def _gqa_attention(model) -> Iterator[None]:
    """Use :func:`_sdpa_gqa` while inside when the model runs transformers' ``sdpa`` (restored afterwards)."""
    before = model.config._attn_implementation
    if before != "sdpa":
        yield
        return
    model.config._attn_implementation = _SDPA_GQA
    try:
        yield
    finally:
        model.config._attn_implementation = before


class _BufferLayer(DynamicLayer):
    """A cache layer that writes into a buffer allocated once (``capacity`` positions), not ``torch.cat`` per step."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            b, h, _, d = key_states.shape
            self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
            self.k_buf = key_states.new_empty(b, h, self.capacity, d)
            self.v_buf = value_states.new_empty(b, h, self.capacity, d)
            self.length = 0
        end = self.length + key_states.shape[-2]
        if end > self.k_buf.shape[-2]:
            raise RuntimeError(f"cache capacity {self.k_buf.shape[-2]} exceeded ({end} positions)")
        self.k_buf[:, :, self.length:end] = key_states
        self.v_buf[:, :, self.length:end] = value_states
        self.length = end
        self.keys, self.values = self.k_buf[:, :, :end], self.v_buf[:, :, :end]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.k_buf, self.v_buf = self.k_buf[indices], self.v_buf[indices]
        self.keys, self.values = self.k_buf[:, :, :self.length], self.v_buf[:, :, :self.length]

    def drop_front(self, n: int) -> None:
        """Forget the first ``n`` positions (padding that no remaining row attends to)."""
        self.k_buf, self.v_buf, self.length = self.k_buf[:, :, n:], self.v_buf[:, :, n:], self.length - n
        self.keys, self.values = self.k_buf[:, :, :self.length], self.v_buf[:, :, :self.length]


def _check(prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    if len(prompts) == 0:
        raise ValueError("greedy_batch got no prompts; pass a non-empty list of token-id lists.")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("greedy_batch got an empty prompt; every prompt needs at least one token id.")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens}).")


def greedy_batch(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 eos_token_id: int | Sequence[int], pad_token_id: int | None = None) -> list[list[int]]:
    """Greedy continuation of each prompt (token ids), cut before its first end token; one batch, in input order.

    A row stops at an id in ``eos_token_id`` (not included in its result) or after ``max_new_tokens`` ids."""
    _check(prompts, max_new_tokens)
    with torch.inference_mode(), _gqa_attention(model):
        return _greedy(model, prompts, max_new_tokens, eos_token_id, pad_token_id)


def _greedy(model, prompts: Sequence[Sequence[int]], max_new_tokens: int, eos_token_id: int | Sequence[int],
            pad_token_id: int | None) -> list[list[int]]:
    eos = torch.tensor([eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id))
    pad = 0 if pad_token_id is None else pad_token_id  # masked out: any valid id
    device = model.device
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    cache = DynamicCache()
    n_layers = model.config.get_text_config().num_hidden_layers
    cache.layers = [_BufferLayer(width + max_new_tokens) for _ in range(n_layers)]
    eos = eos.to(device)
    rows = list(range(len(prompts)))  # the prompt index of each row still in the batch
    out: list[list[int]] = [[] for _ in prompts]
    pos = torch.tensor([len(p) for p in prompts], device=device)  # position of each row's next token
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    for step in range(max_new_tokens):
        tok = logits.argmax(-1)
        done = torch.isin(tok, eos)
        for r, t, d in zip(rows, tok.tolist(), done.tolist(), strict=True):
            if not d:
                out[r].append(t)
        if step == max_new_tokens - 1:
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            rows = [rows[i] for i in keep.tolist()]
            cache.batch_select_indices(keep)
            tok, pos, mask = tok[keep], pos[keep], mask[keep]
            front = int(mask.any(0).int().argmax())  # leading columns that are padding in every remaining row
            if front:
                mask = mask[:, front:]
                for layer in cache.layers:
                    layer.drop_front(front)
        mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
        logits = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos[:, None],
                       past_key_values=cache, use_cache=True).logits[:, -1]
        pos = pos + 1
    return out
