"""The speculative decode loop is lossless (equals greedy decoding), and its τ equals the simulated τ."""

from __future__ import annotations

import pytest
import torch
from speculators.losses import resolve_loss_config
from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
from transformers import DynamicCache

from eagle3kit.data.hidden_states import extract
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate.decode import (
    aux_hidden_states,
    draft_step,
    greedy_generate,
    project_aux,
    speculative_generate,
    to_verifier_ids,
)
from eagle3kit.verifier import load_model, load_tokenizer

TEXTS = ["What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers."]
NEW = 16


@pytest.fixture(scope="module")
def tiny(tiny_verifier):
    model = load_model(tiny_verifier)
    tok = load_tokenizer(tiny_verifier)
    prompts = ev.chat_prompts(tok, TEXTS, len(TEXTS), max_prompt_tokens=12)
    conts = ev.continuations(model, prompts, NEW, tok.eos_token_id, progress=False)
    return model, tok, prompts, conts


def _train_on(model, draft, build, sequences, steps: int, lr: float = 3e-3):
    """A few optimizer steps with speculators' own EAGLE-3 loss on the verifier's hidden states (shifted batch)."""
    loss_config = resolve_loss_config("kl_div", "eager")
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=lr)
    draft.train()
    for step in range(steps):
        seq = sequences[step % len(sequences)]
        states = extract(model, seq, build.aux_layer_ids)  # [1, T, n_aux + 1, hidden]
        t = seq.shape[1] - 1
        _, loss, _ = draft(hidden_states=states[:, :-1, :-1].flatten(2), input_ids=seq[:, 1:],
                           verifier_last_hidden_states=states[:, 1:, -1],
                           document_ids=torch.zeros(1, t, dtype=torch.long),
                           position_ids=torch.arange(1, t + 1)[None], ttt_steps=3, loss_config=loss_config)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return draft.eval()


@pytest.fixture(scope="module")
def trained(tiny):
    """A draft with its own 256-token vocabulary (d2t/t2d), trained briefly on the verifier's greedy outputs."""
    model, tok, prompts, conts = tiny
    sequences = [torch.tensor([p[0].tolist() + c]) for p, c in zip(prompts, conts, strict=True)]
    freq: dict[int, int] = {}
    for s in sequences:
        for t in s[0].tolist():
            freq[t] = freq.get(t, 0) + 1
    build = build_config(verifier="tiny", draft_vocab_size=256, ttt_steps=3)
    d2t, t2d = build_vocab_mappings_from_distribution(freq, 256, build.verifier.text_config.vocab_size)
    torch.manual_seed(0)
    draft = build_model(build, t2d=t2d, d2t=d2t)
    return _train_on(model, draft, build, sequences, steps=12)


@pytest.mark.parametrize("k", [1, 3])
def test_untrained_draft_decodes_exactly_the_greedy_tokens(tiny, k):
    model, tok, prompts, conts = tiny
    torch.manual_seed(1)
    draft = build_model(build_config(verifier="tiny", ttt_steps=3)).eval()
    for prompt, cont in zip(prompts, conts, strict=True):
        res = speculative_generate(model, draft, prompt, NEW, k=k, eos_token_id=tok.eos_token_id)
        assert res.tokens == cont
        assert sum(res.accepted) + res.rounds == len(res.tokens) - 1  # every round: accepted + 1 bonus
        assert all(0 <= a <= k for a in res.accepted)


def test_trained_draft_is_accepted_and_still_lossless(tiny, trained):
    model, tok, prompts, conts = tiny
    assert trained.d2t is not None and bool(trained.d2t.any()), "the draft vocab mapping is used"
    taus = []
    for prompt, cont in zip(prompts, conts, strict=True):
        res = speculative_generate(model, trained, prompt, NEW, k=3, eos_token_id=tok.eos_token_id)
        assert res.tokens == cont == greedy_generate(model, prompt, NEW, tok.eos_token_id)
        taus.append(res.tau)
    assert min(taus) > 1.5, taus  # the draft (through d2t) proposes tokens the verifier accepts


def test_simulated_tau_equals_decode_tau(tiny, trained):
    model, tok, prompts, conts = tiny
    for draft in (trained, build_model(build_config(verifier="tiny")).eval()):
        sim = ev.simulate(model, draft, prompts, conts, 3, progress=False)
        real = ev.decode(model, draft, prompts, conts, 3, tok.eos_token_id, progress=False)
        assert real.lossless == len(prompts)
        assert abs(sim.tau - real.tau) <= 0.05, (sim.tau, real.tau)
        assert sim.walk_tokens == real.tokens and len(sim.walk_accepted) == real.rounds


def test_first_draft_token_matches_the_ttt_forward(tiny, trained):
    """The decode loop's draft (KV cache, verifier aux states) equals speculators' forward at TTT step 0."""
    model, tok, prompts, conts = tiny
    seq = torch.tensor([prompts[0][0].tolist() + conts[0]])
    tf = ev.teacher_forced_draft_tokens(model, trained, seq, 1)[0]
    with torch.no_grad():
        out = model(input_ids=seq, output_hidden_states=True)
        aux = aux_hidden_states(out.hidden_states, trained.config.eagle_aux_hidden_state_layer_ids)
        t = seq.shape[1] - 1
        logits, _ = draft_step(trained, project_aux(trained, aux[:, :-1]), seq[:, 1:],
                               torch.arange(1, t + 1)[None], DynamicCache())
    assert torch.equal(to_verifier_ids(trained, logits[0].argmax(-1)), tf)


def test_flex_attention_draft_is_refused_with_a_fix(tiny):
    model, _tok, prompts, _ = tiny
    draft = build_model(build_config(verifier="tiny", attn_implementation="simple_flex_attention", training=False))
    with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
        speculative_generate(model, draft, prompts[0], 4)


def test_sequences_beyond_the_sliding_window_are_refused(tiny):
    model, _tok, prompts, _ = tiny
    draft = build_model(build_config(verifier="tiny", sliding_window=16))
    with pytest.raises(ValueError, match="sliding window"):
        speculative_generate(model, draft, prompts[0], 8)


@pytest.mark.slow
def test_lossless_with_the_real_smollm2_verifier(smollm2):
    model, tok = load_model(smollm2), load_tokenizer(smollm2)
    torch.manual_seed(0)
    draft = build_model(build_config(verifier="smollm2", draft_vocab_size=None, training=False)).eval()
    prompt = ev.chat_prompts(tok, ["Explain what a hash table is."], 1)[0]
    ref = greedy_generate(model, prompt, 12, tok.eos_token_id)
    res = speculative_generate(model, draft, prompt, 12, k=3, eos_token_id=tok.eos_token_id)
    assert res.tokens == ref and res.rounds == len(ref) - 1 - sum(res.accepted)
