"""Notebook 06's conclusion, generated from the run: the summaries the notebooks left (``summary_NN.json``), the
recipe lab's frontier and the presets. Nothing in it is prose written ahead of the run, so it cannot disagree with
what the run measured."""

from __future__ import annotations

import os

from eagle3kit.evaluate.recipes import Lab, frontier_line, read_lab, strongest_lever
from eagle3kit.next_run import MEMORISED_GAP, frontier_table, minutes_caveat, prompt_sets, reaches, to_change
from eagle3kit.gpu_steps import handoff, handoff_table
from eagle3kit.plan.serving_speed import SINGLE_GPU_ERROR
from eagle3kit.runner import read_summary




def _of(read: int | None, split: int | None) -> str:
    """"its 369" or "41 of its 369": how many of a split's conversations a measurement read."""
    return f"its {read}" if split is None or read == split else f"{read} of its {split}"

def _tau(value: object, decimals: int = 2) -> str:
    return "n/a" if value is None else f"{float(value):.{decimals}f}"


def _headline_tau(s06: dict) -> float | None:
    """The τ the verdict states: vLLM's counters where it served the draft, else the simulation's."""
    return s06.get("tau_vllm") if s06.get("tau_vllm") is not None else s06.get("tau_trained")


def bench_tau(overall: dict, with_pooled: bool = True) -> str:
    """A named set's τ as the recipe lab and the per-category table count it: the mean over its prompts with its
    interval; with ``with_pooled``, all rounds pooled (how vLLM's aggregate counters count) beside it, labelled."""
    mean = f"{overall['tau']:.2f} [{overall['low']:.2f}, {overall['high']:.2f}]"
    if overall.get("pooled_low") is None or not with_pooled:
        return mean
    pooled = f"{overall['pooled']:.2f} [{overall['pooled_low']:.2f}, {overall['pooled_high']:.2f}]"
    return f"{mean} (the mean over its prompts, as the recipe lab counts; all rounds pooled: {pooled})"


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
                 f"prompts: {_tau(s06.get('tau_trained'))}; vLLM's counters read a little higher on replies this "
                 "short, since they count a reply's last round past its end (notebook 07 counts it)."]
    else:
        lines = [f"**τ = {_tau(s06.get('tau_trained'))}** on {held} held-out prompts, simulated (the verifier's "
                 f"greedy replies teacher-forced through speculators' forward, transformers, float32; {ceiling}). "
                 "vLLM did not serve the draft in this run (`vllm_check = False`)."]
    for key, engine in (("vllm", "vLLM's per-request counters"), ("sim", "simulated")):
        for name in ("mt-bench",):
            overall = s06.get(f"{name}_{key}")
            if overall:
                lines.append(f"Beside it, MT-bench's first turns: τ {bench_tau(overall)} over "
                             f"{s06.get(f'{name}_prompts')} prompts ({engine}, 95 % intervals over the prompts).")
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
        alone = s06.get("tokens_per_s_vllm_alone")
        if alone:
            here += (f" One prompt at a time (batch 1, {s06.get('vllm_alone_prompts')} prompts: a first look, no "
                     f"interval): {alone['draft']:.0f} tokens/s with the draft, {alone['plain']:.0f} without "
                     f"({alone['draft'] / alone['plain']:.2f}x).")
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
    close = _too_close(s06)  # the GPU side inside τ's noise: said apart, not counted as faster or slower
    cases = {here: speed["draft"] / speed["plain"] if speed else None,
             f"on the planned GPU run (batch {s06.get('serve_batch')}, predicted)": None if close else there}
    known = {where: r for where, r in cases.items() if r is not None}
    if not known:
        return ("Verdict: no speed was measured or predicted in this run." if not close else
                "Verdict:" + close)
    slower, faster = [w for w, r in known.items() if r < 1], [w for w, r in known.items() if r >= 1]
    pays = f"it pays above τ {_tau(s06.get('break_even_there'))} on the planned GPU run"
    if not faster and close:  # slower where measured, the GPU side unsettled: no advice for the GPU run
        said = f"Verdict: this draft slows decoding {' and '.join(slower)}, so do not serve it on this CPU."
    elif not faster:
        said = f"Verdict: this draft slows decoding {' and '.join(slower)}; do not serve it yet ({pays})."
    elif not slower:
        said = f"Verdict: this draft speeds decoding {' and '.join(faster)}; serve it."
    else:
        said = f"Verdict: this draft speeds decoding {' and '.join(faster)} but slows it {' and '.join(slower)}."
    return said + _too_close(s06)


def _too_close(s06: dict) -> str:
    """Where the planned GPU run's side of the verdict is not settled: its break-even τ inside the interval of this
    run's τ, or the predicted speedup within the speed model's own error of 1x (:data:`SINGLE_GPU_ERROR`)."""
    interval, bar, there = s06.get("tau_vllm_interval"), s06.get("break_even_there"), s06.get("speedup_predicted_there")
    reasons = []
    if interval and bar is not None and interval[0] <= bar <= interval[1]:
        where = "at the edge of" if min(abs(bar - interval[0]), abs(bar - interval[1])) < 5e-4 else "inside"
        reasons.append(f"its break-even τ {bar:.3f} lies {where} this τ's 95 % interval [{interval[0]:.3f}, "
                       f"{interval[1]:.3f}] over {s06.get('vllm_prompts')} prompts")
    if there is not None and abs(there - 1) <= SINGLE_GPU_ERROR:
        reasons.append(f"the predicted {there:.2f}x lies within the speed model's {SINGLE_GPU_ERROR:.0%} of 1x (its "
                       "error against published single-GPU speedups, bench/speedup.py)")
    return f" On the planned GPU run it is too close to call: {'; and '.join(reasons)}." if reasons else ""


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
        parts.append(f"{outside:.0%} of the tokens of the held-out replies it was scored on (the verifier's greedy "
                     f"continuations) lie outside the draft's vocabulary, which it "
                     "can never propose: a cap on τ, which a larger `draft_vocab_size` lifts at the cost of a larger "
                     "head to train (notebook 07 weighs the two with the recipe lab's vocab rows).")
    trained_acc, val_acc = s06.get("train_full_acc_0"), s06.get("val_full_acc_0")
    if trained_acc is not None and val_acc is not None:
        gap = trained_acc - val_acc
        read = _of(s06.get("training_samples"), s06.get("training_split_samples"))
        parts.append(f"Teacher-forced on its own data, the draft's first guess is right {trained_acc:.2f} of the time "
                     f"on {read} training conversations and {val_acc:.2f} on the "
                     f"{s06.get('validation_samples')} it never trained on (speculators' validation split): "
                     + (f"trained {s06.get('train_steps_total')} steps, it has learnt its training replies better "
                        "than the language." if gap >= MEMORISED_GAP else "no memorising shows."))
    parts.append("Notebook 07 shows which tokens it misses, by class, and how τ moves with the context's length.")
    return " ".join(parts)


def verdict_line(s06: dict) -> str:
    """The verdict for the conclusion's head, a short bullet per setting: this CPU with many sequences at once and
    one at a time (measured), and the planned GPU (predicted: pays, not, or too close to call, with MT-bench's side
    where its interval clears the break-even); :func:`verdict` says it in full, with its reasons."""
    speed, alone = s06.get("tokens_per_s_vllm"), s06.get("tokens_per_s_vllm_alone")
    there, bar = s06.get("speedup_predicted_there"), s06.get("break_even_there")
    lines = []
    if speed:
        ratio = speed["draft"] / speed["plain"]
        lines.append(f"**This CPU, many users at once:** {'serve' if ratio >= 1 else 'do not serve'} it ({ratio:.2f}x "
                     f"with {s06.get('vllm_batch')} sequences, measured in vLLM).")
    if alone:
        lines.append(f"**This CPU, one user at a time:** {alone['draft'] / alone['plain']:.2f}x on "
                     f"{s06.get('vllm_alone_prompts')} prompts, too few to call.")
    if there is not None:
        said = (f"too close to call ({there:.2f}x; it pays above τ {_tau(bar, 3)}, within this run's noise)"
                if _too_close(s06) else f"it would {'pay' if there >= 1 else 'not pay'} ({there:.2f}x; it pays above "
                f"τ {_tau(bar, 3)})")
        bench = s06.get("mt-bench_vllm") or s06.get("mt-bench_sim")
        side = ("" if not bench or bar is None or bench["low"] <= bar <= bench["high"] else
                f"; MT-bench's τ {bench['tau']:.3f} [{bench['low']:.3f}, {bench['high']:.3f}] lies "
                f"{'below' if bench['high'] < bar else 'above'} that bar")
        lines.append(f"**One {s06.get('plan_gpu')}** (a {s06.get('plan_verifier')} draft accepting as this one, batch "
                     f"{s06.get('serve_batch')}, predicted): {said}{side}.")
    if not lines:
        return "**Verdict:** no speed was measured or predicted in this run."
    return "**Verdict**\n\n" + "\n".join(f"- {line}" for line in lines)


def numbers_table(s06: dict) -> str:
    """The verdict's numbers as a short Markdown table: τ (one headline, MT-bench beside it, untrained) and what it
    buys, each with what measured it and how it was counted; :func:`details` says each in full."""
    k, served = s06.get("k"), s06.get("tau_vllm") is not None
    interval = s06.get("tau_vllm_interval") if served else None
    said = _tau(_headline_tau(s06), 3) + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
    held = s06.get("vllm_prompts") if served else s06.get("held_out_prompts")
    rows = [("τ on held-out prompts (the headline)", f"**{said}**",
             f"{'vLLM' if served else 'simulated'}, {held} prompts, all rounds pooled; k = {k} (at most "
             f"{k + 1 if k else '?'})")]
    bench = s06.get("mt-bench_vllm") or s06.get("mt-bench_sim")
    if bench:
        pooled = f"; pooled {bench['pooled']:.3f}" if bench.get("pooled") is not None else ""
        rows.append(("τ on MT-bench's first turns", f"{bench['tau']:.3f} [{bench['low']:.3f}, {bench['high']:.3f}]",
                     f"{'vLLM' if s06.get('mt-bench_vllm') else 'simulated'}, {s06.get('mt-bench_prompts')} prompts, "
                     f"mean over prompts (the lab's count{pooled})"))
    rows.append(("τ of the same draft untrained", _tau(s06.get("tau_untrained")), "simulated"))
    speed, alone = s06.get("tokens_per_s_vllm"), s06.get("tokens_per_s_vllm_alone")
    if speed:
        rows.append((f"speed here, {s06.get('vllm_batch')} sequences together",
                     f"{speed['draft'] / speed['plain']:.2f}x",
                     "vLLM CPU build, tokens/s with the draft ÷ without, every prompt of its run at once"))
    if alone:
        rows.append(("speed here, one prompt at a time", f"{alone['draft'] / alone['plain']:.2f}x",
                     f"the same, {s06.get('vllm_alone_prompts')} prompts (a first look)"))
    there = s06.get("speedup_predicted_there")
    if there is not None:
        rows.append((f"speed of a {s06.get('plan_verifier')} draft accepting as this one, on one "
                     f"{s06.get('plan_gpu')}, batch {s06.get('serve_batch')}",
                     f"{there:.2f}x (pays above τ {_tau(s06.get('break_even_there'), 3)})",
                     f"predicted by eagle3kit's speed model (±{SINGLE_GPU_ERROR:.0%}) at this acceptance"))
    return "\n".join(["| | this run | measured by |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)])


def why_line(s06: dict) -> str:
    """Why τ is what it is, in one line: the first draft token's acceptance, the vocab cap, memorising."""
    acc, outside = s06.get("acceptance_there") or [], s06.get("outside_vocab_share")
    trained_acc, val_acc = s06.get("train_full_acc_0"), s06.get("val_full_acc_0")
    causes = [f"its first draft token is accepted in {acc[0]:.0%} of rounds" if acc else "",
              f"{outside:.0%} of the tokens of the held-out replies it was scored on lie outside its vocab"
              if outside else "",
              f"it memorised (first guess right {trained_acc:.2f} on training, {val_acc:.2f} on validation)"
              if trained_acc is not None and val_acc is not None and trained_acc - val_acc >= MEMORISED_GAP else ""]
    return "**Why:** " + "; ".join(filter(None, causes)) + " (notebook 07 looks closer)."


def next_line(s06: dict, lab: Lab) -> str:
    """What to do next, in one line: where the recipe lab's minutes first reached the planned GPU's break-even."""
    return "**Next:** " + (reaches(lab, s06.get("break_even_there")) or "see what more minutes buy, in the appendix.")


def details(s06: dict) -> list[str]:
    """Every number of the conclusion's head (:func:`numbers_table`), in full, with what measured it (and the
    decode loop's correctness check, apart)."""
    return ["**τ.** " + " ".join(headline(s06)), "**What it buys.** " + " ".join(buys(s06)),
            "**Why.** " + why(s06)]


def details_markdown(workdir: str | os.PathLike, lab: Lab | None = None) -> str:
    """Notebook 06's appendix, as Markdown: every number of the conclusion's head in full (:func:`details`),
    then what more minutes buy: the recipe lab's points, each with the options that run it here."""
    s04, s06 = (read_summary(workdir, nn) or {} for nn in ("04", "06"))
    lab = lab or read_lab()
    table = frontier_table(lab, s06.get("minutes_to_make"), _headline_tau(s06), conversations_here=s04.get("samples"),
                           steps=s06.get("train_steps_total"), bench_tau=(s06.get("mt-bench_vllm") or {}).get("tau"))
    lab_part = "\n\n".join(filter(None, [strongest_lever(lab), frontier_line(lab.frontier, beside=lab.beside), table,
                                          " ".join(filter(None, [prompt_sets(lab, s06.get("held_out_prompts")),
                                                                 minutes_caveat(lab)]))]))
    return "\n\n".join([*details(s06), "### What more minutes buy",
                         "The recipe lab's frontier recipe at each budget, and the levers run on top of it, measured "
                         "on this verifier at CPU scale (a GPU run lands elsewhere).",
                         "<details><summary>which levers held, and every point with the options that run it here "
                         f"(click to open)</summary>\n\n{lab_part}\n\n</details>"])


def conclusion(workdir: str | os.PathLike, lab: Lab | None = None) -> str:
    """Notebook 06's closing section as Markdown, from the run's summaries and the recipe lab: the verdict in one
    line, its numbers in a short table, why and what next, what to change, the GPU hand-off (every number in full,
    and what more minutes buy: :func:`details_markdown`)."""
    s04, s06 = (read_summary(workdir, nn) or {} for nn in ("04", "06"))
    lab = lab or read_lab()
    parts = ["## Conclusion", verdict_line(s06), numbers_table(s06), why_line(s06), next_line(s06, lab),
             "### What to change", "\n".join(f"- {line}" for line in to_change(lab, s06, s04)),
             "### On GPUs: your verifier, your conversations", handoff_table(handoff(workdir, s06)),
             "Every number above in full, and what more minutes buy (the recipe lab's points, each with the options "
             "that run it here): the appendix."]
    return "\n\n".join(parts)
