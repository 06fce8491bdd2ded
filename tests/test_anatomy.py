"""One training step opened up: the hooks see the real step's calls, in TTT order, and leave no trace."""

from __future__ import annotations

import inspect

import pytest

from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.anatomy import ROLES, open_step, ttt_loop
from eagle3kit.train.forward import speculators_forward
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
    assert fc["this step's input"].endswith(f"×{3 * hidden}") and fc["this step's output"].endswith(f"×{hidden}")
    # the CPU's block-sparse step beside speculators' dense forward on the same batch: every position at every call
    assert session.forward is not speculators_forward and fc["dense input"] == f"1×{SEQ}×{3 * hidden}"
    layers = calls[calls["module"] == "layers.0"]
    assert (layers["dense output"] == f"1×{SEQ}×{hidden}").all()
    rows = [int(shape.split("×")[1]) for shape in layers["this step's output"]]
    assert all(r <= SEQ for r in rows) and min(rows) < SEQ  # the CPU path computes fewer rows than the dense one
    assert list(opened.dense()["input"]) == list(calls["dense input"])  # the GPU's view, first in notebook 05
    said = opened.cpu_line()
    assert said.startswith("This CPU's block-sparse step computed ") and f"`layers.0` on {min(rows)}" in said
    assert f"of {SEQ} rows" in said
    said = opened.losses(session.ttt_steps)
    terms = [opened.record[f"loss_{s}"] for s in range(session.ttt_steps)]
    assert abs(sum(terms) - opened.record["loss"]) < 1e-4 and " + ".join(f"{t:.3f}" for t in terms) in said
    assert not any(m._forward_hooks for m in session.model.modules())  # the hooks are gone
    session.step()
    assert len(calls) == len(opened.calls)  # a later step records nothing


def test_a_step_on_speculators_own_forward_has_no_second_dense_pass(tiny_data):
    session = TrainSession(tiny_data, DraftSpec(verifier="tiny", device="cpu"), progress=False, total_seq_len=SEQ,
                           attention="speculators")
    calls = open_step(session).calls
    assert session.forward is speculators_forward and "dense input" not in calls and "input" in calls
    assert open_step(session).cpu_line() is None


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


def test_timing_both_paths_on_a_batch_moves_no_weight_and_leaves_the_next_step_unchanged(tiny_data):
    """Notebook 05 times speculators' dense forward + backward beside the session's on the step's batch: both run
    (positive medians, the ratio printed), and a session that timed them takes the same next step as one that did
    not."""
    from eagle3kit.train.anatomy import path_line, path_seconds

    timed, plain = (TrainSession(tiny_data, DraftSpec(verifier="tiny", device="cpu"), progress=False,
                                 total_seq_len=SEQ) for _ in range(2))
    opened = open_step(timed)
    plain.step()
    seconds = path_seconds(timed, opened.batch, repeats=2)
    assert list(seconds) == ["speculators' dense forward", "the session's (block_sparse_cpu)"]
    assert all(v > 0 for v in seconds.values())
    assert all(p.grad is None for p in timed.model.parameters())
    assert path_line(seconds).endswith(f"{seconds[next(iter(seconds))] / list(seconds.values())[1]:.2f}x")
    assert timed.step()["loss"] == plain.step()["loss"]
