"""The τ-vs-budget curve: its file round-trips, the best point per minute is the right one, the plot marks a run, and
the committed curve (bench/results/quality.json) measured the demo preset's current recipe."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from eagle3kit import presets
from eagle3kit.evaluate.budget import CURVE, BudgetPoint, best_per_minute, plot_tau_vs_budget, read_curve, write_curve

POINTS = [BudgetPoint(64, 60, 1.10, [0.09, 0.01, 0.0], {"regenerate": 60.0, "hidden_states": 30.0, "train": 30.0,
                                                         "evaluate": 20.0}),
          BudgetPoint(128, 120, 1.30, [0.25, 0.04, 0.01], {"regenerate": 120.0, "hidden_states": 60.0, "train": 60.0}),
          BudgetPoint(256, 240, 1.36, [0.28, 0.06, 0.02], {"regenerate": 240.0, "hidden_states": 120.0,
                                                           "train": 240.0})]


def test_a_curve_round_trips_and_picks_the_best_point_per_minute(tmp_path):
    write_curve(POINTS, tmp_path / "curve.json", cpus=2, load_before=[0.1, 0.2, 0.3])
    points, context = read_curve(tmp_path / "curve.json")
    assert points == POINTS and context["cpus"] == 2
    assert points[0].minutes == pytest.approx(2.0)  # evaluation is not part of the budget
    assert best_per_minute(points) is points[1]  # 0.30 / 4 min beats 0.10 / 2 and 0.36 / 10
    with pytest.raises(FileNotFoundError, match="bench/quality.py"):
        read_curve(tmp_path / "missing.json")


def test_the_plot_marks_this_run_on_the_curve():
    fig = plot_tau_vs_budget(POINTS, here=(5.0, 1.25), here_label="this run")
    assert isinstance(fig, Figure)
    curve_ax = fig.axes[0]
    assert [t.get_text() for t in curve_ax.get_legend().get_texts()] == ["bench/quality.py", "this run"]
    star = curve_ax.get_lines()[1]
    assert list(star.get_xdata()) == [5.0] and list(star.get_ydata()) == [1.25]


def test_the_committed_curve_measured_the_demo_recipe():
    """Change the demo preset's data or training recipe and this fails until bench/quality.py is run again."""
    points, context = read_curve(CURVE)
    assert len(points) >= 3 and context["n_prompts"] >= 16
    data, train = presets.parameters("demo", "04"), presets.parameters("demo", "05")
    assert context["recipe"]["data"] == data
    assert all(context["recipe"]["train"][k] == train[k] for k in context["recipe"]["train"])
    assert {"lr", "hidden_states_dtype", "warm_start_layer"} <= set(context["recipe"]["train"])
    assert all(1.0 <= p.tau <= context["k"] + 1 for p in points)
