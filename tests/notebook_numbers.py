"""Numbers an executed notebook states that its own run contradicts.

:func:`contradictions` reads a notebook executed by papermill (its markdown and its printed outputs) with the summary
the notebook recorded (``summary_NN.json``) and its injected parameters, and names every statement whose number
disagrees with them: a batch (where the summary records one), a prompt count, a parameter or summary value stated
as ``name = N`` (``name=N`` is code, e.g. a refused example), and, in
markdown, a value said to be a preset's (``N in the demo preset``) that the preset no longer has.
"""

from __future__ import annotations

import ast
import os
import re

import nbformat

from eagle3kit import presets
from eagle3kit.params import AS_RUN
from notebook_outputs import code_cells, output_texts

NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
BATCH = [re.compile(p, re.I) for p in (rf"{NUMBER} (?:sequences|prompts) (?:decoded together|as one batch)",
                                         rf"\bat batch {NUMBER}", rf"\bone batch of {NUMBER}")]
PROMPTS = {"held_out_prompts": re.compile(rf"{NUMBER} held-out prompts", re.I),
           "mt-bench_prompts": re.compile(rf"mt-bench(?:'s first turns)?: {NUMBER} prompts", re.I)}
PRESET_VALUE = re.compile(rf"(?:`?(\w+)`? (?:is|=) )?{NUMBER} in the (\w+) preset", re.I)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def injected(nb: nbformat.NotebookNode) -> dict[str, object]:
    """The parameters papermill injected (literal assignments of the ``injected-parameters`` cell, or of the
    parameters cell they were folded into: :func:`eagle3kit.params.fold_injected`)."""
    cell = next((c for c in nb.cells if {"injected-parameters", AS_RUN} & set(c.get("metadata", {}).get("tags", []))),
                None)
    out = {}
    for node in ast.parse(cell.source if cell else "").body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def texts(nb: nbformat.NotebookNode) -> list[tuple[str, str, bool]]:
    """(where, text, is markdown) for every markdown cell and every code cell's outputs."""
    found, markdown = [], 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            markdown += 1
            found.append((f"markdown cell {markdown}", cell.source, True))
    for number, cell in code_cells(nb):
        found += [(f"cell {number} output", t, False) for o in cell.get("outputs", []) for t in output_texts(o)]
    return found


def contradictions(ipynb_path: str | os.PathLike, summary: dict) -> list[str]:
    """Every number the executed notebook states that its summary, its parameters or its preset contradicts."""
    nb = nbformat.read(os.fspath(ipynb_path), as_version=4)
    name, nn = os.path.basename(ipynb_path), os.path.basename(ipynb_path)[:2]
    params = injected(nb)
    known = {k: v for k, v in {**params, **summary}.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    batches = {v for k, v in summary.items() if "batch" in k and isinstance(v, int)}
    problems = []
    for where, text, markdown in texts(nb):
        for pattern in BATCH if batches else ():  # a notebook whose summary records no batch states none of its own
            for m in pattern.finditer(text):
                if _number(m.group(1)) not in batches:
                    problems.append(f"{name} {where}: states batch {m.group(1)} ({m.group(0)!r}); the run's summary "
                                    f"has {sorted(batches) or 'no batch'}")
        for key, pattern in PROMPTS.items():
            for m in pattern.finditer(text):
                if key in summary and _number(m.group(1)) != summary[key]:
                    problems.append(f"{name} {where}: states {m.group(0)!r}; the summary's {key} is {summary[key]}")
        for key, value in known.items():
            for m in re.finditer(rf"(?<![\w.]){re.escape(key)}`? = {NUMBER}(?![\d.])", text):  # `a=1`: code
                if _number(m.group(1)) != value:
                    problems.append(f"{name} {where}: states {m.group(0)!r}; this run's {key} is {value}")
        if markdown:
            for m in PRESET_VALUE.finditer(text):
                param, value, preset = m.group(1), _number(m.group(2)), m.group(3)
                if preset not in presets.NAMES:
                    continue
                own = presets.parameters(preset, nn)
                allowed = {own[param]} if param in own else set(own.values())
                if value not in {v for v in allowed if isinstance(v, (int, float))}:
                    problems.append(f"{name} {where}: states {m.group(0)!r}, a value the {preset} preset of notebook "
                                    f"{nn} does not have")
    return problems
