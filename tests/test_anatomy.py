"""One training step opened up: the hooks see the real step's calls, in TTT order, and leave no trace."""

from __future__ import annotations

import inspect

import pytest

from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.anatomy import ROLES, open_step, ttt_loop
from eagle3kit.train.session import TrainSession

from conftest import TINY_DATA_SEQ as SEQ


def test_a_step_opened_up_lists_each_ttt_steps_calls_and_its_loss_terms(tiny_data):
    session = TrainSession(tiny_data, DraftSpec(verifier="tiny", device="cpu"), progress=False, total_seq_len=SEQ)
    opened = open_step(session)
    calls = opened.calls
    assert session.global_step == 1 and opened.record is session.history[-1]  # the step itself, taken once
    assert calls["module"].iloc[0] == "fc" and set(calls["module"]) <= set(ROLES)
    per_step = calls[calls["TTT step"] != ""].groupby("TTT step")["module"].apply(list)
    assert list(per_step.index) == list(range(session.ttt_steps))
    assert all(mods[0] == "embed_tokens" and mods[-1] == "lm_head" for mods in per_step)
    hidden = session.model.config.transformer_layer_config.hidden_size
    fc = calls[calls["module"] == "fc"].iloc[0]
    assert fc["input"].endswith(f"×{3 * hidden}") and fc["output"].endswith(f"×{hidden}")  # three aux layers in
    said = opened.losses(session.ttt_steps)
    terms = [opened.record[f"loss_{s}"] for s in range(session.ttt_steps)]
    assert abs(sum(terms) - opened.record["loss"]) < 1e-4 and " + ".join(f"{t:.3f}" for t in terms) in said
    assert not any(m._forward_hooks for m in session.model.modules())  # the hooks are gone
    session.step()
    assert len(calls) == len(opened.calls)  # a later step records nothing


def test_the_ttt_loop_is_the_installed_speculators_source_and_a_forward_without_one_is_refused():
    from speculators.models.eagle3 import Eagle3DraftModel

    loop = ttt_loop()
    head, body = loop.split("\n", 1)
    assert "Eagle3DraftModel.forward" in head and "(speculators/models/eagle3/" in head
    assert inspect.getsourcefile(Eagle3DraftModel.forward).endswith(head.split("(")[1].split(",")[0])
    assert body.startswith("for ttt_step in range(ttt_steps):") and len(body.splitlines()) <= 40
    for call in ("self.embed_tokens(input_ids)", "decoder_layer(", "compute_metrics(", "extend_mask_for_draft_tokens"):
        assert call in body  # each part of a TTT step, as speculators writes it
    assert "# shape" not in body
    with pytest.raises(ValueError, match="no `for ttt_step"):
        ttt_loop(TrainSession.step)


def test_the_step_loop_is_the_sessions_own_optimizer_step():
    """Notebook 05 prints the optimizer step `TrainSession.step()` runs: its own source, the calls a reader looks for
    in order, no docstring."""
    from eagle3kit.train.anatomy import step_loop

    said = step_loop()
    calls = ["zero_grad()", ".backward()", "clip_grad_norm_(model.parameters(), 1.0)", "optimizer.step()",
             "scheduler.step()"]
    assert said.startswith("# eagle3kit.train.loop.train_step\ndef train_step(model, optimizers, schedulers")
    assert [said.index(c) for c in calls] == sorted(said.index(c) for c in calls) and '"""' not in said
