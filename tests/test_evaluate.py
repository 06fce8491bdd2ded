"""Simulated acceptance: counting from draft tokens, per-position rates, τ conventions, prompts, plot."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.figure import Figure

from eagle3kit.cli import main
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model, save_draft
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.verifier import load_model, load_tokenizer


def _perfect(sequence: list[int], k: int) -> torch.Tensor:
    """Draft tokens that always guess right: row i, column j -> token j + 2 + i (0 past the end)."""
    t = len(sequence)
    return torch.tensor([[sequence[j + 2 + i] if j + 2 + i < t else 0 for j in range(t - 1)] for i in range(k)])


def test_a_perfect_draft_commits_k_plus_one_tokens_per_round():
    seq = list(range(100, 120))  # prompt of 5, then 15 generated tokens (the first from the prefill)
    acc = ev.acceptance_of(_perfect(seq, 3), seq, prompt_len=5, k=3)
    assert acc.accept_all == [3] * 12 and acc.tau_all_starts == 4.0
    # walk: starts 6, 10, 14 take 4 tokens each; start 18 has room for 1 draft token + the bonus.
    assert acc.walk_accepted == [3, 3, 3, 1] and acc.walk_tokens == 14 and acc.tau == 3.5
    assert acc.rates()["conditional"].tolist() == [1.0, 1.0, 1.0]
    # per round along the walk, as vLLM counts: the last round had room for one draft token only
    assert acc.walk_rates() == [1.0, 0.75, 0.75] and acc.rates()["cumulative"].tolist() == [1.0, 1.0, 1.0]


def test_the_walks_per_position_rates_add_up_to_its_tau_where_every_starts_do_not():
    """The rates set beside vLLM's counters (rounds) are the walk's: they sum to the walk's τ − 1 (each round commits
    its accepted tokens + 1); the rates over every start position sum to another τ, the all-starts one."""
    seq = list(range(60))
    tokens = _perfect(seq, 3)
    tokens[0, ::4] = -1  # the first draft token is wrong at every fourth start: the walk steps over most of them
    acc = ev.acceptance_of(tokens, seq, prompt_len=10, k=3)
    assert sum(acc.walk_rates()) == pytest.approx(acc.tau - 1, abs=0.02)  # the last round may be cut by the end
    assert abs(1 + acc.rates()["cumulative"].sum() - acc.tau) > 0.3  # every start's: not the walk's τ


def test_a_draft_wrong_at_position_two_is_counted_so():
    seq = list(range(50))
    tokens = _perfect(seq, 3)
    tokens[1] = -1  # every second draft token is wrong
    acc = ev.acceptance_of(tokens, seq, prompt_len=10, k=3)
    assert set(acc.accept_all) == {1} and acc.tau_all_starts == 2.0
    rates = acc.rates()
    assert rates["cumulative"].tolist() == [1.0, 0.0, 0.0]
    assert rates["conditional"].tolist()[:2] == [1.0, 0.0] and rates["conditional"].isna().iloc[2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=8, max_size=40), st.integers(1, 5), st.integers(1, 4),
       st.randoms(use_true_random=False))
def test_walk_invariants(sequence, prompt_len, k, rnd):
    prompt_len = min(prompt_len, len(sequence) - 2)
    tokens = torch.tensor([[rnd.randint(0, 3) for _ in range(len(sequence) - 1)] for _ in range(k)])
    acc = ev.acceptance_of(tokens, sequence, prompt_len, k)
    assert acc.walk_tokens == len(sequence) - prompt_len - 1  # every generated token after the first, once
    assert 1.0 <= acc.tau <= k + 1
    cumulative = acc.rates()["cumulative"].dropna().tolist()
    assert cumulative == sorted(cumulative, reverse=True)
    if acc.accept_all:
        assert acc.tau_all_starts == pytest.approx(1 + sum(cumulative))


def test_chat_prompts_reads_sharegpt_messages_and_strings(tiny_verifier):
    tok = load_tokenizer(tiny_verifier)
    convs = [
        {"conversations": [{"from": "human", "value": "Hello there"}, {"from": "gpt", "value": "Hi"}]},
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour"}],
        "A plain prompt " * 50,
        [{"role": "assistant", "content": "no user turn"}],
    ]
    prompts = ev.chat_prompts(tok, convs, 10, max_prompt_tokens=8)
    assert len(prompts) == 3
    texts = [tok.decode(p[0]) for p in prompts]
    assert "Hello there" in texts[0] and "Name a colour" in texts[1]
    assert all(t.rstrip().endswith("assistant") for t in texts)  # generation prompt added
    with pytest.raises(ValueError, match="user turn"):
        ev.chat_prompts(tok, [[{"role": "assistant", "content": "x"}]], 1)


def test_simulate_on_the_tiny_verifier(tiny_verifier):
    model, tok = load_model(tiny_verifier), load_tokenizer(tiny_verifier)
    torch.manual_seed(0)
    draft = build_model(build_config(verifier="tiny")).eval()
    prompts = ev.chat_prompts(tok, ["Tell me a story.", "Count to ten."], 2, max_prompt_tokens=8)
    conts = ev.continuations(model, prompts, 10, tok.eos_token_id, progress=False)
    seq = torch.tensor([prompts[0][0].tolist() + conts[0]])
    assert ev.teacher_forced_draft_tokens(model, draft, seq, 4).shape == (4, seq.shape[1] - 1)
    acc = ev.simulate(model, draft, prompts, conts, 3, progress=False)
    assert acc.walk_tokens == sum(len(c) - 1 for c in conts)
    assert 1.0 <= acc.tau <= 4.0
    table = ev.summary_table({"untrained": acc})
    assert list(table.columns[:3]) == ["draft", "tau_simulated", "tau_all_starts"]
    assert {"acc_1", "acc_2", "acc_3"} <= set(table.columns)
    fig = ev.plot_acceptance({"untrained": acc, "again": acc})
    assert isinstance(fig, Figure) and len(fig.axes[0].patches) == 6
    rates = acc.rates()["conditional"].tolist() * 2  # every bar labelled with its rate: a rate of 0 shows as "0"
    assert [t.get_text() for t in fig.axes[0].texts] == [ev.rate_label(r) for r in rates]
    assert [ev.rate_label(r) for r in (0.0, 0.234, float("nan"))] == ["0", "0.23", "n/a"]


def test_cli_evaluate_prints_tau_for_an_exported_and_an_untrained_draft(tmp_path, capsys):
    torch.manual_seed(0)
    out = save_draft(build_model(build_config(verifier="tiny", ttt_steps=2)), tmp_path / "draft")
    code = main(["evaluate", "--draft", str(out), "--untrained", "--prompt", "Say hi", "--n-prompts", "1",
                 "--max-new-tokens", "6"])
    text = capsys.readouterr().out
    assert code == 0 and "untrained" in text and str(out) in text and "tau_decode" in text and "k = 2" in text
    assert main(["evaluate", "--prompt", "x"]) == 2  # nothing to evaluate: one clear sentence, exit 2
    assert "--draft DIR" in capsys.readouterr().err
