"""TrainingStepper: buttons clicked without a kernel drive a real TrainSession."""

from __future__ import annotations

import numpy as np

from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.plots import ema
from eagle3kit.train.session import TrainSession
from eagle3kit.train.stepper import TrainingStepper

from conftest import TINY_DATA_SEQ as SEQ
from conftest import TINY_DATA_VOCAB as VOCAB


def stepper(data, **kw):
    s = TrainSession(data, DraftSpec(verifier="tiny", draft_vocab_size=VOCAB, device="cpu"), progress=False,
                     total_seq_len=SEQ, warmup_steps=0, **kw)
    return TrainingStepper(s, n=2)


def test_step_and_run_buttons_grow_the_history(tiny_data):
    ui = stepper(tiny_data)
    blank = ui.metrics_image.value
    assert ui.batch_image.value  # the next batch's layout is drawn before any step
    ui.step_button.click()
    assert len(ui.session.history) == 1 and ui.error is None
    assert ui.metrics_image.value != blank and "step 1 of" in ui.status.value
    ui.run_button.click()  # N = 2, in a worker thread
    ui.wait(120)
    assert not ui.running and len(ui.session.history) == 3
    assert not ui.step_button.disabled and ui.stop_button.disabled


def test_stop_button_ends_a_background_run(tiny_data):
    ui = stepper(tiny_data)
    ui.n_input.value = 500
    ui.run_button.click()
    assert ui.running and ui.step_button.disabled and not ui.stop_button.disabled
    ui.step_button.click()  # ignored while running
    ui.stop_button.click()
    ui.wait(120)
    assert not ui.running
    assert 1 <= len(ui.session.history) < 500


def test_errors_are_shown_not_raised(tiny_data):
    ui = stepper(tiny_data, max_steps=1)
    ui.step_button.click()
    ui.step_button.click()  # the run is complete: shown in the status line
    assert len(ui.session.history) == 1
    assert ui.error and "run is complete" in ui.status.value


def test_the_metric_plot_smooths_the_history_with_an_ema(tiny_data):
    ui = stepper(tiny_data)
    ui.run(3, background=False)
    losses = [r["loss_0"] for r in ui.session.history]
    drawn = {line.get_label(): line for line in ui.metrics_figure().axes[0].get_lines()}
    np.testing.assert_array_equal(drawn["_TTT step 0 raw"].get_ydata(), losses)
    np.testing.assert_allclose(drawn["TTT step 0"].get_ydata(), ema(losses))
    assert ema(losses)[1] != losses[1]  # the plot really smooths: not the raw values again


def test_a_run_redraws_by_time_not_after_every_step(tiny_data):
    """Run N redraws the plots at most every ``redraw_seconds`` (drawing after each step slowed short steps several-
    fold on 2 cores), and always once at the end."""
    s = TrainSession(tiny_data, DraftSpec(verifier="tiny", draft_vocab_size=VOCAB, device="cpu"), progress=False,
                     total_seq_len=SEQ, warmup_steps=0)
    drawn = []

    class Counting(TrainingStepper):
        def refresh(self) -> None:
            super().refresh()
            drawn.append(self.session.global_step)

    ui = Counting(s, n=2, redraw_seconds=3600.0)
    ui.run(4, background=False)
    assert drawn == [0, 4]  # built, then the end of the run only
