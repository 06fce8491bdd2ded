"""Notebook 06's conclusion, generated from the run: the summaries the notebooks left (``summary_NN.json``), the
recipe lab's frontier and the presets. Nothing in it is prose written ahead of the run, so it cannot disagree with
what the run measured."""

from __future__ import annotations

import os
import re
from pathlib import Path

from eagle3kit import presets
from eagle3kit.evaluate.recipes import Lab, LabRow, read_lab
from eagle3kit.plan.commands import torchrun_command
from eagle3kit.runner import read_summary

LAUNCH_05 = "launch_05"  # notebook 05's launch folder: its run.yaml is what torchrun runs on the GPUs
FIRST_STEPS_KEY, RUN_STEPS_KEY, TRAIN_STEPS_KEY = "first_steps", "run_steps", "train_steps"


def _tau(value: object) -> str:
    return "n/a" if value is None else f"{float(value):.2f}"


def headline(s06: dict) -> list[str]:
    """The draft's τ, each number with what measured it: vLLM's counters when it served the draft, else the
    simulation; the named set beside; the decode loop's correctness check apart, never as a τ of its own."""
    k = s06.get("k")
    ceiling = f"k = {k}, so at most k + 1 = {k + 1}" if k else ""
    held = s06.get("held_out_prompts")
    if s06.get("tau_vllm") is not None:
        lines = [f"**τ = {_tau(s06['tau_vllm'])}** on {s06.get('vllm_prompts')} held-out prompts, counted by vLLM's "
                 f"spec-decode counters ({s06.get('vllm_version') or 'vLLM'} CPU build, "
                 f"{s06.get('vllm_batch')} sequences decoded together, greedy, {ceiling}). Simulated on the same "
                 f"prompts: {_tau(s06.get('tau_trained'))}."]
    else:
        lines = [f"**τ = {_tau(s06.get('tau_trained'))}** on {held} held-out prompts, simulated (the verifier's "
                 f"greedy replies teacher-forced through speculators' forward, transformers, float32; {ceiling}). "
                 "vLLM did not serve the draft in this run (`vllm_check = False`)."]
    for key, engine in (("vllm", "vLLM's per-request counters"), ("sim", "simulated")):
        for name in ("mt-bench",):
            overall = s06.get(f"{name}_{key}")
            if overall:
                lines.append(f"Beside it, MT-bench's first turns: τ {overall['tau']:.2f} [{overall['low']:.2f}, "
                             f"{overall['high']:.2f}] over {s06.get(f'{name}_prompts')} prompts ({engine}, 95 % "
                             "interval over the prompts).")
                break
    lines.append(f"Untrained, the same draft scores {_tau(s06.get('tau_untrained'))} (simulated). "
                 f"{s06.get('tau_convention', '')}.")
    lines.append(f"Correctness check, not a τ measurement: the decode loop's output equals plain greedy decoding on "
                 f"{s06.get('decode_prompts_trained')} prompt(s) (lossless: {s06.get('lossless')}).")
    return lines


def buys(s06: dict) -> list[str]:
    """What the draft buys: measured here (vLLM, when it ran) and predicted on the planned GPU run."""
    speed = s06.get("tokens_per_s_vllm")
    if speed:
        here = (f"Here (vLLM CPU build, {s06.get('vllm_batch')} sequences decoded together): {speed['draft']:.0f} "
                f"tokens/s with the draft, {speed['plain']:.0f} without ({speed['draft'] / speed['plain']:.2f}x).")
    else:
        here = "Here: not measured (vLLM did not serve the draft; `vllm_check = True` measures it)."
    there = s06.get("speedup_predicted_there")
    gpu = (f"On the planned GPU run ({s06.get('plan_verifier')} on one {s06.get('plan_gpu')}, batch "
           f"{s06.get('serve_batch')}, vLLM), predicted: {there:.2f}x at this acceptance "
           f"({s06.get('acceptance_from')}); the draft pays above τ {_tau(s06.get('break_even_there'))}."
           if there is not None else "On a GPU: not predicted in this run.")
    return [here, gpu]


def why(s06: dict) -> str:
    """Why τ is what it is, in one sentence, and where the diagnosis is."""
    acc = s06.get("acceptance_there") or []
    first = f"{acc[0]:.2f}" if acc else "n/a"
    return (f"The first draft token is accepted in {first} of rounds (cumulative acceptance at position 1, "
            f"{s06.get('acceptance_from', 'simulated')}); every later position needs the earlier ones accepted, so "
            "τ stays near 1 until that first guess is right. The draft is small and trained for minutes on a few "
            "hundred conversations: notebook 07 shows which tokens it misses (by class) and how τ moves with the "
            "context's length.")


def conversations(row: LabRow, lab: Lab) -> int | None:
    """The conversations a lab row trained on: stated in its description, else the demo's."""
    found = re.search(r"(\d+) conversations", row.what)
    if found:
        return int(found.group(1))
    return lab.context.get("demo", {}).get("data", {}).get("n_conversations")


def frontier_table(lab: Lab, minutes: float | None = None, tau: float | None = None, on: str = "held-out") -> str:
    """The lab's best recipe at each budget as a Markdown table (what more minutes buy), and this run's row."""
    head = ["CPU minutes (data + training)", "conversations", "training steps", f"τ {on} [95 %]",
            "τ mt-bench [95 %]"]
    rows = []
    for r in sorted(lab.frontier, key=lambda r: r.minutes):
        rows.append([f"{r.minutes:.1f}", str(conversations(r, lab) or "?"), str(r.steps),
                     *(str(r.tau[s]) if s in r.tau else "" for s in (on, "mt-bench"))])
    if minutes is not None and tau is not None:
        rows.append([f"{minutes:.1f} (this run)", "", "", f"{tau:.3f} (this run's held-out prompts)", ""])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def set_options(row: LabRow, lab: Lab) -> str:
    """The ``--set`` options that make the demo run a lab row's recipe: its conversations and its steps, split
    between notebook 05 (``first_steps`` + ``run_steps``) and notebook 06 (``train_steps``) as the demo splits them."""
    first = int(presets.parameters("demo", "05").get(FIRST_STEPS_KEY, 1))
    in_05 = row.steps // 2
    options = {"n_conversations": conversations(row, lab), "max_steps": row.steps,
               RUN_STEPS_KEY: max(1, in_05 - first), TRAIN_STEPS_KEY: row.steps - in_05}
    return " ".join(f"--set {k}={v}" for k, v in options.items() if v is not None)


def preset_changes(preset: str = "full", base: str = "demo") -> dict[str, dict[str, object]]:
    """What ``preset`` sets otherwise than ``base``, per notebook."""
    out = {}
    for nn in presets.NOTEBOOKS:
        mine, theirs = presets.parameters(preset, nn), presets.parameters(base, nn)
        changed = {k: v for k, v in mine.items() if theirs.get(k) != v}
        if changed:
            out[nn] = changed
    return out


def to_change(lab: Lab) -> list[str]:
    """The exact parameters to change: the presets, and the ``--set`` options of each frontier point."""
    full = preset_changes()
    said = "; ".join(f"notebook {nn}: " + ", ".join(f"{k}={v}" for k, v in c.items()) for nn, c in full.items())
    lines = ["`eagle3kit run-notebooks --preset demo` runs the demo; `--preset full` "
             + (f"changes {said}." if said else "currently sets the demo's values.")]
    for r in sorted(lab.frontier, key=lambda r: r.minutes):
        lines.append(f"{r.minutes:.1f} CPU minutes ({r.what}): `eagle3kit run-notebooks --preset demo "
                     f"{set_options(r, lab)}`")
    return lines


def handoff(workdir: str | os.PathLike, s01: dict, s04: dict, s06: dict, n_gpus: int = 8) -> list[str]:
    """The GPU hand-off, in order: plan the run, write its YAML, run speculators' trainer under torchrun."""
    data = s04.get("data_dir", "<data_dir>")
    yaml = Path(workdir) / LAUNCH_05 / "run.yaml"
    return [f"`eagle3kit plan --verifier {s06.get('plan_verifier', 'llama-3.1-8b')} --gpu "
            f"{s06.get('plan_gpu', 'H100-80GB')}`: disk, GPU memory per rank and hours of the real run.",
            f"`eagle3kit launch --data {data} --out launch --gpus {n_gpus}` (the verifier's data made on the "
            "cluster, `--cluster-data`): speculators' TrainConfig YAML, checked to fit, and the command.",
            f"`{torchrun_command(yaml if yaml.exists() else 'launch/run.yaml', n_gpus)}`: speculators' own "
            "trainer (add `--fsdp-shard` for FSDP2); notebook 05 rehearsed this very command on the CPU."]


def conclusion(workdir: str | os.PathLike, lab: Lab | None = None) -> str:
    """Notebook 06's closing section as Markdown, from the run's summaries and the recipe lab."""
    s01, s04, s06 = (read_summary(workdir, nn) or {} for nn in ("01", "04", "06"))
    lab = lab or read_lab()
    parts = ["## Conclusion", "**The verdict.** " + " ".join(headline(s06)),
             "**What it buys.** " + " ".join(buys(s06)), "**Why it is what it is.** " + why(s06),
             "**What more minutes buy** (the recipe lab's best recipe at each budget, measured on this verifier at "
             "CPU scale; a GPU run lands elsewhere):", frontier_table(lab, s06.get("minutes_to_make"),
                                                                      s06.get("tau_trained")),
             "**What to change.**", "\n".join(f"- {line}" for line in to_change(lab)),
             "**On GPUs.**", "\n".join(f"{i}. {line}" for i, line in enumerate(handoff(workdir, s01, s04, s06), 1))]
    return "\n\n".join(parts)
