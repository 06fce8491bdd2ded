"""Training curves: a debiased EMA line (TensorBoard's smoothing) over the raw values, drawn faint behind it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from eagle3kit.train.plots import PANELS, RAW_ALPHA, SMOOTHING, ema, plot_metrics

LOSS = [4.0, 2.0, 3.0, 1.0, float("nan"), 2.0]


def history(ttt_steps: int = 2) -> list[dict]:
    """Records shaped as TrainSession.step() returns them, with values that jump from step to step."""
    rng = np.random.default_rng(0)
    return [{"step": i + 1, **{f"loss_{k}": LOSS[i] + k for k in range(ttt_steps)},
             **{f"{m}_{k}": float(rng.choice([0.0, 0.9])) for m in ("full_acc", "cond_acc") for k in range(ttt_steps)}}
            for i in range(len(LOSS))]


def lines(fig, panel: int) -> dict[str, object]:
    return {line.get_label(): line for line in fig.axes[panel].get_lines()}


def debiased_ema(values, w):
    """By the closed form sum_i w^(t-i) (1-w) v_i / (1 - w^t) over the finite values so far (not the recursion)."""
    out, seen = [], []
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        seen.append(v)
        t = len(seen)
        out.append(sum(w ** (t - i) * (1 - w) * x for i, x in enumerate(seen, 1)) / (1 - w ** t))
    return out


def test_ema_by_hand():
    # weight 0.5: 4; (0.5*2 + 0.5*2) / 0.75; (0.5*2 + 0.5*3) / 0.875; (0.5*2.5 + 0.5*1) / 0.9375; nan passes; ...
    np.testing.assert_allclose(ema(LOSS, 0.5)[:4], [4, 8 / 3, 20 / 7, 28 / 15])
    assert math.isnan(ema(LOSS, 0.5)[4])
    np.testing.assert_allclose(ema(LOSS, 0.5)[5], (0.5 * 1.75 + 0.5 * 2) / (1 - 0.5 ** 5))


@pytest.mark.parametrize("weight", [SMOOTHING, 0.6])
def test_every_panel_draws_the_ema_over_the_faint_raw_values(weight):
    hist = history()
    fig = plot_metrics(hist, smoothing=weight)
    steps = [r["step"] for r in hist]
    for panel, (key, _label) in enumerate(PANELS):
        drawn = lines(fig, panel)
        for k in range(2):
            raw, smooth = drawn[f"_TTT step {k} raw"], drawn[f"TTT step {k}"]
            values = [r[f"{key}_{k}"] for r in hist]
            np.testing.assert_array_equal(raw.get_xdata(), steps)
            np.testing.assert_array_equal(raw.get_ydata(), values)
            np.testing.assert_allclose(smooth.get_ydata(), debiased_ema(values, weight))
            assert raw.get_alpha() == RAW_ALPHA and smooth.get_alpha() in (None, 1.0)
            assert raw.get_color() == smooth.get_color() and smooth.get_linewidth() > raw.get_linewidth()
        assert f"EMA {weight:g}" in fig.axes[panel].get_title()
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["TTT step 0", "TTT step 1"]  # the smoothed lines only


def test_smoothing_zero_draws_the_raw_values_only_and_bad_weights_are_refused():
    hist = history(1)
    drawn = lines(plot_metrics(hist, smoothing=0), 0)
    assert list(drawn) == ["TTT step 0"] and drawn["TTT step 0"].get_alpha() == 1.0
    with pytest.raises(ValueError, match="EMA weight"):
        plot_metrics(hist, smoothing=1.0)


def test_an_empty_history_says_so():
    fig = plot_metrics([])
    assert all(not ax.get_lines() for ax in fig.axes)
    assert "no steps yet" in [t.get_text() for t in fig.axes[0].texts]


def test_the_rehearsal_figure_keeps_its_legend_off_the_data_and_draws_no_floor_for_an_exact_match():
    """Notebook 05's side-by-side once hid the TTT-0 peak under its legend and drew |Δ loss| = 0 as a line at 1e-12."""
    import pandas as pd

    from eagle3kit.train.rehearsal.plots import plot_side_by_side

    rows = [{"step": s, "ttt_step": k, "speculators": v + k, "eagle3kit": v + k, "abs_diff": 0.0, "within": True}
            for s, v in ((1, 13.0), (2, 18.5), (3, 10.8)) for k in range(3)]
    exact = plot_side_by_side(pd.DataFrame(rows), "trainer and session")
    assert len(exact.axes) == 1 and "bit-identical" in exact.get_suptitle()  # no panel of zeros
    legend = exact.axes[0].get_legend()
    assert legend.get_bbox_to_anchor().x0 >= exact.axes[0].bbox.x1  # beside the axes, not over the peak
    close = pd.DataFrame(rows)
    close.loc[[4, 7], "abs_diff"] = [3e-7, 1e-6]
    fig = plot_side_by_side(close)
    right = fig.axes[1]
    assert right.get_yscale() == "log" and "7 of 9 exactly equal" in right.get_title()
    assert sorted(y for line in right.get_lines() for y in line.get_ydata()) == [3e-7, 1e-6]  # only what differs
