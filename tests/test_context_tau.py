"""The doctor's context sentence: it fires on a draft whose τ falls past the length it was trained at, and stays
silent on one whose τ does not fall.

The draft learns the tiny verifier's own greedy replies (``eagle3kit regenerate``) to short prompts, trained at 128
tokens. That verifier's replies change with the context's length (up to ~128 tokens one repeated token, past ~180
tokens others), as a real model's style drifts over a long chat: the draft is accepted within its training length and
not at twice it. The same session exported before its first step (speculators' initialisation, the same training
record) is accepted nowhere, so its τ does not fall.
"""

from __future__ import annotations

import pytest

from eagle3kit.cli import main
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.regenerate import regenerate
from eagle3kit.doctor.tau.context import context_fall, lengths
from eagle3kit.draft.config import DraftSpec
from eagle3kit.evaluate.export import reload
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_model, load_tokenizer

TRAINED = 128
STEPS = 30
FALLS = "τ falls past the training length"


@pytest.fixture(scope="module")
def drafts(tiny_verifier, tmp_path_factory):
    """(trained, untrained): the tiny verifier's replies to 32 short ShareGPT prompts, 16 of them trained on in
    128-token packs for 30 steps; the untrained one exported by the same session before its first step."""
    base = tmp_path_factory.mktemp("context")
    regenerate("tiny", base / "replies.jsonl", n_conversations=32, max_new_tokens=96, max_prompt_tokens=40,
               engine="transformers", progress=False)
    build_dataset("tiny", base / "data", n_conversations=16, seq_length=TRAINED, held_out=2,
                  source=base / "replies.jsonl", progress=False)
    session = TrainSession(base / "data", DraftSpec(verifier="tiny", device="cpu"), progress=False,
                           total_seq_len=TRAINED, lr=1e-2, warmup_steps=0)
    untrained = session.export(base / "untrained")
    session.run(STEPS)
    return session.export(base / "trained"), untrained


def test_the_lengths_measured_are_the_training_length_and_twice_it():
    assert lengths(128, 8192) == [128, 256] and lengths(1024, 8192) == [1024, 2048]
    assert lengths(8192, 8192) == [8192]  # nothing past the verifier's limit: not measured


def test_tau_that_falls_past_the_training_length_is_measured_so(drafts, tiny_verifier):
    trained, untrained = drafts
    verifier, tok = load_model(tiny_verifier), load_tokenizer(tiny_verifier)
    falls = context_fall(trained, reload(trained), verifier, tok, 3)
    flat = context_fall(untrained, reload(untrained), verifier, tok, 3)
    print(falls.describe(), flat.describe(), sep="\n")
    assert (falls.trained_length, falls.inside_at, falls.past_at) == (TRAINED, TRAINED, (2 * TRAINED, 2 * TRAINED))
    assert falls.inside > 2.0 and falls.falls
    assert flat.trained_length == TRAINED and not flat.falls


def test_the_doctor_says_it_for_the_draft_that_falls_only(drafts, capsys):
    trained, untrained = drafts
    main(["doctor", "--draft", str(trained), "--why-tau"])
    said = " ".join(capsys.readouterr().out.split())
    assert FALLS in said and f"within the {TRAINED} the draft was trained at" in said
    assert f"--seq-length {2 * TRAINED}" in said and f"--sliding-window {TRAINED}" in said
    main(["doctor", "--draft", str(untrained), "--why-tau"])
    said = " ".join(capsys.readouterr().out.split())
    assert FALLS not in said and "cannot be told to fall or hold past the training length" in said  # 2 prompts a length


def test_a_verdict_on_few_prompts_a_length_says_it_is_a_first_look():
    """notebook 07's demo measured 2 prompts a length: the sentence keeps its verdict and says how little stands behind
    it; with the full curve's count a length it says nothing more."""
    import pandas as pd

    from eagle3kit.evaluate import context_curve
    from eagle3kit.evaluate.long_context import PER_BUCKET

    def table(prompts: int) -> pd.DataFrame:
        return pd.DataFrame({"tokens": [256, 1024, 2048], "tau": [1.41, 1.11, 1.22], "prompts": [prompts] * 3})

    few = context_curve.fall(table(2), 1024)
    # a few prompts show neither that τ holds nor that it falls
    said = few.describe()
    assert few.prompts == 2 and "cannot be told to fall or hold past the training length. With 2 prompt(s)" in said
    assert "first look" not in context_curve.fall(table(PER_BUCKET), 1024).describe()


def test_the_training_length_is_the_longest_document_not_the_pack(drafts):
    """Positions restart per document, so a draft trained on 1024-token packs of 230-token documents never saw a
    context past 230: its record says so, and the training length is the shortest of the three."""
    from eagle3kit.draft.model import read_training, trained_length

    assert trained_length({"total_seq_len": 1024, "seq_length": 1024, "longest_document": 230}) == 230
    assert trained_length({"total_seq_len": 512, "seq_length": 1024}) == 512  # run.yaml: no document lengths
    record = read_training(drafts[0])
    assert 0 < record["longest_document"] <= record["seq_length"] == TRAINED
