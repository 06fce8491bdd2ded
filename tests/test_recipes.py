"""The recipe lab's results: the summary the package ships (eagle3kit/evaluate/recipe_lab.json) recomputed from the
bench's per-prompt records (bench/results/recipe.json), the frontier drawn with the one before it, the demo and full
presets the recipes the lab chose, and the doctor naming only a lever that held at both budgets, only where a draft
does not pay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from eagle3kit import presets
from eagle3kit.doctor.tau.verdict import lever_lines
from eagle3kit.evaluate import recipes
from eagle3kit.evaluate.scores import PromptScore

RAW_PATH = Path(__file__).resolve().parents[1] / "bench" / "results" / "recipe.json"
RAW = json.loads(RAW_PATH.read_text())
LAB = recipes.read_lab()
ROUND2 = RAW.get("context", {}).get("round") == 2  # round 1 is kept under "round1" once round 2 has run
LATEST = RAW if ROUND2 else RAW.get("round1", RAW)


def test_the_summary_is_the_records():
    """Every τ, interval and paired Δ of the summary equals what the raw records give."""
    sections = [("rows", LAB.rows), ("frontier", LAB.frontier)] + ([("checks", LAB.checks)] if ROUND2 else [])
    for key, summary in sections:
        raws = LATEST.get(key, [])
        assert len(raws) == len(summary), key
        reference = "base" if ROUND2 else "demo-before"
        rebuilt = recipes.with_deltas([recipes.LabRow.from_result(r) for r in raws], reference) \
            if key != "frontier" else [recipes.LabRow.from_result(r) for r in raws]
        for raw, row, again in zip(raws, summary, rebuilt, strict=True):
            for name, records in raw["records"].items():
                taus = [1 + r["accepted"] / r["rounds"] for r in records if r["rounds"]]
                assert row.tau[name].mean == pytest.approx(np.mean(taus), abs=1e-4)
                assert row.tau[name].low <= row.tau[name].mean <= row.tau[name].high
            for name, gain in again.delta.items():
                assert row.delta[name].mean == pytest.approx(gain.mean, abs=1e-4), (row.name, name)
            assert row.minutes == pytest.approx(raw["minutes"]["data"] + raw["minutes"]["train_planned"], abs=0.02)
            if raw["budget"] and not raw.get("steps_like"):  # a budgeted recipe spent its budget: data, then steps
                assert row.minutes <= raw["budget"] + 0.05
    assert {"mt-bench", "held-out"} <= set(LAB.rows[0].tau)


def test_the_frontier_is_drawn_with_the_one_before_this_run_and_the_bar():
    fig = recipes.plot_frontier(LAB.frontier or LAB.rows[:2], here=(5.0, 1.3), bar=1.61,
                                before=LAB.frontier_before or LAB.rows[:2], before_label="before", beside=LAB.beside)
    assert isinstance(fig, Figure)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(label.startswith("this run") for label in labels) and any("1.61" in label for label in labels)
    assert any(label.endswith(", before") for label in labels)
    for row in LAB.beside:  # a lever on top of the frontier: named, on both prompt sets
        lever = row.name.split("*")[0].split("+")[-1]
        assert {f"+ {lever}, held-out", f"+ {lever}, mt-bench"} <= set(labels)
    plain = recipes.plot_frontier(LAB.frontier or LAB.rows[:2])
    assert not any(t.get_text().startswith("+ ") for t in plain.axes[0].get_legend().get_texts())


@pytest.mark.parametrize("preset", ["demo", "full"])
def test_each_preset_is_the_recipe_the_lab_chose(preset):
    """Change a preset's recipe for the kind of CPU the lab ran on (its context says whether it had native bf16) and
    this fails until bench/recipe.py has measured it (its frontier's recipe); the other kind's recipes are measured
    by the notebooks themselves (docs/demo.md)."""
    chosen = LAB.context.get(preset)
    if preset not in presets.NAMES:
        pytest.skip(f"no {preset} preset")
    assert chosen, f"the lab's summary names no {preset} recipe (bench/recipe.py --{preset} NAME)"
    suffix = "" if LAB.context["machine"]["native_bf16"] else presets.FLOAT32_CPU
    data, train = ({**presets.typed_defaults(), **presets.parameters(preset, nn, suffix)} for nn in ("04", "05"))
    for key, value in chosen["data"].items():
        assert data[key] == value, key
    for key, value in chosen["train"].items():
        if key != "hidden_states_dtype":
            assert train[key] == value, key


def test_a_preset_chosen_from_the_frontier_is_that_recipe_on_the_frontiers_kind_of_cpu():
    """bench/recipe.py --keep-rows --full NAME@MINUTES records the frontier point a preset takes, for the kind of CPU
    the frontier ran on: the preset's values for that kind are that point's."""
    chosen = LAB.context.get("frontier_presets", {})
    if not chosen:
        pytest.skip("no preset was chosen from the frontier")
    suffix = "" if LAB.frontier_machine["native_bf16"] else presets.FLOAT32_CPU
    for preset, view in chosen.items():
        data, train = ({**presets.typed_defaults(), **presets.parameters(preset, nn, suffix)} for nn in ("04", "05"))
        assert {k: data[k] for k in view["data"]} == view["data"], preset
        assert {k: train[k] for k in view["train"] if k != "hidden_states_dtype"} == {
            k: v for k, v in view["train"].items() if k != "hidden_states_dtype"}, preset


def _row(name: str, lever: str, budget: float, accepted: tuple[int, ...]) -> recipes.LabRow:
    scores = [PromptScore(str(i), "held-out", 10, a) for i, a in enumerate(accepted)]
    raw = {"name": name, "lever": lever, "what": f"{name}'s change", "budget": budget, "steps": 10, "epochs": 1.0,
           "minutes": {"data": 1, "train": budget - 1, "train_planned": budget - 1},
           "records": {"held-out": [vars(s) for s in scores]}}
    return recipes.LabRow.from_result(raw)


def test_the_strongest_lever_is_one_that_held_at_both_budgets():
    base = (2, 4, 6, 3, 5)
    plus = lambda n: tuple(a + n for a in base)  # noqa: E731
    rows = recipes.with_deltas([_row("base", "reference", 5, base), _row("held", "loss", 5, plus(2)),
                                _row("faded", "norms", 5, plus(4))])
    checks = recipes.with_deltas([_row("base", "reference", 10, base), _row("held", "loss", 10, plus(1)),
                                  _row("faded", "norms", 10, base)])
    line = recipes.strongest_lever(recipes.Lab(rows, checks))
    assert "loss (held's change)" in line and "+0.200" in line and "+0.100" in line and "not a forecast" in line
    assert "norms" not in line  # the larger gain at 5 minutes did not hold at 10
    none = recipes.strongest_lever(recipes.Lab(rows, recipes.with_deltas([_row("base", "reference", 10, base)])))
    assert none.startswith("No lever")
    assert recipes.strongest_lever(recipes.Lab(rows)) is None  # no second budget: nothing held yet
    # a lever on top of the frontier, each Δ against the frontier point of its minutes: named where it held at each
    frontier = [_row("pack*4", "best", 4, base), _row("pack*5", "best", 5, base)]
    on_top = [_row("pack+more*8", "best", 4, plus(2)).with_delta(frontier[0]),
              _row("pack+more*10", "best", 5, plus(1)).with_delta(frontier[1])]
    held_on_top = recipes.strongest_lever(recipes.Lab(rows, checks, frontier, beside=on_top))
    assert "`more` held at every budget it ran: +0.200 [" in held_on_top and "+0.100 [" in held_on_top
    faded = [on_top[0], _row("pack+more*10", "best", 5, base).with_delta(frontier[1])]  # no gain at 5 minutes
    assert "On top of the frontier" not in recipes.strongest_lever(recipes.Lab(rows, checks, frontier, beside=faded))
    scale = recipes.frontier_line(frontier, beside=on_top)
    assert scale.startswith("The lab's frontier recipe (pack) reached τ") and "with `more` on top, " in scale


def test_the_doctor_names_the_lab_only_below_the_break_even():
    lines = lever_lines(1.3, 1.61)
    assert lines[-1] == recipes.frontier_line(LAB.frontier, beside=LAB.beside)
    assert all(f"{r.tau['held-out'].mean:.3f}" in lines[-1] for r in LAB.frontier) and "CPU minutes" in lines[-1]
    assert lever_lines(1.7, 1.61) == []  # a draft that pays is not told to change its recipe
