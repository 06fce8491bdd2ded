"""τ against context length: the long-context set (held-out histories at fixed lengths), the verifier's replies and
hidden states in one pass, the curve per bucket with intervals, and the fall past the training length."""

from __future__ import annotations

import pytest
import torch
from matplotlib.figure import Figure

from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model, save_draft
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate import context_curve, long_context
from eagle3kit.evaluate.benchmarks import render, template_ids
from eagle3kit.evaluate.scores import PromptScore, read_sets
from eagle3kit.verifier import load_model, load_tokenizer


def test_buckets_end_at_the_verifiers_limit_and_read_back():
    assert long_context.buckets(8192) == [256, 1024, 2048, 4096, 8192]
    assert long_context.buckets(3000) == [256, 1024, 2048, 3000]
    assert [context_curve.bucket_length(long_context.label(b)) for b in (256, 1024, 3000, 8192)] == [256, 1024, 3000,
                                                                                                     8192]


def test_the_order_read_from_its_end_is_the_seeded_order_backwards():
    chats = [[{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}" if i % 7 else ""}]
             for i in range(40)]
    counts: dict = {}
    backwards = list(conv.ordered(chats, 3, counts, from_end=True))
    assert backwards == list(reversed(list(conv.ordered(chats, 3)))) and len(backwards) == 34
    assert counts["skipped_unusable"] == 6  # the empty replies, counted either way


@pytest.fixture(scope="module")
def tok(tiny_verifier):
    return load_tokenizer(tiny_verifier)


@pytest.fixture(scope="module")
def held_out(tok):
    return long_context.long_context_set(tok, 8192, 2)


def test_each_prompt_is_a_history_of_its_length_ending_with_a_user_turn(held_out, tok):
    assert [p.category for p in held_out] == ["256"] * 2 + ["1k"] * 2 + ["2k"] * 2 + ["4k"] * 2 + ["8k"] * 2
    for p in held_out:
        n, length = len(template_ids(tok, p.messages)), context_curve.bucket_length(p.category)
        assert long_context.MIN_FILL * length <= n <= min(length, 8192 - long_context.REPLY_ROOM), (p.id, n)
        assert p.messages[-1]["role"] == "user"
    assert any(len(p.messages) > 2 for p in held_out)  # multi-turn histories, not only long single requests
    assert len({long_context.key(p.messages[0]["content"]) for p in held_out}) == len(held_out)  # one per conversation
    assert len({p.conversation for p in held_out}) == len(held_out)


def test_no_prompt_comes_from_a_conversation_the_data_trained_on(held_out, tok, tiny_data):
    trained = long_context.training_prompts(tiny_data)
    assert len(trained) == 12  # tiny_data: 12 training conversations (its 2 held out are drawn beside them)
    first_user = [next(t["content"] for t in p.messages if t["role"] == "user") for p in held_out]
    assert not trained & {long_context.key(t) for t in first_user}
    assert not trained & {p.conversation for p in held_out}  # the uncut turns, where a cut one may not match


def test_told_to_leave_out_the_conversations_it_drew_it_draws_others_and_keeps_the_rest(held_out, tok):
    """Excluded by their ``conversation`` (the key of the uncut first user turn: a drawn prompt's own turn may be cut
    at its front, held_out's 256-token ones are), the two conversations of the shortest bucket do not come back and
    others fill it; every other bucket draws exactly what it drew before."""
    left_out = {p.conversation for p in held_out[:2]}
    assert len(left_out) == 2 and any(long_context.key(p.messages[0]["content"]) not in left_out for p in held_out[:2])
    again = long_context.long_context_set(tok, 8192, 2, exclude=left_out)
    assert not left_out & {p.conversation for p in again}
    first_user = [next(t["content"] for t in p.messages if t["role"] == "user") for p in held_out]
    drawn = {long_context.key(next(t["content"] for t in p.messages if t["role"] == "user")) for p in again[:2]}
    assert drawn.isdisjoint({long_context.key(t) for t in first_user[:2]})
    assert [p.category for p in again] == [p.category for p in held_out]
    assert again[2:] == held_out[2:]  # exclusion leaves the conversations it was not told about


def test_one_pass_replies_and_states_equal_the_simulations_own(tiny_verifier, tok, held_out):
    model = load_model(tiny_verifier)
    prompts = held_out[:1] + held_out[2:3]
    ids = render(tok, prompts)
    layers = [2, 4, 5]
    states: dict = {}
    conts = long_context.continuations_with_states(model, ids, 12, tok.eos_token_id, layers, states, progress=False)
    assert conts == ev.continuations(model, [torch.tensor([i]) for i in ids], 12, tok.eos_token_id, progress=False)
    for prompt, cont in zip(ids, conts, strict=True):
        seq = torch.tensor([prompt + cont])
        with torch.no_grad():
            full = ev.aux_hidden_states(model(input_ids=seq, output_hidden_states=True).hidden_states, layers)
        kept = states[(tuple(prompt + cont), tuple(layers))]
        assert kept.shape == full.shape and torch.allclose(kept, full, atol=1e-5)


def _records(taus: dict[str, list[float]]) -> list[PromptScore]:
    """Per bucket, prompts of 10 rounds whose accepted tokens give the τ listed."""
    return [PromptScore(f"p{b}{i}", b, 10, round((t - 1) * 10)) for b, ts in taus.items() for i, t in enumerate(ts)]


def test_the_fall_is_named_with_both_lengths_and_silent_when_tau_holds():
    falling = context_curve.curve_table(_records({"1k": [1.8, 2.0], "256": [2.0, 2.2], "2k": [1.2, 1.3],
                                                  "4k": [1.1, 1.1]}))
    assert list(falling["tokens"]) == [256, 1024, 2048, 4096]  # shortest first, whatever the order of the records
    found = context_curve.fall(falling, 1024)
    assert found.falls and found.inside_at == 1024 and found.past_at == (2048, 4096)
    line = found.line(sliding_window=2048)
    assert "1024" in line and "2048 to 4096" in line and "--seq-length 4096" in line and "--sliding-window 1024" in line
    holding = context_curve.curve_table(_records({"256": [2.0, 2.1], "1k": [1.9, 2.0], "2k": [1.9, 1.8]}))
    assert not context_curve.fall(holding, 1024).falls and context_curve.fall(holding, 1024).line() == ""
    assert context_curve.fall(holding, 4096) is None  # nothing measured past the training length
    noisy = context_curve.fall(context_curve.curve_table(_records({"1k": [1.2, 2.4], "2k": [1.0, 1.6]})), 1024)
    assert noisy.drops and not noisy.separated and not noisy.falls and noisy.line(sliding_window=2048) == ""
    assert "within the noise (the intervals on the two sides overlap)" in noisy.describe()
    single = context_curve.fall(context_curve.curve_table(_records({"1k": [2.0], "2k": [1.1]})), 1024)
    assert single.drops and not single.falls  # one prompt a length: no interval, no verdict of a fall
    fig = context_curve.plot_context_curve(falling, 1024, 2048)
    assert isinstance(fig, Figure)
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} >= {"trained on 1024 tokens",
                                                                              "draft sliding window 2048 tokens"}


def test_evaluate_bench_long_context_prints_the_curve_with_intervals(tiny_verifier, tmp_path, capsys):
    torch.manual_seed(0)
    draft = save_draft(build_model(build_config(verifier="tiny", device="cpu")), tmp_path / "draft",
                       training={"total_seq_len": 1024, "seq_length": 512})
    code = main(["evaluate", "--draft", str(draft), "--bench", "long-context", "--n-prompts", "6", "--longest", "2048",
                 "--max-new-tokens", "8", "--json", str(tmp_path / "lc.json"), "--show", str(tmp_path / "lc.html")])
    out = capsys.readouterr().out
    assert code == 0
    assert "against context length (trained at 512, sliding window 2048)" in out
    records = read_sets(tmp_path / "lc.json")["long-context"]["draft"]
    assert sorted(r.category for r in records) == ["1k", "1k", "256", "256", "2k", "2k"]
    table = context_curve.curve_table(records)
    assert table["low"].notna().all() and list(table["prompts"]) == [2, 2, 2]
    html = (tmp_path / "lc.html").read_text()
    assert "data:image/png;base64," in html and html.count('class="prompt"') == 6
