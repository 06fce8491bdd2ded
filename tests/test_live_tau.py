"""τ live while training: measured every N steps into the history from the verifier's cached states (draft forwards
only), equal to evaluate's simulation of the same draft, on the same prompts when tracked again (a resumed run),
drawn beside loss and accuracy, and the best one kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from eagle3kit.cli import main
from eagle3kit.cli.train import best_tau_dir
from eagle3kit.draft.config import DraftSpec
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate.conventions import TAU_LABEL
from eagle3kit.train.checkpoint import STATE_FILE, read_session
from eagle3kit.train.live_tau import TAU, TAU_PROMPTS, TAU_SECONDS, tau_points
from eagle3kit.train.plots import plot_metrics
from eagle3kit.train.session import TrainSession
from eagle3kit.train.stepper import TrainingStepper

from conftest import TINY_DATA_SEQ as SEQ


def session(data) -> TrainSession:
    return TrainSession(data, DraftSpec(verifier="tiny", device="cpu"), progress=False, total_seq_len=SEQ,
                        warmup_steps=0, lr=1e-2)


def test_tau_is_measured_every_n_steps_with_draft_forwards_only(tiny_data):
    s = session(tiny_data)
    live = s.track_tau(every=2, n_prompts=2, max_new_tokens=12)
    verifier_calls = []
    live.verifier.register_forward_hook(lambda *_: verifier_calls.append(1))
    s.run(2)
    assert len(verifier_calls) == 2 and len(live.states) == 2  # the first measurement reads each prompt once
    s.run(2)
    assert len(verifier_calls) == 2  # the second one runs the draft alone
    assert [r.get(TAU) is not None for r in s.history] == [False, True, False, True]
    assert all(r[TAU_SECONDS] > 0 for r in s.history if TAU in r) and s.model.training  # training mode restored
    assert [r[TAU_PROMPTS] for r in s.history if TAU in r] == [2, 2]
    steps, taus = tau_points(s.history)
    assert steps == [2, 4] and all(1.0 <= t <= s.ttt_steps + 1 for t in taus)
    # the same number evaluate's simulation gives for the draft as it is now
    s.model.eval()
    again = ev.merge(ev.simulate_each(live.verifier, s.model, live.prompts, live.conts, live.k, progress=False)).tau
    assert again == taus[-1]
    assert s.best_tau() == max(taus)
    # tracked again (notebook 06 resuming 05's session), with the verifier already loaded: the same prompts and
    # replies, so the same draft scores the same τ and the curve goes on where it was
    more = s.track_tau(every=2, n_prompts=2, max_new_tokens=12, verifier=live.verifier)
    assert more.verifier is live.verifier and more.conts == live.conts and more is s.live_tau
    assert more.measure(s.model)[TAU] == taus[-1]


def test_the_plot_and_the_stepper_show_tau_only_when_measured(tiny_data):
    s = session(tiny_data)
    ui = TrainingStepper(s, n=1)
    ui.step_button.click()
    assert TAU_LABEL not in ui.status.value and len(ui.metrics_figure().axes) == 3  # silent: nothing measured
    s.track_tau(every=1, n_prompts=1, max_new_tokens=8)
    ui.step_button.click()
    assert TAU_LABEL in ui.status.value and "at step 2" in ui.status.value
    fig = plot_metrics(s.history)
    assert len(fig.axes) == 4 and TAU_LABEL in fig.axes[3].get_title()
    assert "live, on 1 held-out prompt" in fig.axes[3].get_title()  # a few prompts, not the headline's set


def test_train_keeps_the_checkpoint_with_the_best_tau(tiny_data, tmp_path, capsys):
    save = tmp_path / "run"
    assert main(["train", "--data", str(tiny_data), "--device", "cpu", "--total-seq-len", str(SEQ), "--lr", "0.01",
                 "--warmup-steps", "0", "--steps", "4", "--eval-every", "2", "--keep-best-tau", "--save",
                 str(save)]) == 0
    out = capsys.readouterr().out
    assert "live tau:" in out and "bonus token" in out and TAU in out.split("live tau:")[0]
    best = best_tau_dir(str(save))
    assert best in out
    assert read_session(best)["fingerprint"] == read_session(save)["fingerprint"]  # a checkpoint of the same run
    history = torch.load(Path(best) / STATE_FILE, weights_only=False)["history"]
    steps, taus = tau_points(history)
    assert steps[-1] == len(history) and taus[-1] == max(taus)  # saved at the step whose τ was the best so far


@pytest.mark.parametrize("argv", [["--keep-best-tau"], ["--eval-every", "2", "--keep-best-tau"]])
def test_keep_best_tau_needs_a_measurement_and_a_place(tiny_data, capsys, argv):
    code = main(["train", "--data", str(tiny_data), "--steps", "1", *argv])
    assert code == 2 and "--keep-best-tau" in capsys.readouterr().err


def test_the_trajectory_says_where_live_tau_started_and_ended_and_its_range_without_a_peak():
    from eagle3kit.train.live_tau import trajectory

    history = [{"step": s, TAU: t, TAU_PROMPTS: 4} for s, t in ((10, 1.05), (20, 1.40), (30, 1.31))] + [{"step": 31}]
    said = trajectory(history)
    assert said.startswith("live τ: 1.050 at step 10, 1.310 at step 30 (between 1.050 and 1.400 over 3 measurements)")
    assert "measured on 4 prompts kept out of training, a rough guide" in said
    assert "highest" not in said and "best" not in said  # a 4-prompt peak is no checkpoint to pick
    assert trajectory(history[:1]) is None


def test_the_run_at_a_glance_keeps_the_first_step_each_live_tau_and_the_last():
    """Notebook 05's table under the long run: the steps worth reading, each with its loss and accuracies."""
    from eagle3kit.train.live_tau import TAU, milestones

    history = [{"step": s, "loss": 10.0 - s, "full_acc_0": s / 10, "full_acc_1": s / 20,
                **({TAU: 1.0 + s / 100} if s % 3 == 0 else {})} for s in range(1, 9)]
    table = milestones(history, 2, window=3)  # each row the mean of the 3 steps up to it
    assert list(table.index) == [1, 3, 6, 8]
    assert list(table.columns) == ["steps averaged", "loss", "full_acc_0", "full_acc_1", "live τ"]
    assert table.loc[6, "live τ"] == 1.06 and table["live τ"].isna().sum() == 2
    assert table.loc[8, "loss"] == 3.0 and table.loc[8, "steps averaged"] == 3  # steps 6, 7, 8: 4, 3, 2
    assert table.loc[1, "loss"] == 9.0 and table.loc[1, "steps averaged"] == 1  # the first step alone
    assert milestones(history, 2, window=1).loc[8, "loss"] == 2.0  # a window of one: the step's own batch
