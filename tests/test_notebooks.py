"""Every notebook runs headlessly through papermill with the ci preset; notebooks are committed clean."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jupytext
import nbformat
import pandas as pd
import papermill
import pytest
import torch

from eagle3kit import presets
from eagle3kit import notebook
from eagle3kit.cli import main
from eagle3kit.data.directory import DataDir
from eagle3kit.draft.config import DraftSpec
from eagle3kit.params import AS_RUN, fold_injected
from notebook_numbers import contradictions
from notebook_outputs import output_problems
from eagle3kit.runner import notebook_parameters, notebooks, read_summary, record_summary, run_notebooks
from eagle3kit.train.session import TrainSettings

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = notebooks(NOTEBOOK_DIR)


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("01_")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_hygiene(path):
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    for cell in cells:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and not cell.get("execution_count"), "commit notebooks without outputs"
    declared = set(papermill.inspect_notebook(str(path)))
    assert "workdir" in declared
    for preset, own in presets.NOTEBOOKS.get(path.name[:2], {}).items():  # the presets and their float32 CPU values
        assert set(own) <= declared, f"preset {preset} passes {set(own) - declared} that the notebook does not declare"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_matches_its_jupytext_source(path):
    """notebooks/NN_*.py (jupytext percent format) is the source; the .ipynb must hold the same cells.

    After editing the .py: ``.venv/bin/jupytext --sync notebooks/*.py`` (or ``make notebooks``)."""
    source = path.with_suffix(".py")
    assert source.exists(), f"{source.name} is missing: run jupytext --set-formats ipynb,py:percent {path}"
    text, ipynb = jupytext.read(source), jupytext.read(path)

    def cells(nb):
        return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]

    assert cells(text) == cells(ipynb), f"{path.name} and {source.name} differ: run jupytext --sync {source}"


def test_presets_write_a_typed_default_once():
    """A preset sets only what differs from DraftSpec / TrainSettings; the runner passes those defaults itself. A
    preset's float32 CPU values restate a default only to undo what the preset itself sets otherwise."""
    defaults = presets.typed_defaults()
    assert defaults["ttt_steps"] == DraftSpec().ttt_steps and defaults["lr"] == TrainSettings().lr
    for number, by_preset in presets.NOTEBOOKS.items():
        for preset, values in by_preset.items():
            base = preset.removesuffix(presets.FLOAT32_CPU)
            undone = set()
            if base != preset:  # a variant may undo its preset's values and those of the variant it is based on
                undone = set(presets.parameters(base, number, "")) | (set(presets.parameters(
                    presets.BASED_ON[base], number, presets.FLOAT32_CPU)) if base in presets.BASED_ON else set())
            same = {k for k, v in values.items() if k in defaults and defaults[k] == v and k not in undone}
            assert not same, f"presets.NOTEBOOKS[{number!r}][{preset!r}] restates the typed default of {same}"
            assert base in presets.NAMES, f"{preset!r} is the values of no preset"


def test_demo_and_full_take_the_shorter_recipe_on_a_cpu_without_native_bf16():
    """A float32 CPU takes about twice as long a step: there the demo and full read the lab's shorter points; the
    runner asks this CPU which (docs/demo.md measures both kinds)."""
    def steps(preset, suffix):
        return presets.parameters(preset, "05", suffix)["max_steps"]

    for preset in ("demo", "full"):
        assert steps(preset, presets.FLOAT32_CPU) < steps(preset, "")
        fast, slow = (presets.parameters(preset, "04", s)["n_conversations"] for s in ("", presets.FLOAT32_CPU))
        assert slow < fast
    assert all(steps("demo", s) < steps("full", s) for s in ("", presets.FLOAT32_CPU))
    for preset, suffix in itertools.product(("demo", "full"), ("", presets.FLOAT32_CPU)):
        p05, p06 = presets.parameters(preset, "05", suffix), presets.parameters(preset, "06", suffix)
        assert p05["first_steps"] + p05["run_steps"] + p06["train_steps"] == p05["max_steps"]  # 05 then 06
    assert presets.parameters("ci", "05", presets.FLOAT32_CPU) == presets.parameters("ci", "05", "")
    defaults = presets.typed_defaults()
    for preset, suffix in itertools.product(presets.NAMES, ("", presets.FLOAT32_CPU)):  # 04 shows 05's packs
        packs = [{**defaults, **presets.parameters(preset, nn, suffix)}["total_seq_len"] for nn in ("04", "05")]
        assert packs[0] == packs[1], (preset, suffix, packs)
    assert presets.parameters("demo", "05") == presets.parameters("demo", "05", presets.cpu_suffix())


def test_the_runner_passes_typed_defaults_then_preset_then_overrides(tmp_path):
    first = notebook_parameters(NOTEBOOKS[0], "ci", {"seed": 3}, tmp_path)
    assert first["ttt_steps"] == DraftSpec().ttt_steps and first["verifier"] == DraftSpec().verifier
    assert first["seed"] == 3 and first["workdir"] == str(tmp_path) and "lr" not in first  # 01 declares no lr
    fifth = notebook_parameters(next(p for p in NOTEBOOKS if p.name.startswith("05")), "demo", {}, tmp_path)
    assert fifth["max_steps"] == presets.parameters("demo", "05")["max_steps"] != TrainSettings().max_steps
    assert fifth["lr"] == TrainSettings().lr  # the preset leaves it to the typed default
    assert fifth["total_seq_len"] == presets.parameters("demo", "05").get("total_seq_len",
                                                                          TrainSettings().total_seq_len)


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ci-run")
    return out, run_notebooks(out, NOTEBOOK_DIR, preset="ci", stop_on_failure=False, progress=False)


@pytest.mark.slow
def test_all_notebooks_run_with_the_ci_preset(ci_run):
    out, results = ci_run
    assert [r.notebook for r in results] == [p.name for p in NOTEBOOKS]
    failed = [f"{r.notebook}: cell {r.failing_cell}: {r.error}" for r in results if r.status != "ok"]
    assert not failed, "\n".join(failed)
    problems = [p for path in NOTEBOOKS for p in output_problems(out / path.name)]
    assert not problems, "\n".join(problems)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] and len(summary["notebooks"]) == len(NOTEBOOKS)
    for r in results:
        print(f"{r.notebook}: {r.seconds:.1f}s {r.summary or ''}")
    by_number = {r.notebook[:2]: r.summary for r in results}
    made = by_number["06"]["minutes_to_make"]  # 06 placed the run on the τ-vs-budget curve: data + training time
    assert 0 < made < sum(r.seconds for r in results) / 60
    per_category = by_number["06"]["mt-bench_sim_categories"]  # the ci preset: one MT-bench prompt a category
    assert len(per_category) == 8 + 1 and all(t >= 1 for t in per_category.values())  # + overall
    why = by_number["07"]  # 07 looked at 06's draft and replies: its token fates count what 06 scored
    held = presets.NOTEBOOKS["06"]["ci"]["n_prompts"]
    assert why["same_as_06"] == f"{held}/{held}" and why["class_prompts"] > 0
    ci = {n: presets.NOTEBOOKS[n]["ci"] for n in ("04", "05")}  # 06 resumed 05's session on 04's data
    assert set(why["context_tau"]) == {"256", "1k"}
    # the longest context the draft saw: its longest training document, within the pack and the data's cap
    assert 0 < why["trained_length"] <= min(ci["05"]["total_seq_len"], ci["04"]["seq_length"])
    assert all((out / p.name).exists() for p in NOTEBOOKS)
    for name in ("01_build_draft_config.ipynb", "02_debug_attention.ipynb"):  # their appendices' long tables, folded
        assert "<details><summary>all " in (out / name).read_text(), name
    for path in NOTEBOOKS:  # one parameters cell a notebook, holding the values that ran
        cells = nbformat.read(out / path.name, as_version=4).cells
        tagged = [c for c in cells if {"parameters", "injected-parameters"} & set(c.metadata.get("tags", []))]
        assert len(tagged) == 1 and AS_RUN in tagged[0].metadata["tags"], path.name
        assert f'workdir = "{out / "work"}"' in tagged[0].source, path.name


@pytest.mark.slow
def test_executed_notebooks_state_only_numbers_their_run_measured(ci_run, tmp_path):
    """Every batch, prompt count, parameter and preset value the executed ci notebooks state agrees with their own
    summaries and presets; the same check fires on notebook 06 edited to state a wrong batch."""
    out, _results = ci_run
    summaries = {p.name: read_summary(out / "work", p.name[:2]) or {} for p in NOTEBOOKS}
    problems = [x for p in NOTEBOOKS for x in contradictions(out / p.name, summaries[p.name])]
    assert not problems, "\n".join(problems)
    sixth = next(p for p in NOTEBOOKS if p.name.startswith("06"))
    nb = nbformat.read(out / sixth.name, as_version=4)
    wrong = summaries[sixth.name]["serve_batch"] + 7
    nb.cells.append(nbformat.v4.new_markdown_cell(f"The planned GPU run is predicted at batch {wrong}."))
    nbformat.write(nb, tmp_path / sixth.name)
    (problem,) = contradictions(tmp_path / sixth.name, summaries[sixth.name])
    assert f"states batch {wrong}" in problem


def test_runner_reports_a_failing_cell(tmp_path):
    """A notebook that raises is reported with its cell and error, and the run exits non-zero."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("workdir = ''")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("raise ValueError('boom')")]
    src = tmp_path / "nbs"
    src.mkdir()
    nbformat.write(nb, src / "99_fail.ipynb")  # no preset values for 99: only workdir is passed
    results = run_notebooks(tmp_path / "out", src, preset="ci", progress=False)
    assert results[0].status == "failed" and results[0].failing_cell == 3 and "ValueError: boom" in results[0].error
    cells = nbformat.read(tmp_path / "out" / "99_fail.ipynb", as_version=4).cells  # folded though it failed
    (folded,) = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in cells)
    assert AS_RUN in folded.metadata["tags"] and "workdir = ''" not in folded.source


def test_the_executed_notebook_keeps_one_parameters_cell_with_the_values_that_ran(tmp_path):
    """papermill's injected values go into the defaults' lines (comments kept, new names added); a notebook with
    nothing injected is left as it was."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("# defaults for a run by hand\nlr = 1e-3  # the peak learning rate\nsteps = 10")
    params.metadata["tags"] = ["parameters"]
    injected = nbformat.v4.new_code_cell('# Parameters\nlr = 0.002\nworkdir = "/x/work"\n')
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells = [params, injected, nbformat.v4.new_code_cell("print(lr)")]
    nbformat.write(nb, tmp_path / "run.ipynb")
    assert fold_injected(tmp_path / "run.ipynb", "demo")
    cells = nbformat.read(tmp_path / "run.ipynb", as_version=4).cells
    assert len(cells) == 2 and cells[1].source == "print(lr)"
    assert cells[0].source.splitlines() == [
        "# The values this run used: the `demo` preset (`eagle3kit run-notebooks --preset demo`) over the notebook's"
        " defaults.", "lr = 0.002  # the peak learning rate", "steps = 10", 'workdir = "/x/work"']
    nb.cells = [params, cells[1]]
    nbformat.write(nb, tmp_path / "by_hand.ipynb")
    before = (tmp_path / "by_hand.ipynb").read_text()
    assert not fold_injected(tmp_path / "by_hand.ipynb", "demo")
    assert (tmp_path / "by_hand.ipynb").read_text() == before
    assert main(["run-notebooks", "--preset", "ci", "--out", str(tmp_path / "cli"), "--only", "99"]) == 2


def test_every_notebook_starts_with_the_one_setup():
    """The first code cell after the parameters calls :func:`eagle3kit.notebook.setup`; no cell sets threads, pandas
    options or the workdir by hand."""
    for path in NOTEBOOKS:
        code = [c.source for c in jupytext.read(path.with_suffix(".py")).cells if c.cell_type == "code"]
        assert "workdir = setup(workdir" in code[1], f"{path.name}: the cell after the parameters does not call setup"
        for hand in ("set_num_threads", "pd.set_option", ".mkdir(", "Path(workdir)"):
            assert not any(hand in cell for cell in code), f"{path.name} does {hand} itself"


def test_setup_seeds_caps_threads_widens_tables_and_makes_the_workdir(tmp_path):
    threads, width = torch.get_num_threads(), pd.get_option("display.max_colwidth")
    try:
        pd.set_option("display.max_colwidth", 10)
        workdir = notebook.setup(str(tmp_path / "run" / "work"), seed=3, threads=1)
        drawn = torch.rand(4)
        assert workdir == tmp_path / "run" / "work" and workdir.is_dir()
        assert torch.get_num_threads() == 1 and pd.get_option("display.max_colwidth") == notebook.MAX_COLWIDTH
        torch.manual_seed(3)
        assert torch.equal(drawn, torch.rand(4))
        notebook.setup(workdir)  # again, without a seed or threads: the threads stay as they are
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
        pd.set_option("display.max_colwidth", width)


def test_an_appendix_table_or_text_is_folded_under_its_line_with_every_row():
    df = pd.DataFrame({"field": ["a", "b"], "value": [1, 2]})
    table = notebook.folded(df, "all 2 fields <click>").data
    assert table.startswith("<details><summary>all 2 fields &lt;click&gt;</summary>") and table.endswith("</details>")
    assert df.to_html() in table  # every row, only folded
    text = notebook.folded("line 1\nline <2>", "two lines").data
    assert "<pre>line 1\nline &lt;2&gt;</pre>" in text


def test_a_printed_path_names_the_workdir_or_home_not_this_machines_folders(tmp_path):
    work = tmp_path / "run" / "work"
    assert notebook.short(work / "draft_06", work) == "workdir/draft_06"
    assert notebook.short(Path.home() / ".cache" / "v", work) == "~/.cache/v"
    outside = Path("/opt") if not Path.home().is_relative_to("/opt") else Path("/srv")
    assert notebook.short(outside / "x", work) == str(outside / "x")  # elsewhere: as it is


def test_05_and_06_share_one_small_data_set_and_prefer_04s(tmp_path, tiny_data):
    """Without notebook 04's data both notebooks get the same small set (made once, from one home of its size); with
    04's data complete, that."""
    first = notebook.training_data(tmp_path, "tiny")
    assert first.path == tmp_path / notebook.SMALL_DATA_DIR and first.complete
    assert first.n_samples == notebook.SMALL_DATA["n_conversations"] and first.seq_length == \
        notebook.SMALL_DATA["seq_length"] and first.draft_vocab_sizes == [notebook.SMALL_DATA["draft_vocab_size"]]
    written = {p: p.stat().st_mtime_ns for p in first.hidden_states_dir.iterdir()}
    again = notebook.training_data(tmp_path, "tiny")  # notebook 06 after 05: the same folder, nothing rewritten
    assert again.path == first.path and {p: p.stat().st_mtime_ns for p in again.hidden_states_dir.iterdir()} == written
    (tmp_path / notebook.DATA).symlink_to(tiny_data, target_is_directory=True)
    assert notebook.training_data(tmp_path, "tiny").path == tmp_path / notebook.DATA
    assert DataDir(tmp_path / notebook.DATA).complete


def test_minutes_to_make_adds_notebook_04s_data_time_to_the_training_steps(tmp_path):
    history = [{"seconds": 30.0}, {"seconds": 90.0}]
    assert notebook.minutes_to_make(tmp_path, history) == (0.0, 2.0)  # no summary from 04: no data minutes
    record_summary(tmp_path, "04", regenerate_seconds=60, hidden_states_seconds=120, samples=12)
    assert notebook.minutes_to_make(tmp_path, history) == (3.0, 2.0)
