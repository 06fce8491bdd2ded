"""Chain speculative decoding (greedy) with an HF verifier and speculators' ``Eagle3DraftModel``.

The draft is run the way vLLM runs an EAGLE-3 draft, and the way speculators trains it (``Eagle3DraftModel.forward``):

* Position ``j`` of the draft reads the verifier's aux hidden states of token ``j`` (HF ``output_hidden_states[i]``
  for aux layer id ``i``, concatenated, through ``input_norm``/``fc``) and the embedding of token ``j + 1`` (tokens
  shifted by one), at RoPE position ``j + 1``; its output predicts token ``j + 2``. These "step 0" positions stay in
  the draft's KV cache across rounds.
* Draft tokens 2..k are autoregressive: the input is the previous draft token (mapped to verifier ids with ``d2t``:
  target id = ``i + d2t[i]``) and the draft's *own* output hidden state; each attends to the whole prefix plus the
  earlier draft tokens of this round (the TTT mask's diagonal). They are dropped from the cache after the round.
* One verifier forward over ``[last token, d1..dk]`` verifies the round: accept the longest prefix that equals the
  verifier's greedy choice, then add the verifier's own next token (the bonus). The verifier's KV cache is cropped to
  the accepted tokens, and their aux hidden states feed the draft in the next round.

The output equals plain greedy decoding token for token (up to floating-point ties); draft quality only changes τ.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class DecodeResult:
    """Tokens generated after the prompt and what each speculative round accepted."""

    tokens: list[int]
    accepted: list[int] = field(default_factory=list)  # draft tokens accepted per round (0..k)
    k: int = 0

    @property
    def rounds(self) -> int:
        return len(self.accepted)

    @property
    def tau(self) -> float:
        """Mean tokens per speculative round (accepted draft tokens + the bonus token), as the EAGLE papers count.

        The first token comes from the prompt's prefill forward and is not part of any round.
        """
        return (len(self.tokens) - 1) / self.rounds if self.rounds else float("nan")


def aux_hidden_states(hidden_states: tuple[torch.Tensor, ...], aux_layer_ids: list[int]) -> torch.Tensor:
    """Concatenate HF ``output_hidden_states[i]`` (the input of decoder layer ``i``) for each aux layer id."""
    return torch.cat([hidden_states[i] for i in aux_layer_ids], dim=-1)


def to_verifier_ids(draft, draft_ids: torch.Tensor) -> torch.Tensor:
    """Draft-vocab ids -> verifier ids through speculators' ``d2t`` offsets (identity without a draft vocab)."""
    d2t = getattr(draft, "d2t", None)
    return draft_ids if d2t is None else draft_ids + d2t.to(draft_ids.device)[draft_ids]


def _dense_mask(draft, q_len: int, kv_len: int, device) -> torch.Tensor | None:
    """Causal mask for ``q_len`` new queries after ``kv_len - q_len`` cached keys, in the layer's mask format."""
    if q_len == 1:
        return None  # one query sees the whole cache
    offset = kv_len - q_len
    allowed = torch.arange(kv_len, device=device)[None, :] <= offset + torch.arange(q_len, device=device)[:, None]
    if draft._attn_impl == "eager":  # noqa: SLF001  additive float mask
        return torch.zeros(q_len, kv_len, device=device).masked_fill(~allowed, float("-inf"))[None, None]
    return allowed[None, None]  # sdpa: boolean, True = attend


def project_aux(draft, aux: torch.Tensor) -> torch.Tensor:
    """The draft's input projection of verifier aux states (``input_norm`` / ``fc_norm`` then ``fc``)."""
    if draft.input_norm is not None:
        aux = draft.input_norm(aux)
    if draft.fc_norm is not None:
        chunks = aux.chunk(len(draft.fc_norm), dim=-1)
        aux = torch.cat([norm(c) for norm, c in zip(draft.fc_norm, chunks, strict=True)], dim=-1)
    return draft.fc(aux)


def draft_step(draft, hidden: torch.Tensor, input_ids: torch.Tensor, position_ids: torch.Tensor,
               cache: DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass of the draft's decoder over new positions, appending to ``cache``.

    ``hidden`` is the projected aux state (step 0) or the draft's own previous output. Returns ``(logits over the
    draft vocab, hidden state to feed back)`` exactly as ``Eagle3DraftModel.forward`` computes them per TTT step.
    """
    past = cache.get_seq_length()
    q_len = input_ids.shape[1]
    x = torch.cat([draft.embed_tokens(input_ids), hidden], dim=-1)
    position_embeddings = draft.rotary_emb(x, position_ids)
    cache_position = torch.arange(past, past + q_len, device=x.device)
    mask = _dense_mask(draft, q_len, past + q_len, x.device)
    for layer in draft.layers:
        x = layer(x, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                  cache_position=cache_position, position_embeddings=position_embeddings)
    if draft.config.norm_output:
        x = draft.norm(x)
        return draft.lm_head(x), x
    return draft.lm_head(draft.norm(x)), x


def _check(draft, k: int, length: int) -> None:
    if draft._attn_impl not in ("sdpa", "eager"):  # noqa: SLF001
        raise ValueError(
            f"The draft uses attn_implementation={draft._attn_impl!r}; the decode loop needs a dense mask: build "  # noqa: SLF001
            "it with attn_implementation='sdpa' (or 'eager') for decoding on CPU."
        )
    if k < 1:
        raise ValueError(f"k={k}: propose at least one draft token per round.")
    window = getattr(draft, "sliding_window", None)
    if draft.uses_sliding_window_attn and window and length + k > window:
        raise ValueError(
            f"Prompt + new tokens ({length}) exceed the draft's sliding window ({window}); this decode loop uses a "
            "causal mask without a window: use shorter prompts or fewer new tokens."
        )


@torch.no_grad()
def speculative_generate(verifier, draft, input_ids: torch.Tensor, max_new_tokens: int, k: int = 3,
                         eos_token_id: int | list[int] | None = None) -> DecodeResult:
    """Greedy chain speculative decoding of ``input_ids`` ([1, P]) for up to ``max_new_tokens`` tokens."""
    _check(draft, k, input_ids.shape[1] + max_new_tokens)
    aux_ids = list(draft.config.eagle_aux_hidden_state_layer_ids)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id or [])
    device = next(draft.parameters()).device
    ids = input_ids.to(device)
    seq = ids[0].tolist()
    result = DecodeResult([], k=k)

    # Prefill: the verifier reads the prompt; its greedy choice is the first token (not a speculative round).
    vcache = DynamicCache()
    out = verifier(input_ids=ids, past_key_values=vcache, use_cache=True, output_hidden_states=True)
    pending_aux = aux_hidden_states(out.hidden_states, aux_ids)  # aux states the draft has not read yet
    seq.append(int(out.logits[0, -1].argmax()))
    result.tokens.append(seq[-1])
    dcache = DynamicCache()

    while len(result.tokens) < max_new_tokens and seq[-1] not in eos:
        # 1) Draft, step 0: positions m..L-2 read verifier aux states of token j and the embedding of token j+1.
        m, n = dcache.get_seq_length(), len(seq)
        tokens = torch.tensor([seq[m + 1:n]], device=device)
        positions = torch.arange(m + 1, n, device=device)[None]
        logits, hidden = draft_step(draft, project_aux(draft, pending_aux), tokens, positions, dcache)
        drafts = [int(to_verifier_ids(draft, logits[:, -1].argmax(-1)))]
        hidden = hidden[:, -1:]
        # 2) Draft tokens 2..k: the previous draft token and the draft's own hidden state, one position further.
        for i in range(1, k):
            logits, hidden = draft_step(draft, hidden, torch.tensor([[drafts[-1]]], device=device),
                                        torch.tensor([[n - 1 + i]], device=device), dcache)
            drafts.append(int(to_verifier_ids(draft, logits[:, -1].argmax(-1))))
        dcache.crop(-(k - 1))  # keep only the step-0 positions (the verifier-fed prefix)

        # 3) Verify: one verifier forward over the last committed token and the k draft tokens.
        block = torch.tensor([[seq[-1], *drafts]], device=device)
        out = verifier(input_ids=block, past_key_values=vcache, use_cache=True, output_hidden_states=True)
        greedy = out.logits[0].argmax(-1).tolist()  # greedy[i]: the verifier's choice after block[:i+1]
        accepted = 0
        while accepted < k and drafts[accepted] == greedy[accepted]:
            accepted += 1
        new = greedy[: accepted + 1]  # accepted draft tokens (equal to greedy) + the bonus token
        budget = max_new_tokens - len(result.tokens)
        new = new[:budget]
        for j, tok in enumerate(new):  # stop at end-of-sequence
            if tok in eos:
                new = new[: j + 1]
                break
        result.accepted.append(len(new) - 1)
        seq.extend(new)
        result.tokens.extend(new)
        # 4) Keep the verifier cache for the committed tokens only; their aux states feed the next draft round.
        vcache.crop(-(k + 1 - len(new)))
        pending_aux = aux_hidden_states(out.hidden_states, aux_ids)[:, : len(new)]
    return result


@torch.no_grad()
def greedy_generate(verifier, input_ids: torch.Tensor, max_new_tokens: int,
                    eos_token_id: int | list[int] | None = None) -> list[int]:
    """Plain greedy decoding with transformers' ``generate`` (the reference the decode loop must equal)."""
    out = verifier.generate(input_ids=input_ids, max_new_tokens=max_new_tokens, do_sample=False,
                            eos_token_id=eos_token_id, pad_token_id=eos_token_id if isinstance(eos_token_id, int)
                            else None, min_new_tokens=0)
    return out[0, input_ids.shape[1]:].tolist()
