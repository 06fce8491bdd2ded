"""What notebook 02 prints from the probe's matrix: the speed race relative to eager and the lines to set."""

from __future__ import annotations

import pandas as pd

from eagle3kit.doctor.checks.attention import SET_ATTN
from eagle3kit.doctor.probe.recommend import recommendation_lines, recommendations, speed_ratios


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


def test_recommendation_lines_set_what_ran_and_matched_and_say_cuda_was_not_measured():
    rec = recommendations(matrix(), "cpu")
    assert rec == {"cpu training": "eager", "cpu inference": "sdpa"}
    first, *lines = recommendation_lines(rec, "cpu")
    assert first.startswith("skipped: no CUDA") and SET_ATTN.format(impl="simple_flex_attention") in first
    assert lines == [f"cpu training    -> {SET_ATTN.format(impl='eager')}",
                     f"cpu inference   -> {SET_ATTN.format(impl='sdpa')}"]
    assert recommendation_lines({"cuda training": None}, "cuda") == [
        "cuda training   -> no backend ran and matched eager"]
