"""Batched greedy decoding: equal to batch-1 greedy ``generate`` per prompt, rows stop on their own, clear errors."""

from __future__ import annotations

import pytest
import torch

from eagle3kit.data.generate import greedy_batch, greedy_replies
from eagle3kit.verifier import load_model, load_tokenizer

PROMPTS = ["Hi", "What is the capital of France? Answer in one long sentence please.", "Write a haiku about rain.",
           "List three prime numbers.", "Explain KV caches to a child, step by step, with an example."]


@pytest.fixture(scope="module")
def tiny(tiny_verifier):
    tok = load_tokenizer(tiny_verifier)
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"] for p in PROMPTS]
    return load_model(tiny_verifier), prompts


def _batch1(model, prompt: list[int], n: int, eos: int) -> list[int]:
    """transformers' own greedy decoding of one prompt (no padding), cut before the first ``eos``."""
    with torch.no_grad():
        mask = torch.ones(1, len(prompt), dtype=torch.long)
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=mask,
                             max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=eos)[0, len(prompt):]
    out = out.tolist()
    return out[: out.index(eos)] if eos in out else out


@pytest.mark.parametrize("batch_size", [5, 2])  # 2: rows end and waiting prompts join a running batch
def test_batched_equals_batch1_greedy(tiny, batch_size):
    model, prompts = tiny
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    eos = 2
    want = [_batch1(model, p, 12, eos) for p in prompts]
    assert greedy_batch(model, prompts, 12, eos, batch_size=batch_size) == want
    assert model.config._attn_implementation == "sdpa"  # the GQA attention is switched back afterwards


def test_a_row_that_ends_early_stops_alone(tiny):
    model, prompts = tiny
    n = 10
    free = greedy_batch(model, prompts, n, eos_token_id=-1)  # -1 never appears: every row runs to n
    assert all(len(r) == n for r in free)
    # an end token that prompt 0 emits at step 3, then each row must equal its own batch-1 reply cut at that token
    stop = free[0][3]
    want = [_batch1(model, p, n, stop) for p in prompts]
    assert want[0] == free[0][: free[0].index(stop)] and len(want[0]) <= 3
    assert any(len(w) == n for w in want)  # some row does not stop and runs on after row 0 left the batch
    assert greedy_batch(model, prompts, n, eos_token_id=[stop, -1]) == want
    assert greedy_batch(model, prompts, n, eos_token_id=[stop, -1], batch_size=2) == want
    assert greedy_batch(model, prompts, 1, eos_token_id=-1) == [r[:1] for r in free]
    # keep_eos: the end token stays, as transformers' generate writes it (eagle3kit.evaluate's continuations)
    kept = greedy_batch(model, prompts, n, eos_token_id=[stop, -1], batch_size=2, keep_eos=True)
    assert kept == [w + [stop] if len(w) < n else w for w in want] and kept != want


def test_bad_input_is_a_clear_error(tiny):
    model, prompts = tiny
    with pytest.raises(ValueError, match="No prompts"):
        greedy_batch(model, [], 8, 2)
    with pytest.raises(ValueError, match="max_new_tokens and batch_size must be >= 1"):
        greedy_batch(model, prompts, 0, 2)
    with pytest.raises(ValueError, match="A prompt is empty"):
        greedy_batch(model, [prompts[0], []], 8, 2)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        greedy_replies(model, prompts, 8, 2, batch_size=0)  # raised at the call, not at the first next()
