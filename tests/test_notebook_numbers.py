"""The number-consistency check on a small executed-notebook file: silent when the text agrees with the run's
summary, its parameters and its preset; it fires on a wrong batch, prompt count, parameter or preset value.
(The check on the seven executed ci notebooks is in tests/test_notebooks.py, on the run its module fixture made.)"""

from __future__ import annotations

import nbformat
import pytest

from eagle3kit import presets
from notebook_numbers import contradictions

SUMMARY = {"vllm_batch": 96, "serve_batch": 1, "held_out_prompts": 16, "mt-bench_prompts": 80, "k": 3}


def executed(tmp_path, markdown: str, printed: str, name: str = "06_x.ipynb", **params) -> str:
    """A notebook as papermill leaves it: injected parameters, a markdown cell, a code cell with printed output."""
    nb = nbformat.v4.new_notebook()
    inject = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in {"k": 0, **params}.items()))
    inject.metadata["tags"] = ["injected-parameters"]
    code = nbformat.v4.new_code_cell("print(line)")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [inject, nbformat.v4.new_markdown_cell(markdown), code]
    path = tmp_path / name
    nbformat.write(nb, path)
    return str(path)


RIGHT = ("Measured here (vLLM CPU build, 96 sequences decoded together as one batch): 16 held-out prompts, "
         "mt-bench: 80 prompts, k = 3; predicted for llama-3.1-8b at batch 1.")


def test_silent_when_every_number_agrees_with_the_run(tmp_path):
    assert contradictions(executed(tmp_path, "τ counts the bonus token; k = 3.", RIGHT), SUMMARY) == []


@pytest.mark.parametrize("wrong, what", [
    (RIGHT.replace("96 sequences", "16 sequences"), "batch 16"),  # the "16 prompts as one batch"
    (RIGHT.replace("at batch 1", "at batch 8"), "batch 8"),
    (RIGHT.replace("16 held-out", "12 held-out"), "held_out_prompts is 16"),
    (RIGHT.replace("80 prompts", "8 prompts"), "mt-bench_prompts is 80"),
    (RIGHT.replace("k = 3", "k = 4"), "k is 3"),
])
def test_fires_on_a_number_the_summary_contradicts(tmp_path, wrong, what):
    (problem,) = contradictions(executed(tmp_path, "", wrong), SUMMARY)
    assert what in problem and "06_x.ipynb cell 1 output" in problem


def test_a_parameter_stated_in_markdown_must_be_the_runs(tmp_path):
    assert contradictions(executed(tmp_path, "one batch: `n_prompts` = 4", "", n_prompts=4), {}) == []
    (problem,) = contradictions(executed(tmp_path, "one batch: `n_prompts` = 16", "", n_prompts=4), {})
    assert "this run's n_prompts is 4" in problem and "markdown cell 1" in problem


def test_a_preset_value_stated_in_markdown_must_be_the_presets(tmp_path):
    demo = presets.parameters("demo", "03")["long_seq_len"]
    right = executed(tmp_path, f"the long view (`long_seq_len` = {demo} in the demo preset)", "", "03_x.ipynb")
    assert contradictions(right, {}) == []
    stale = executed(tmp_path, "the long-context view (32768 in the demo preset)", "", "03_x.ipynb")
    (problem,) = contradictions(stale, {})
    assert "a value the demo preset of notebook 03 does not have" in problem
