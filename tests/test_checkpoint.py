"""A session resumed from its checkpoint takes the same next step, bit for bit (tiny verifier, real checkpoints)."""

from __future__ import annotations

import torch

from conftest import TINY_DATA_SEQ as SEQ
from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.checkpoint import resume_matches, saved_step
from eagle3kit.train.session import TrainSession


def test_a_resumed_session_takes_the_same_step_and_a_changed_one_does_not(tiny_data, tmp_path):
    spec = DraftSpec(verifier="tiny", draft_vocab_size=512, device="cpu")
    session = TrainSession(tiny_data, spec, progress=False, total_seq_len=SEQ, lr=1e-3)
    session.step()
    checkpoint = session.save(tmp_path / "ck")
    assert saved_step(checkpoint) == session.global_step == 1  # read from the state file alone (notebook 05)
    match = resume_matches(session, TrainSession.resume(checkpoint, progress=False))
    assert match.identical and match.same_weights and match.loss == match.resumed_loss
    assert saved_step(session.save(tmp_path / "ck")) == 2 and saved_step(checkpoint) == 2  # a new save is read
    changed = TrainSession.resume(checkpoint, progress=False)
    with torch.no_grad():
        changed.model.fc.weight[0, 0] += 1e-3
    differ = resume_matches(TrainSession.resume(checkpoint, progress=False), changed)
    assert not differ.same_weights and not differ.identical
