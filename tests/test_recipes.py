"""The recipe lab's committed results (bench/results/recipe.json): every τ in its table recomputed from the per-prompt
records, the Markdown beside it written from them, the frontier drawn; the demo preset is the recipe the lab chose;
the doctor names the strongest lever only where a draft does not pay."""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib.figure import Figure

from eagle3kit import presets
from eagle3kit.doctor.low_tau import lever_lines
from eagle3kit.evaluate import recipes
from eagle3kit.evaluate.scores import PromptScore

RAW = json.loads(recipes.RESULTS.read_text()) if recipes.RESULTS.exists() else None
needs_results = pytest.mark.skipif(RAW is None, reason="bench/recipe.py has not written bench/results/recipe.json")


@needs_results
def test_each_row_is_its_records():
    rows, frontier, context = recipes.read_lab()
    assert context["budget"] > 0 and context["machine"]["cpus"] >= 1
    for raw, row in zip(RAW["rows"] + RAW["frontier"], rows + frontier, strict=True):
        for name, records in raw["records"].items():
            taus = [1 + r["accepted"] / r["rounds"] for r in records if r["rounds"]]
            assert row.tau[name].mean == pytest.approx(np.mean(taus))
            assert row.tau[name].low <= row.tau[name].mean <= row.tau[name].high
        assert row.minutes == pytest.approx(raw["minutes"]["data"] + raw["minutes"]["train_planned"])
        if raw["budget"]:  # a budgeted recipe spent its budget: data, then the steps that fill the rest
            assert row.minutes <= raw["budget"] + 0.05
    assert {r.name for r in rows} >= {recipes.REFERENCE, "base"}
    assert {"mt-bench", "held-out"} <= set(rows[0].tau)


@needs_results
def test_the_markdown_table_is_written_from_the_json(tmp_path):
    out = tmp_path / "recipe.json"
    recipes.write_lab(out, RAW["rows"], RAW["frontier"], **RAW["context"])
    assert out.with_suffix(".md").read_text() == recipes.RESULTS.with_suffix(".md").read_text()


@needs_results
def test_the_frontier_is_drawn_with_this_run_and_the_bar():
    rows, frontier, _ = recipes.read_lab()
    fig = recipes.plot_frontier(frontier or rows[:2], here=(5.0, 1.3), bar=1.61)
    assert isinstance(fig, Figure)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "this run" in labels and any("1.61" in label for label in labels)


@needs_results
def test_the_demo_preset_is_the_recipe_the_lab_chose():
    """Change the demo's recipe and this fails until bench/recipe.py has measured it (its frontier's recipe)."""
    chosen = RAW["context"].get("demo")
    assert chosen, "recipe.json names no demo recipe (bench/recipe.py --demo NAME)"
    data, train = ({**presets.typed_defaults(), **presets.parameters("demo", nn)} for nn in ("04", "05"))  # as run
    for key, value in chosen["data"].items():
        assert data[key] == value, key
    for key, value in chosen["train"].items():
        assert train[key] == value, key


def test_strongest_lever_is_named_only_below_the_break_even():
    one = [PromptScore(str(i), "held-out", 10, a) for i, a in enumerate((2, 4, 6))]
    row = {"name": "base", "lever": "reference", "what": "w", "minutes": {"data": 1, "train": 4, "train_planned": 4},
           "steps": 10, "epochs": 1.0, "budget": 5, "records": {"held-out": [vars(r) for r in one]}}
    better = {**row, "name": "x", "lever": "loss", "what": "a loss",
              "records": {"held-out": [{**vars(r), "accepted": r.accepted + 3} for r in one]}}
    line = recipes.strongest_lever([recipes.LabRow.from_result(r) for r in (row, better)])
    assert "loss (a loss)" in line and "+0.300" in line and "not a forecast" in line
    assert recipes.strongest_lever([recipes.LabRow.from_result(better)]) is None  # no base row: nothing to compare
    if RAW is not None:
        lines = lever_lines(1.3, 1.61)
        assert lines and "below the 1.61" in lines[0]
        if RAW["frontier"]:  # the frontier's τ, each one the mean of its records
            rows = [recipes.LabRow.from_result(r) for r in RAW["frontier"]]
            assert all(f"{r.tau['held-out'].mean:.3f}" in lines[-1] for r in rows) and "CPU minutes" in lines[-1]
    assert lever_lines(1.7, 1.61) == []  # a draft that pays is not told to change its recipe
