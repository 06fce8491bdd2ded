"""The draft's accuracy on the training and the validation split of its data, counted as a training step counts it,
with no step taken: the training split's first batch gives the first step's numbers, and the validation split holds
the rows the session never trains on (notebook 06 sets the two side by side; tests/test_course.py its sentence)."""

from __future__ import annotations

import pytest
import torch

from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.session import TrainSession
from eagle3kit.train.validation import split_metrics

from conftest import TINY_DATA_SEQ as SEQ


def session(data, **settings) -> TrainSession:
    return TrainSession(data, DraftSpec(verifier="tiny", device="cpu"), progress=False,
                        **{"total_seq_len": SEQ, "warmup_steps": 0, **settings})


def test_the_training_splits_first_batch_counts_what_the_first_step_counts_and_nothing_moves(tiny_data):
    s = session(tiny_data)
    before = {k: v.clone() for k, v in s.model.state_dict().items()}
    first = split_metrics(s, "train", max_batches=1)
    assert all(torch.equal(v, s.model.state_dict()[k]) for k, v in before.items()) and s.model.training
    record = s.step()
    assert first["batches"] == 1
    for key in ("loss", "full_acc_0", "full_acc_1", "cond_acc_1"):
        assert first[key] == pytest.approx(record[key], rel=1e-5, abs=1e-7), key


def test_the_validation_split_is_the_rows_the_session_never_trains_on(tiny_data):
    s = session(tiny_data, total_seq_len=4 * SEQ)  # packs with room to spare: the CPU forward cuts their padding
    train, val = split_metrics(s, "train"), split_metrics(s, "val")
    assert train["samples"] == len(s.batches.dataset) and train["samples"] + val["samples"] == s.data.n_samples
    assert val["samples"] >= 1 and val["batches"] >= 1 and 0.0 <= val["full_acc_0"] <= 1.0
    assert train["split_samples"] == train["samples"] and val["split_samples"] == val["samples"]


def test_a_capped_split_counts_the_conversations_its_batches_held(tiny_data):
    """Notebook 06 reads the training split only as far as the validation split goes: the count it states is what
    those batches packed, not the split's size."""
    from eagle3kit.train.validation import first_guess_line

    s = session(tiny_data, total_seq_len=2 * SEQ)
    whole, first = split_metrics(s, "train"), split_metrics(s, "train", max_batches=1)
    assert whole["batches"] > 1 and 1 <= first["samples"] < whole["samples"] == first["split_samples"]
    line = first_guess_line({"training": first, "validation": split_metrics(s, "val")})
    assert f"on {first['samples']} of the {first['split_samples']} training" in line
    assert "on the " in line.split("training conversations")[1]  # the validation split, read whole


def test_the_sets_table_counts_every_set_a_run_uses(tiny_data):
    """Notebook 05's table of sets: the two splits add up to the data's samples, the held-out set is the one the data
    directory kept out, and the live τ reads at most that many of them."""
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.train.validation import sets_table

    s = session(tiny_data)
    held = len(held_out_conversations(s.data))
    table = sets_table(s, held, 4)["conversations"]
    assert table["training split"] + table["speculators' validation split"] == s.data.n_samples
    assert table["training split"] == len(s.batches.dataset) and table["held-out (notebook 04)"] == held
    assert table["live τ prompts"] == min(4, held)
