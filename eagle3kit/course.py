"""Notebook 06's conclusion, generated from the run: the summaries the notebooks left (``summary_NN.json``), the
recipe lab's frontier and the presets. Nothing in it is prose written ahead of the run, so it cannot disagree with
what the run measured."""

from __future__ import annotations

import os
import re
from pathlib import Path

from eagle3kit import presets
from eagle3kit.evaluate.recipes import BEFORE_HOST, Lab, LabRow, read_lab
from eagle3kit.plan.commands import torchrun_command
from eagle3kit.runner import read_summary

RUN_YAML = "RUN_YAML"  # a placeholder for the user's $RUN/run.yaml (a shell variable, written unquoted)
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
    if s06.get("vllm_lossless") is not None:
        lines.append(f"Lossless: vLLM's output with the draft equals its output without on all "
                     f"{s06.get('vllm_prompts')} prompts: {s06.get('vllm_lossless')}.")
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
    return [here, gpu, verdict(s06)]


def verdict(s06: dict) -> str:
    """One plain sentence: whether to serve the draft, from the speedups measured here and predicted there."""
    speed, there = s06.get("tokens_per_s_vllm"), s06.get("speedup_predicted_there")
    here = f"here (vLLM, {s06.get('vllm_batch')} sequences decoded together)"
    cases = {here: speed["draft"] / speed["plain"] if speed else None,
             f"on the planned GPU run (batch {s06.get('serve_batch')}, predicted)": there}
    known = {where: r for where, r in cases.items() if r is not None}
    if not known:
        return "Verdict: no speed was measured or predicted in this run."
    slower, faster = [w for w, r in known.items() if r < 1], [w for w, r in known.items() if r >= 1]
    pays = f"it pays above τ {_tau(s06.get('break_even_there'))} there"
    if not faster:
        return (f"Verdict: this draft slows decoding {' and '.join(slower)}; do not serve it yet ({pays}; what "
                "more minutes of training buy is below).")
    if not slower:
        return f"Verdict: this draft speeds decoding {' and '.join(faster)}; serve it."
    return f"Verdict: this draft speeds decoding {' and '.join(faster)} but slows it {' and '.join(slower)}."


MEMORISED_GAP = 0.1  # first-guess accuracy on the training split above the validation split's by this much: memorised


def why(s06: dict) -> str:
    """Why τ is what it is, from the run's own counts: the first draft token's acceptance (every later one needs it),
    the share of the held-out replies' tokens outside the draft vocab (a cap), and the gap between the first guess
    on the training split and on the validation split (memorised replies, when at least :data:`MEMORISED_GAP`)."""
    acc = s06.get("acceptance_there") or []
    parts = []
    if acc:
        terms = " + ".join(f"{a:.2f}" for a in acc)
        parts.append(f"The first draft token is accepted in {acc[0]:.2f} of rounds ({s06.get('acceptance_from')}); "
                     "every later draft token needs the ones before it accepted, and τ − 1 is the sum of these "
                     f"cumulative shares ({terms} = {sum(acc):.2f}), so the first one sets the scale.")
    outside = s06.get("outside_vocab_share")
    if outside:
        parts.append(f"{outside:.0%} of the held-out replies' tokens lie outside the draft's vocabulary, which it "
                     "can never propose: a cap that only a larger `draft_vocab_size`, or one counted on data nearer "
                     "these replies, lifts.")
    trained_acc, val_acc = s06.get("train_full_acc_0"), s06.get("val_full_acc_0")
    if trained_acc is not None and val_acc is not None:
        gap = trained_acc - val_acc
        parts.append(f"Teacher-forced on its own data, the draft's first guess is right {trained_acc:.2f} of the time "
                     f"on its {s06.get('training_samples')} training conversations and {val_acc:.2f} on the "
                     f"{s06.get('validation_samples')} it never trained on (speculators' validation split): "
                     + (f"trained {s06.get('train_steps_total')} steps, it has learnt its training replies better "
                        "than the language." if gap >= MEMORISED_GAP else "no memorising shows."))
    parts.append("Notebook 07 shows which tokens it misses, by class, and how τ moves with the context's length.")
    return " ".join(parts)


def recipe_of(row: LabRow, lab: Lab) -> dict[str, object]:
    """The data and training settings of the preset the lab made from ``row`` (its ``context``), empty if none."""
    for made in lab.context.values():
        if isinstance(made, dict) and made.get("recipe") == row.name:
            return {**made.get("data", {}), **made.get("train", {})}
    return {}


def conversations(row: LabRow, lab: Lab) -> int | None:
    """The conversations a lab row trained on: stated in its description, else its preset's, else the demo's."""
    found = re.search(r"(\d+) conversations", row.what)
    if found:
        return int(found.group(1))
    return recipe_of(row, lab).get("n_conversations") or lab.context.get("demo", {}).get("data", {}).get(
        "n_conversations")


def frontier_table(lab: Lab, minutes: float | None = None, tau: float | None = None, on: str = "held-out",
                   conversations_here: int | None = None, steps: int | None = None,
                   bench_tau: float | None = None) -> str:
    """The lab's best recipe at each budget as a Markdown table (what more minutes buy), and this run's row (its
    held-out τ simulated on its own prompts, its MT-bench τ by vLLM's counters where given)."""
    head = ["CPU minutes (data + training)", "conversations", "training steps", f"τ {on} [95 %]",
            "τ mt-bench [95 %]"]
    rows = []
    for r in sorted(lab.frontier, key=lambda r: r.minutes):
        rows.append([f"{r.minutes:.1f}", str(conversations(r, lab) or "?"), str(r.steps),
                     *(str(r.tau[s]) if s in r.tau else "" for s in (on, "mt-bench"))])
    if minutes is not None and tau is not None:
        rows.append([f"{minutes:.1f} (this run, this CPU)", str(conversations_here or ""), str(steps or ""),
                     f"{tau:.3f} (this run's held-out prompts)",
                     f"{bench_tau:.3f} (vLLM's counters)" if bench_tau is not None else ""])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def minutes_caveat(lab: Lab) -> str:
    """Whether the lab's CPU minutes and this CPU's are one clock: the lab says if its CPU had native bf16 (without
    it a step costs about twice as long, docs/demo.md); empty where the lab does not say."""
    from eagle3kit.device import native_bf16

    theirs = lab.context.get("machine", {}).get("native_bf16")
    if theirs is None:
        return ""
    mine = native_bf16()
    kind = {True: "with native bf16", False: "without native bf16 (AVX2 only)"}
    if theirs == mine:
        return f"The lab's minutes and this run's are both a 2-core CPU's {kind[mine]}."
    return (f"The lab measured its minutes on a 2-core CPU {kind[theirs]}; this CPU is one {kind[mine]}, so compare "
            f"this run with the lab by its conversations and steps, not its minutes.")


def row_options(row: LabRow, lab: Lab) -> dict[str, object]:
    """The notebook parameters that make the demo run a lab row's recipe: its conversations and its steps, split
    between notebook 05 (``first_steps`` + ``run_steps``) and notebook 06 (``train_steps``) as the demo splits them;
    its packs only where they differ from the demo's."""
    first = int(presets.parameters("demo", "05").get(FIRST_STEPS_KEY, 1))
    in_05 = row.steps // 2
    packs = recipe_of(row, lab).get("total_seq_len") or _default_packs()
    options = {"n_conversations": conversations(row, lab), "max_steps": row.steps,
               RUN_STEPS_KEY: max(1, in_05 - first), TRAIN_STEPS_KEY: row.steps - in_05,
               "total_seq_len": packs if packs != presets.parameters("demo", "05").get("total_seq_len",
                                                                                     _default_packs()) else None}
    return {k: v for k, v in options.items() if v is not None}


def set_options(row: LabRow, lab: Lab) -> str:
    """:func:`row_options` as ``--set`` options."""
    return " ".join(f"--set {k}={v}" for k, v in row_options(row, lab).items())


def _default_packs() -> int:
    """The typed default of ``total_seq_len`` (what the demo runs when its preset does not set it)."""
    return int(presets.typed_defaults()["total_seq_len"])


def reaches(lab: Lab, tau: float | None, on: str = "held-out") -> str:
    """How many of the lab's CPU minutes the best recipe needed to reach ``tau`` (the break-even), or that it did not
    within the frontier's longest budget."""
    if tau is None or not lab.frontier:
        return ""
    rows = sorted((r for r in lab.frontier if on in r.tau), key=lambda r: r.minutes)
    hit = next((r for r in rows if r.tau[on].mean >= tau), None)
    if hit:
        return (f"The lab's best recipe reached τ {tau:.2f}, where the planned GPU run pays, at {hit.minutes:.1f} CPU "
                "minutes.")
    before = sorted((r for r in lab.frontier_before if on in r.tau), key=lambda r: r.minutes)
    old = next((r for r in before if r.tau[on].mean >= tau), None)
    then = (f" The lab's first round, drawn faint in the figure, did reach it at {old.minutes:.0f} minutes "
            f"(τ {old.tau[on].mean:.2f}), on {BEFORE_HOST}, so the two are not one curve." if old else "")
    return (f"Within the lab's {rows[-1].minutes:.0f} CPU minutes the best recipe did not reach τ {tau:.2f}, where the "
            f"planned GPU run pays (it reached {rows[-1].tau[on].mean:.2f}); longer budgets were not measured with "
            f"the current training step.{then}")


def preset_changes(preset: str = "full", base: str = "demo") -> dict[str, dict[str, object]]:
    """What ``preset`` sets otherwise than ``base``, per notebook."""
    out = {}
    for nn in presets.NOTEBOOKS:
        mine, theirs = presets.parameters(preset, nn), presets.parameters(base, nn)
        changed = {k: v for k, v in mine.items() if theirs.get(k) != v}
        if changed:
            out[nn] = changed
    return out


OUTSIDE_VOCAB_CAP = 0.1  # a share of held-out reply tokens outside the draft vocab worth naming as a lever


def levers(s06: dict, s04: dict, lab: Lab) -> list[str]:
    """What this run's own diagnosis asks to change, as ``--set`` options (empty where nothing shows): more
    conversations where the draft memorised (:data:`MEMORISED_GAP`), a larger draft vocab where many reply tokens lie
    outside it (:data:`OUTSIDE_VOCAB_CAP`), each with the lab's evidence where it has a row."""
    out = []
    trained_acc, val_acc, n = s06.get("train_full_acc_0"), s06.get("val_full_acc_0"), s04.get("samples")
    if trained_acc is not None and val_acc is not None and trained_acc - val_acc >= MEMORISED_GAP and n:
        out.append(f"It memorised (first guess {trained_acc:.2f} on its training split, {val_acc:.2f} on validation): "
                   f"more conversations at the same epochs, `--set n_conversations={2 * n}` with twice the steps "
                   "(what the `full` preset does; docs/demo.md has what it measured).")
    outside, vocab = s06.get("outside_vocab_share"), s04.get("draft_vocab_size")
    if outside and outside >= OUTSIDE_VOCAB_CAP and vocab:
        rows = [r for r in lab.rows if r.name.startswith("vocab-") and "held-out" in r.delta]
        said = ", ".join(f"`{r.name}` {r.delta['held-out'].mean:+.3f}" for r in rows)
        out.append(f"{outside:.0%} of held-out reply tokens lie outside its {vocab}-token vocab, a cap that "
                   f"`--set draft_vocab_size={2 * vocab}` would raise; at this scale do not expect τ from it: a larger "
                   "head trains slower" + (f", and the recipe lab measured held-out τ {said} against its base at "
                                           f"{rows[0].budget:g} CPU minutes (bench/results/recipe.md)." if rows else
                                           ", and no lab row has measured it."))
    return out


def to_change(lab: Lab, s06: dict | None = None, s04: dict | None = None) -> list[str]:
    """The exact parameters to change: what this run's diagnosis asks (:func:`levers`), the presets, and the
    ``--set`` options of each frontier point (said to be a preset where they are one on this CPU)."""
    full = preset_changes()
    said = "; ".join(f"notebook {nn}: " + ", ".join(f"{k}={v}" for k, v in c.items()) for nn, c in full.items())
    lines = levers(s06 or {}, s04 or {}, lab)
    lines.append("`eagle3kit run-notebooks --preset demo` runs the demo; `--preset full` "
                 + (f"changes {said}." if said else "currently sets the demo's values."))
    for r in sorted(lab.frontier, key=lambda r: r.minutes):
        same = next((name for name in ("demo", "full") if _is_preset(row_options(r, lab), name)), None)
        lines.append(f"{r.minutes:.1f} CPU minutes ({r.what}): " + (
            f"the `{same}` preset's recipe on this CPU" if same else
            f"`eagle3kit run-notebooks --preset demo {set_options(r, lab)}`"))
    return lines


def _is_preset(options: dict[str, object], preset: str) -> bool:
    """Whether ``options`` (on top of the demo) give ``preset``'s values on this CPU."""
    mine = {k: v for nn in presets.NOTEBOOKS for k, v in presets.parameters(preset, nn).items() if k in options}
    return mine == options


def handoff(workdir: str | os.PathLike, s01: dict, s04: dict, s06: dict, n_gpus: int = 8) -> list[str]:
    """The GPU hand-off for the user's own verifier and conversations, in order: plan, data, doctor, YAML, a
    rehearsal, speculators' trainer under torchrun, the doctor on its checkpoint, serving. Notebook 05 ran the same
    launch and rehearsal on this run's SmolLM2 data (its YAML: ``launch_05/run.yaml``)."""
    verifier, gpu = s06.get("plan_verifier", "llama-3.1-8b"), s06.get("plan_gpu", "H100-80GB")
    yaml = Path(workdir) / LAUNCH_05 / "run.yaml"
    rehearsed = f" (notebook 05 rehearsed `{yaml}` the same way)" if yaml.exists() else ""
    return [f"`eagle3kit plan --verifier $VERIFIER --gpu {gpu} --gpus {n_gpus}`: disk, GPU memory per rank and hours "
            f"before anything runs (this run planned `{verifier}`).",
            "the `eagle3kit data` line `plan` printed, with `--source chats.jsonl --out $DATA` (its `--seq-length` and "
            "`--draft-vocab-size` are the plan's): the verifier's hidden states for your conversations, bf16 on a GPU; "
            "then `eagle3kit doctor --data $DATA`.",
            f"`eagle3kit launch --data $DATA --out $RUN --gpus {n_gpus} --gpu {gpu}`: speculators' TrainConfig YAML, "
            "checked to fit, and the torchrun line.",
            f"`eagle3kit rehearse --config $RUN/run.yaml --out $RUN/rehearsal --ranks 2 --steps 2 --compare`: a few "
            f"steps of speculators' own trainer first, beside eagle3kit's session{rehearsed}.",
            f"`{torchrun_command(RUN_YAML, n_gpus).replace(RUN_YAML, '$RUN/run.yaml')}`: the real run (add "
            "`--fsdp-shard` for FSDP2).",
            "`eagle3kit doctor --draft $RUN/checkpoints/checkpoint_best --data $DATA --why-tau`, then "
            "`vllm serve $RUN/checkpoints/checkpoint_best`."]


def conclusion(workdir: str | os.PathLike, lab: Lab | None = None) -> str:
    """Notebook 06's closing section as Markdown, from the run's summaries and the recipe lab."""
    s01, s04, s06 = (read_summary(workdir, nn) or {} for nn in ("01", "04", "06"))
    lab = lab or read_lab()
    parts = ["## Conclusion", "**The verdict.** " + " ".join(headline(s06)),
             "**What it buys.** " + " ".join(buys(s06)), "**Why it is what it is.** " + why(s06),
             "**What more minutes buy** (the recipe lab's best recipe at each budget, measured on this verifier at "
             "CPU scale; a GPU run lands elsewhere):",
             frontier_table(lab, s06.get("minutes_to_make"), s06.get("tau_trained"), conversations_here=s04.get(
                 "samples"), steps=s06.get("train_steps_total"), bench_tau=(s06.get("mt-bench_vllm") or {}).get("tau")),
             "The lab's held-out τ is simulated on its own 64 held-out prompts, this run's on its 16 (a different set: "
             "compare the MT-bench column, the same 80 turns in both).", minutes_caveat(lab),
             reaches(lab, s06.get("break_even_there")),
             "**What to change.**", "\n".join(f"- {line}" for line in to_change(lab, s06, s04)),
             "**On GPUs.**", "\n".join(f"{i}. {line}" for i, line in enumerate(handoff(workdir, s01, s04, s06), 1))]
    return "\n\n".join(parts)
