"""The overfit check on the tiny verifier: a wired draft memorises one conversation; an untrained one does not."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from eagle3kit.data import conversations as conv
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
    assert isinstance(plot_overfit(trained), Figure)


def test_the_conversation_is_the_verifiers_own_reply(trained):
    turns = conv.read_jsonl(f"{trained.data_dir}/../{CONVERSATION}")[0]
    assert [t["role"] for t in turns][-2:] == ["user", "assistant"] and turns[-1]["content"].strip()


def test_a_draft_that_did_not_learn_fails_with_the_wiring_message(tiny_verifier, tmp_path):
    result = overfit("tiny", tmp_path, steps=1, lr=1e-7, reply_tokens=24, progress=False, warm_start_layer=None)
    assert not result.passed and result.tau < 2.0
    assert "FAILED" in result.message and "wiring bug" in result.message
