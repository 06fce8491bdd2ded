"""What notebook 02 prints from the probe's matrix: the speed race relative to eager and the lines to set."""

from __future__ import annotations

import pandas as pd

from eagle3kit.doctor.checks.attention import SET_ATTN
from eagle3kit.doctor.probe.recommend import (NOISE_FLOOR, race, recommend, recommendation_lines, recommendations,
                                              speed_ratios)


def matrix() -> pd.DataFrame:
    """Rows as :func:`eagle3kit.doctor.probe.matrix.probe` returns them (its columns that the verdict reads)."""
    rows = [("eager", "forward", 128, "ok", 1.0, 0.0, 1.0), ("eager", "forward+backward", 128, "ok", 2.0, 0.0, 1.0),
            ("sdpa", "forward", 128, "ok", 0.5, 1e-6, 1.0), ("sdpa", "forward+backward", 128, "ok", 3.0, 1e-6, 1.0),
            ("simple_flex_attention", "forward", 128, "ok", 0.25, 0.5, 0.2),  # fast, but not eager's numbers
            ("simple_flex_attention", "forward+backward", 128, "error", None, None, None),
            ("unset", "forward", 128, "ok", 0.1, 0.0, 1.0),  # the seed's setting: never a recommendation
            ("sdpa", "forward", 172, "ok", 9.0, 0.0, 1.0)]  # another length: not in the race
    return pd.DataFrame(rows, columns=["backend", "mode", "seq_len", "status", "seconds", "max_abs_dloss",
                                       "token_agreement"])


def test_speed_ratios_are_relative_to_eager_at_one_length():
    ratios = speed_ratios(matrix())
    assert sorted(ratios.index) == ["eager", "sdpa", "simple_flex_attention"]
    assert ratios.loc["sdpa"].tolist() == [0.5, 1.5] and ratios.loc["eager"].tolist() == [1.0, 1.0]
    assert list(ratios.columns) == ["forward (x eager)", "forward+backward (x eager)"]


def test_a_ratio_whose_median_carries_flex_attentions_compile_says_so():
    """A flex cell whose repeats lie far apart (its first call compiled) is named beside its ratio; a steady table
    gets no such column."""
    from eagle3kit.doctor.probe.recommend import FIRST_CALL

    timed = matrix().assign(spread=0.0, resolved=lambda m: m.backend)
    assert FIRST_CALL not in speed_ratios(timed).columns
    timed.loc[(timed.backend == "simple_flex_attention") & (timed["mode"] == "forward"), "spread"] = 5.0
    flagged = speed_ratios(timed)
    assert flagged.loc["simple_flex_attention", FIRST_CALL] == "forward" and flagged.loc["sdpa", FIRST_CALL] == ""


def training_race(eager: tuple[float, float], sdpa: tuple[float, float]) -> pd.DataFrame:
    """Two training cells that ran and matched eager: (median seconds, repeats' spread) each."""
    rows = [("eager", "forward+backward", 128, "ok", *eager, 0.0, 1.0),
            ("sdpa", "forward+backward", 128, "ok", *sdpa, 1e-6, 1.0)]
    return pd.DataFrame(rows, columns=["backend", "mode", "seq_len", "status", "seconds", "spread", "max_abs_dloss",
                                       "token_agreement"])


def test_a_speed_claim_needs_a_margin_larger_than_the_repeats_spread():
    """Notebook 02 once said `cpu training -> eager` from two noisy repeats: eager 2 % faster, spread 10 %."""
    noisy = training_race(eager=(1.96, 0.2), sdpa=(2.0, 0.15))
    assert recommend(noisy) == "sdpa" and race(noisy).fastest == "eager"
    assert race(noisy).sentence().startswith("both train; sdpa stays")
    clear = training_race(eager=(1.0, 0.05), sdpa=(2.0, 0.05))  # a margin of 1 s against 0.1 s of noise
    assert recommend(clear) == "eager" and "a margin over 2x the noise" in race(clear).sentence()
    # the demo's 02 once: eager 0.316 s faster against a spread of 0.191 s from two repeats: not twice the noise
    close = training_race(eager=(1.684, 0.191), sdpa=(2.0, 0.1))
    assert recommend(close) == "sdpa" and "within 2x the noise" in race(close).sentence()
    no_spread = training_race(eager=(1.97, 0.0), sdpa=(2.0, 0.0))  # one repeat: the floor is the noise
    assert race(no_spread).noise == NOISE_FLOOR * 2.0 and recommend(no_spread) == "sdpa"
    lines = recommendation_lines(recommendations(noisy, "cpu"), "cpu", noisy)
    assert any("both train; sdpa stays" in line for line in lines)
    # the default fastest: a speed claim over the next only beyond the noise, the same rule
    default_wins = training_race(eager=(2.02, 0.15), sdpa=(2.0, 0.15))
    assert recommend(default_wins) == "sdpa" and race(default_wins).runner_up == "eager"
    assert race(default_wins).sentence().endswith("within 2x the noise, so the two tie and the default stays")
    clearly = training_race(eager=(3.0, 0.05), sdpa=(2.0, 0.05))
    assert "the next, eager, took 1.000 s more" in race(clearly).sentence()
    assert race(clearly).sentence().endswith("a margin over 2x the noise")


def test_recommendation_lines_set_what_ran_and_matched_and_say_cuda_was_not_measured():
    rec = recommendations(matrix(), "cpu")
    assert rec == {"cpu training": "eager", "cpu inference": "sdpa"}  # eager trains in 2 s, sdpa in 3 s
    first, *lines = recommendation_lines(rec, "cpu")
    assert first.startswith("skipped: no CUDA") and SET_ATTN.format(impl="simple_flex_attention") in first
    assert lines[0] == f"cpu training    -> {SET_ATTN.format(impl='eager')}"
    assert "the training step over that config: TrainSession's block_sparse_cpu" in lines[1]  # 05 trains with it
    assert lines[2:] == [f"cpu inference   -> {SET_ATTN.format(impl='sdpa')}"]
    assert not any("training step over" in line for line in recommendation_lines({"cpu training": "block_sparse_cpu"},
                                                                                  "cpu"))  # said once, not twice
    assert recommendation_lines({"cuda training": None}, "cuda") == [
        "cuda training   -> no backend ran and matched eager"]


def test_a_median_that_carries_a_first_calls_compile_is_named_with_the_same_kernel_run_warm():
    """Notebook 02 once drew flex attention's forward 6x slower than it runs: its median of two repeats was the first
    call, which compiles; `unset` resolves to the same kernel and ran warm after it."""
    from eagle3kit.doctor.probe.plots import plot_timings
    from eagle3kit.doctor.probe.recommend import warm_ups

    rows = [("eager", "forward", 256, "ok", "eager", 0.18, 0.03), ("sdpa", "forward", 256, "ok", "sdpa", 0.18, 0.07),
            ("simple_flex_attention", "forward", 256, "ok", "simple_flex_attention", 1.09, 0.9),
            ("simple_flex_attention", "forward+backward", 256, "error", "simple_flex_attention", 0.03, None),
            ("unset", "forward", 256, "ok", "simple_flex_attention", 0.2, 0.0)]
    probed = pd.DataFrame(rows, columns=["backend", "mode", "seq_len", "status", "resolved", "seconds", "spread"])
    (index, found), = warm_ups(probed).items()
    assert index == 2 and (found.warm, found.warm_seconds) == ("unset", 0.2)
    assert "0.90 s apart: the first call compiles the flex kernel" in found.line()
    assert "run warm as `unset`, took 0.20 s" in found.line()
    assert warm_ups(probed.drop(index=4)) == {2: found.__class__(found.label, found.resolved, 1.09, 0.9)}  # no twin
    busy = probed.assign(seconds=[0.18, 0.4, 0.2, 0.03, 0.2], spread=[0.03, 0.3, 0.01, None, 0.0])
    (slow,) = warm_ups(busy).values()  # sdpa compiles nothing: a slow call is a warm-up or a busy machine
    assert slow.label == "sdpa · forward" and not slow.compiles and "busy machine" in slow.line()
    assert warm_ups(matrix()) == {}  # a matrix without the repeats' spread names none
    fig = plot_timings(probed)
    bars = fig.axes[0].patches
    assert len(bars) == len(probed) and bars[2].get_hatch() == "//" and not bars[0].get_hatch()
    assert any("warm, as unset (tick): 0.20s" in t.get_text() for t in fig.axes[0].texts)
    assert [line.get_xdata()[0] for line in fig.axes[0].lines] == [0.2]  # the tick on the hatched bar
