"""The overfit check on the tiny verifier: a wired draft memorises one conversation; an untrained one does not."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from eagle3kit.data import conversations as conv
from eagle3kit.data.breakages import d2t_all_zero, d2t_one_id_off
from eagle3kit.train.overfit import CONVERSATION, overfit, plot_overfit


@pytest.fixture(scope="module")
def trained(tiny_verifier, tmp_path_factory):
    return overfit("tiny", tmp_path_factory.mktemp("overfit"), steps=30, k=3, reply_tokens=40, progress=False,
                   warm_start_layer=None)


def test_a_wired_draft_overfits_one_conversation(trained):
    assert trained.passed, trained.message
    assert trained.tau >= 0.8 * 4 and trained.lossless
    assert trained.losses[-1] < trained.losses[0] / 10
    assert "passed" in trained.message and f"{trained.steps} steps" in trained.message
    a = trained.full_acc  # speculators' full_acc_i is cumulative: the prediction is their sum, written out
    assert trained.expected_accepted == pytest.approx(sum(a)) and a[0] >= a[1] >= a[2]
    said = f"{trained.expected_accepted:.2f} (the shares of positions whose first 1, 2, 3 draft tokens"
    assert said in trained.message
    assert f"{a[0]:.3f} + {a[1]:.3f} + {a[2]:.3f})" in trained.message
    assert isinstance(plot_overfit(trained), Figure)


def test_the_conversation_is_the_verifiers_own_reply(trained):
    turns = conv.read_jsonl(f"{trained.data_dir}/../{CONVERSATION}")[0]
    assert [t["role"] for t in turns][-2:] == ["user", "assistant"] and turns[-1]["content"].strip()


def test_the_check_loads_the_verifier_once_and_generates_its_reply_once(tiny_verifier, tmp_path, monkeypatch):
    """The one conversation's hidden states come from the verifier the check already loaded, and the reply it decodes
    is the one it wrote (greedy, the same model and prompt: generated once). A verifier in another dtype is loaded."""
    import torch

    from eagle3kit.data import hidden_states
    from eagle3kit.data.dataset import build_dataset
    from eagle3kit.train import overfit as check
    from eagle3kit.verifier import load_model

    calls = {"load_model": 0, "greedy_generate": 0}

    def counted(module, name):
        real = getattr(module, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    counted(check, "load_model"), counted(hidden_states, "load_model"), counted(check, "greedy_generate")
    result = overfit("tiny", tmp_path / "one", steps=2, k=3, reply_tokens=16, progress=False, warm_start_layer=None)
    assert calls == {"load_model": 1, "greedy_generate": 1} and 0 < result.reply_tokens <= 16
    bf16 = load_model(tiny_verifier, dtype="bfloat16")
    build_dataset("tiny", tmp_path / "again", n_conversations=1, seq_length=128, held_out=0,
                  source=tmp_path / "one" / CONVERSATION, progress=False, dtype="float32", verifier_model=bf16)
    assert calls["load_model"] == 2 and next(bf16.parameters()).dtype == torch.bfloat16  # float32 was asked for


def test_a_draft_that_did_not_learn_fails_with_the_wiring_message(tiny_verifier, tmp_path):
    result = overfit("tiny", tmp_path, steps=1, lr=1e-7, reply_tokens=24, progress=False, warm_start_layer=None)
    assert not result.passed and result.tau < 2.0
    assert "FAILED" in result.message and "wiring bug" in result.message


def test_a_draft_that_learned_but_decodes_through_a_zero_d2t_fails(tiny_verifier, tmp_path):
    """SafeAILab/EAGLE issue 222's all-zero d2t: training (which reads t2d) goes well, the decode loop does not."""
    result = overfit("tiny", tmp_path, steps=30, k=3, reply_tokens=40, progress=False, warm_start_layer=None,
                     prepare=d2t_all_zero)
    assert result.learned and not result.passed, result.message
    assert result.mean_accepted < 0.6 * result.expected_accepted
    assert "FAILED" in result.message and "d2t/t2d" in result.message


@pytest.fixture(scope="module")
def multi_turn(tmp_path_factory):
    """A healthy multi-turn JSONL: a system prompt and three user/assistant turns per conversation."""
    path = tmp_path_factory.mktemp("multi") / "multi.jsonl"
    turns = [{"role": "system", "content": "You are a concise assistant that answers questions about cooking."}]
    for q, a in [("How do I boil an egg?", "Put it in boiling water."), ("How long for a soft yolk?", "Six minutes."),
                 ("And for a hard one?", "Ten minutes.")]:
        turns += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    conv.write_jsonl(path, [turns])
    return path


@pytest.mark.slow
def test_smollm2_on_a_multi_turn_conversation_with_a_system_prompt_passes(smollm2, multi_turn, tmp_path):
    result = overfit(smollm2, tmp_path, source=multi_turn, progress=False)  # the defaults, as the CLI runs them
    assert result.passed, result.message


@pytest.mark.slow
def test_smollm2_decoding_through_a_d2t_one_id_off_fails(smollm2, tmp_path):
    result = overfit(smollm2, tmp_path, progress=False, prepare=d2t_one_id_off)
    assert result.learned and not result.passed, result.message
