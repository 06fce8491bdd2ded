"""Notebook 06's conclusion is generated from the run's summaries, the recipe lab and the presets."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from eagle3kit import course, gpu_steps, next_run, presets
from eagle3kit.evaluate.recipes import read_lab
from eagle3kit.runner import record_summary

RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "recipe.json"

SIMULATED = {"k": 3, "tau_trained": 1.117, "tau_untrained": 1.004, "held_out_prompts": 4, "tau_vllm": None,
             "tau_convention": "τ = accepted + 1", "decode_prompts_trained": 1, "lossless": True,
             "mt-bench_sim": {"tau": 1.13, "low": 1.1, "high": 1.16, "pooled": 1.12}, "mt-bench_prompts": 8,
             "plan_verifier": "llama-3.1-8b", "plan_gpu": "H100-80GB", "serve_batch": 1,
             "speedup_predicted_there": 0.61, "break_even_there": 1.9, "acceptance_there": [0.1, 0.01, 0.0],
             "acceptance_from": "simulated", "minutes_to_make": 2.4}


def test_the_conclusion_states_what_the_summary_measured_and_labels_it(tmp_path):
    record_summary(tmp_path, "04", data_dir="/data/here")
    record_summary(tmp_path, "06", **SIMULATED)
    text = course.conclusion(tmp_path) + course.details_markdown(tmp_path)  # five lines, then every number in full
    assert "**τ = 1.12** on 4 held-out prompts, simulated" in text and "at most k + 1 = 4" in text
    assert "MT-bench's first turns: τ 1.13 [1.10, 1.16] over 8 prompts (simulated" in text
    assert "Correctness check, not a τ measurement" in text and "on 1 prompt(s)" in text
    assert "Here: not measured" in text and "predicted: 0.61x" in text and "above τ 1.90" in text
    assert "--data $DATA" in text and "speculators.train" in text and "Notebook 07" in text
    assert "/data/here" not in text  # the hand-off is for the user's verifier and data, not the demo's folder
    assert "did not reach τ 1.90" in text or "reached τ 1.90" in text  # the break-even against the lab's minutes
    lab = read_lab()
    for row in lab.frontier:  # what more minutes buy, with the options that run each point
        assert str(row.tau["held-out"]) in text
        assert next_run.run_it(row, lab) in text


def test_the_conclusion_opens_with_one_verdict_and_a_short_table_and_ends_with_the_numbers_in_full(tmp_path):
    """The verdict in one line, then one headline τ (vLLM's when it served the draft) with MT-bench beside it and what
    it buys in a short table, why and what next in a line each; the hand-off as a table of commands; no folder of
    this machine in it."""
    served = {**SIMULATED, "tau_vllm": 1.57, "vllm_prompts": 16, "vllm_batch": 96, "vllm_version": "0.32.0",
              "tokens_per_s_vllm": {"draft": 50.0, "plain": 100.0}, "mt-bench_vllm": SIMULATED["mt-bench_sim"],
              "mt-bench_prompts": 80, "outside_vocab_share": 0.12, "train_full_acc_0": 0.87, "val_full_acc_0": 0.3}
    (tmp_path / gpu_steps.LAUNCH_05).mkdir()
    (tmp_path / gpu_steps.LAUNCH_05 / "run.yaml").write_text("{}")
    record_summary(tmp_path, "06", **served)
    assert course.verdict_line(served) == (
        "**Verdict**\n\n- **This CPU, many users at once:** do not serve it (0.50x with 96 sequences, measured in "
        "vLLM).\n- **One H100-80GB** (a llama-3.1-8b draft accepting as this one, batch 1, predicted): it would not "
        "pay (0.61x; it pays above τ 1.900); MT-bench's τ 1.130 [1.100, 1.160] lies below that bar.")
    table = course.numbers_table(served).splitlines()
    assert table[2] == ("| τ on held-out prompts (the headline) | **1.570** | vLLM, 16 prompts, all rounds pooled; "
                        "k = 3 (at most 4) |")
    assert table[3] == ("| τ on MT-bench's first turns | 1.130 [1.100, 1.160] | vLLM, 80 prompts, mean over prompts "
                        "(the lab's count; pooled 1.120) |")
    assert "| τ of the same draft untrained | 1.00 | simulated |" in table
    assert "| speed here, 96 sequences together | 0.50x |" in course.numbers_table(served)
    assert ("| speed of a llama-3.1-8b draft accepting as this one, on one H100-80GB, batch 1 | 0.61x (pays above τ "
            "1.900) |") in course.numbers_table(served)  # the plan's verifier, not this one
    alone = course.numbers_table({**served, "tokens_per_s_vllm_alone": {"draft": 45.0, "plain": 50.0},
                                  "vllm_alone_prompts": 4})
    assert "| speed here, one prompt at a time | 0.90x | the same, 4 prompts (a first look) |" in alone
    both = course.verdict_line({**served, "tokens_per_s_vllm_alone": {"draft": 51.0, "plain": 50.0},
                                "vllm_alone_prompts": 4})  # batch 1 said beside batch 96, never folded into it
    assert "many users at once:** do not serve it (0.50x with 96 sequences" in both
    assert "- **This CPU, one user at a time:** 1.02x on 4 prompts, too few to call.\n" in both
    why = course.why_line(served)
    assert "10% of rounds" in why and "12% of the tokens of the held-out replies it was scored on" in why
    assert "memorised" in why and "memorised" not in course.why_line({**served, "val_full_acc_0": 0.85})
    assert "τ 1.90" in course.next_line(served, read_lab())
    close = {**served, "tau_vllm_interval": [1.48, 1.95]}  # the break-even inside τ's interval: said so, briefly
    assert "too close to call (0.61x; it pays above τ 1.900, within this run's noise)" in course.verdict_line(close)
    inside = {**close, "mt-bench_vllm": {**SIMULATED["mt-bench_sim"], "low": 1.8, "high": 2.0}}
    assert "MT-bench" not in course.verdict_line(inside)  # its interval holds the bar: nothing to add
    assert course.verdict_line({}) == "**Verdict:** no speed was measured or predicted in this run."
    text = course.conclusion(tmp_path)
    assert text.index(course.verdict_line(served)) < text.index(table[2]) < text.index("| step | command |")
    assert "counted by vLLM's" not in text and "counted by vLLM's" in course.details_markdown(tmp_path)
    assert "| 6 | `torchrun --standalone" in text and "rehearsed its `launch_05/run.yaml`" in text
    assert str(tmp_path) not in text


def test_the_headline_is_vllm_with_its_batch_when_vllm_served_the_draft(tmp_path):
    served = {**SIMULATED, "tau_vllm": 1.13, "vllm_prompts": 16, "vllm_batch": 96, "vllm_version": "0.32.0",
              "tokens_per_s_vllm": {"draft": 50.0, "plain": 100.0}, "mt-bench_vllm": SIMULATED["mt-bench_sim"]}
    record_summary(tmp_path, "06", **served)
    text = course.details_markdown(tmp_path)
    assert "**τ = 1.13** on 16 held-out prompts, counted by vLLM's spec-decode counters" in text
    assert "96 sequences decoded together" in text and "(0.50x)" in text and "per-request counters" in text
    assert ("Verdict: this draft slows decoding here (vLLM, 96 sequences decoded together) and on the planned GPU run "
            "(batch 1, predicted); do not serve it yet") in text


def test_the_verdict_says_serve_only_where_every_speedup_is_above_one():
    fast = {**SIMULATED, "tokens_per_s_vllm": {"draft": 120.0, "plain": 100.0}, "speedup_predicted_there": 1.4,
            "vllm_batch": 1}
    here, there = "here (vLLM, 1 sequences decoded together)", "on the planned GPU run (batch 1, predicted)"
    assert course.verdict(fast) == f"Verdict: this draft speeds decoding {here} and {there}; serve it."
    mixed = {**fast, "tokens_per_s_vllm": {"draft": 50.0, "plain": 100.0}}
    assert course.verdict(mixed) == f"Verdict: this draft speeds decoding {there} but slows it {here}."
    assert course.verdict(SIMULATED).startswith(f"Verdict: this draft slows decoding {there}; do not")
    assert "no speed" in course.verdict({**SIMULATED, "speedup_predicted_there": None})
    batch_one = {**mixed, "tokens_per_s_vllm_alone": {"draft": 30.0, "plain": 25.0}, "vllm_alone_prompts": 4}
    assert course.verdict(batch_one) == course.verdict(mixed)  # 4 prompts at batch 1: said in buys, not a verdict
    assert "One prompt at a time (batch 1, 4 prompts: a first look, no interval): 30 tokens/s with the draft, 25 " \
           "without (1.20x)." in course.buys(batch_one)[0]


def test_the_options_split_a_lab_rows_steps_between_notebooks_05_and_06():
    lab = read_lab()
    row = max(lab.frontier, key=lambda r: r.minutes)
    options = dict(o.split("=") for o in next_run.set_options(row, lab).replace("--set ", "").split())
    first = presets.parameters("demo", "05")["first_steps"]
    assert int(options["max_steps"]) == row.steps == first + int(options["run_steps"]) + int(options["train_steps"])
    assert int(options["n_conversations"]) == next_run.conversations(row, lab)


def test_why_names_the_vocab_cap_and_the_gap_between_the_training_and_validation_splits(tmp_path):
    """The run's own counts: the share of held-out reply tokens outside the draft vocab, and the first guess on the
    training split beside the validation split, memorised only where the gap is at least MEMORISED_GAP; each sentence
    silent when its count is absent."""
    split = {"training_samples": 115, "validation_samples": 13, "train_steps_total": 241}
    counted = {**SIMULATED, "outside_vocab_share": 0.28, "train_full_acc_0": 0.78, "val_full_acc_0": 0.52, **split}
    text = course.why(counted)
    assert ("28% of the tokens of the held-out replies it was scored on (the verifier's greedy continuations) lie "
            "outside") in text
    assert "right 0.78 of the time on its 115 training conversations and 0.52 on the 13 it never trained on" in text
    assert "learnt its training replies better than the language" in text
    close = course.why({**counted, "val_full_acc_0": 0.78 - next_run.MEMORISED_GAP / 2})
    assert "no memorising shows" in close and "better than the language" not in close
    plain = course.why(SIMULATED)
    assert "outside the draft's vocabulary" not in plain and "training conversations" not in plain
    assert "training conversations" not in course.why({**counted, "val_full_acc_0": None})  # no validation batch


def test_a_lab_rows_options_carry_its_presets_packs_and_conversations():
    """pack-512's frontier points trained on their own conversations (the frontier scales them with its minutes) in
    512-token packs: the options that rerun them say both (packs equal to the demo's own on this CPU are not
    restated)."""
    lab = read_lab()
    for row in lab.frontier:
        made = next_run.recipe_of(row, lab)
        options = next_run.set_options(row, lab)
        assert f"--set n_conversations={next_run.conversations(row, lab)}" in options
        packs = made["total_seq_len"]
        assert (f"--set total_seq_len={packs}" in options) == (packs != presets.parameters("demo", "05").get(
            "total_seq_len", next_run._default_packs()))


def test_a_break_even_only_round_1_reached_is_said_with_its_host_and_one_neither_reached_without():
    import dataclasses

    lab = read_lab()
    best_before = max(r.tau["held-out"].mean for r in lab.frontier_before)
    # the measured points below round 1's best (the new frontier may pass it at its longest budget)
    lab = dataclasses.replace(lab, frontier=[r for r in lab.frontier if r.tau["held-out"].mean < best_before],
                              beside=[])  # and no lever on top of it
    best_now = max(r.tau["held-out"].mean for r in lab.frontier)
    between = (best_before + best_now) / 2  # reached by round 1's frontier only (the faint points in 06's figure)
    assert best_now < between < best_before
    said = next_run.reaches(lab, between)
    assert "did not reach" in said and "The lab's first round, drawn faint in the figure, did reach it" in said
    assert next_run.BEFORE_HOST in said
    assert "first round" not in next_run.reaches(lab, best_before + 0.1)


def test_what_to_change_follows_the_runs_own_diagnosis():
    """More conversations where the draft memorised, a larger vocab where many reply tokens lie outside it (with the
    lab's vocab rows as its evidence); neither where the counts do not show it."""
    lab = read_lab()
    memorised = {"train_full_acc_0": 0.88, "val_full_acc_0": 0.32, "outside_vocab_share": 0.12}
    lines = next_run.levers(memorised, {"samples": 256, "draft_vocab_size": 2048}, lab)
    assert lines[0].startswith("**More conversations, with the minutes to train on them**") and "memorised" in lines[0]
    assert "n_conversations" not in lines[0]  # no count of replies at equal minutes: the lab's 3x did not hold
    for r in (r for r in lab.beside if "+more-data" in r.name):  # the lab's evidence (its intervals: the appendix)
        assert f"{r.delta['held-out'].mean:+.3f} with {r.conversations} replies at {r.budget:g} min" in lines[0]
    # the lab measured a larger vocab losing (vocab-8192) and a smaller one gaining: the smaller one is advised, as
    # the measurement says (issue 50's review: "keep 2048" beside a gain of vocab-1024 contradicted the lab)
    assert "12% of held-out reply tokens lie outside the 2048-token vocab" in lines[1]
    assert lines[1].startswith("**`--set draft_vocab_size=1024`**") and "`vocab-8192` -0.048 [" in lines[1]
    lost = dataclasses.replace(lab, rows=[dataclasses.replace(r, delta={**r.delta, "held-out": dataclasses.replace(
        r.delta["held-out"], mean=-0.01, low=-0.03, high=0.01)}) if r.name.startswith("vocab-") else r
        for r in lab.rows])  # no other size gained: keep it
    assert next_run.levers(memorised, {"samples": 256, "draft_vocab_size": 2048}, lost)[1].startswith(
        "**Keep the 2048-token vocab**")
    gained = dataclasses.replace(lab, rows=[dataclasses.replace(r, delta={**r.delta, "held-out": dataclasses.replace(
        r.delta["held-out"], mean=0.05, low=0.01, high=0.09)}) if r.name == "vocab-8192" else r for r in lab.rows])
    assert "**`--set draft_vocab_size=8192`**" in next_run.levers(memorised, {"samples": 256, "draft_vocab_size": 2048},
                                                             gained)[1]  # where a lab row measured a gain, it says so
    healthy = {"train_full_acc_0": 0.5, "val_full_acc_0": 0.45, "outside_vocab_share": 0.03}
    assert next_run.levers(healthy, {"samples": 256, "draft_vocab_size": 2048}, lab) == []
    assert next_run.levers({}, {}, lab) == []
    said = next_run.to_change(lab, memorised, {"samples": 256, "draft_vocab_size": 2048})
    assert said[:2] == lines and any("--preset full" in line for line in said)


def test_a_frontier_point_that_is_a_preset_says_so_instead_of_repeating_its_options():
    lab = read_lab()
    table = next_run.frontier_table(lab)
    for row in lab.frontier:
        line = next(x for x in table.splitlines() if x.startswith(f"| {row.minutes:.1f} |"))
        preset = next((p for p in ("demo", "full") if next_run._is_preset(next_run.row_options(row, lab), p)), None)
        assert line.endswith(f"| `--preset {preset}` (its recipe on this CPU) |" if preset else
                             f"| `--preset demo {next_run.set_options(row, lab)}` |")
    assert any("(its recipe on this CPU)" in line for line in table.splitlines())  # the full preset is a point
    chosen = lab.context.get("frontier_presets", {})  # each preset the lab chose from its points reads as one
    for preset, view in chosen.items():
        row = next(r for r in lab.frontier + lab.beside if r.name == view["recipe"] and r.budget == view["minutes"])
        assert next_run.run_it(row, lab) == f"`--preset {preset}` (its recipe on this CPU)", preset
        assert next_run.conversations(row, lab) == view["data"]["n_conversations"]
    for row in lab.frontier + lab.beside:  # the replies a point trained on, as the lab recorded them
        assert next_run.conversations(row, lab) == row.conversations


def test_the_lab_and_this_run_name_their_own_held_out_counts():
    lab = read_lab()
    n = max(r.prompts["held-out"] for r in lab.frontier)
    assert n == max(len(r["records"]["held-out"]) for r in json.loads(RAW.read_text())["frontier"])
    assert next_run.prompt_sets(lab, 64).startswith(f"The lab's held-out τ is simulated on its own {n} prompts, this "
                                                      "run's on its 64 (a different set")


def test_this_runs_row_and_whether_the_labs_minutes_are_this_cpus():
    lab = read_lab()
    table = next_run.frontier_table(lab, 5.0, 1.57, conversations_here=256, steps=1306, bench_tau=1.3)
    assert table.splitlines()[-1] == ("| 5.0 (this run, this CPU) | 256 | 1306 | 1.570 (the headline τ, on its own "
                                      "held-out prompts: another set) | 1.300 (compare this column) |  |")
    from eagle3kit.device import native_bf16

    caveat = next_run.minutes_caveat(lab)
    same = lab.frontier_machine["native_bf16"] == native_bf16()
    assert ("are both" in caveat) == same and ("not its minutes" in caveat) == (not same)
    assert next_run.minutes_caveat(read_lab().__class__(rows=[])) == ""  # a lab that does not name its CPU


def test_a_lever_on_top_of_the_frontier_is_a_row_of_its_own_and_can_be_the_point_that_pays():
    """bench/recipe.py --beside runs a lever on top of the frontier's recipe at one of its budgets: the table gives it
    a row of its own (its name beside the minutes, its options), and where it reaches the break-even at the fewest
    minutes with the higher τ, the conclusion's next step names it."""
    lab = read_lab()
    if not lab.beside:
        pytest.skip("the lab ran no lever beside its frontier")
    table = next_run.frontier_table(lab)
    for row in lab.beside:
        lever = row.name.split("*")[0].split("+")[-1]
        line = next(x for x in table.splitlines() if x.startswith(f"| {row.minutes:.1f} + `{lever}` |"))
        assert str(row.tau["held-out"]) in line and next_run.run_it(row, lab) in line
    for best in lab.beside:  # a lever above every point of fewer minutes and the frontier at its own: it is named
        others = [r.tau["held-out"].mean for r in next_run.points(lab)
                  if r is not best and r.minutes <= best.minutes]
        bar = (max(others) + best.tau["held-out"].mean) / 2 if others else best.tau["held-out"].mean
        if not others or max(others) < bar <= best.tau["held-out"].mean:
            assert next_run.first_reaching(lab, bar) is best
            assert next_run.run_it(best, lab) in next_run.reaches(lab, bar)


def test_the_verdict_says_too_close_to_call_where_the_break_even_lies_inside_the_tau_interval():
    """τ 1.57 over 16 prompts with an interval [1.48, 1.66] cannot say which side of a 1.61 break-even the draft falls
    on: the headline carries the interval and the verdict says so; an interval clear of it adds nothing."""
    served = {**SIMULATED, "tau_vllm": 1.57, "vllm_prompts": 16, "vllm_batch": 96, "break_even_there": 1.61,
              "speedup_predicted_there": 0.97, "tokens_per_s_vllm": {"draft": 50.0, "plain": 100.0}}
    close = {**served, "tau_vllm_interval": [1.48, 1.66]}
    assert "| **1.570 [1.480, 1.660]** | vLLM, 16 prompts" in course.numbers_table(close)
    assert course.verdict(close).endswith("On the planned GPU run it is too close to call: its break-even τ 1.610 "
                                          "lies inside this τ's 95 % interval [1.480, 1.660] over 16 prompts; and the "
                                          "predicted 0.97x lies within the speed model's 10% of 1x (its error "
                                          "against published single-GPU speedups, bench/speedup.py).")
    assert course.verdict(close).startswith("Verdict: this draft slows decoding here (vLLM, 96 sequences decoded "
                                            "together), so do not serve it on this CPU.")  # no GPU advice: unsettled
    # the demo's case (issue 50's review): 1.614 lies just above an interval that reaches 1.612, so the interval
    # does not hold it, whatever two decimals would show
    edge = {**served, "tau_vllm_interval": [1.365, 1.612], "break_even_there": 1.614, "speedup_predicted_there": 0.8}
    assert "too close" not in course.verdict(edge) and "do not serve it yet" in course.verdict(edge)
    touching = {**edge, "break_even_there": 1.612}  # the break-even on the interval's end: said as the edge it is
    said = course.verdict(touching)
    assert "its break-even τ 1.612 lies at the edge of this τ's 95 % interval [1.365, 1.612]" in said
    assert "lies inside" in course.verdict({**touching, "break_even_there": 1.5})
    clear = {**served, "tau_vllm_interval": [1.50, 1.60], "speedup_predicted_there": 0.8}
    assert "too close" not in course.verdict(clear)
    assert course.verdict(clear) == course.verdict({**clear, "tau_vllm_interval": None})
    model_only = {**served, "tau_vllm_interval": [1.50, 1.60]}  # 0.97x: inside the model's own error
    assert "too close to call: the predicted 0.97x" in course.verdict(model_only)


def test_the_handoff_gives_the_readmes_gpu_commands(tmp_path):
    """Notebook 06's hand-off and the README's GPU recipe ask for the same sharding with the same flags."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text().split("<!-- gpu-recipe -->", 1)[1]
    lines = [ln.split(" #")[0].strip() for ln in re.search(r"```bash\n(.*?)```", readme, re.S).group(1).splitlines()]
    rows = gpu_steps.handoff(tmp_path, {"plan_verifier": "llama-3.1-8b", "plan_gpu": "H100-80GB"})
    torchrun = [c for c, _ in rows if c.startswith("torchrun")]
    assert torchrun == [ln for ln in lines if ln.startswith("torchrun")] and torchrun[0].endswith("--fsdp-shard")
    for tool in ("launch", "rehearse"):
        ours = next(c for c, _ in rows if c.startswith(f"eagle3kit {tool}")).split()
        theirs = next(ln for ln in lines if ln.startswith(f"eagle3kit {tool}")).split()
        assert ("--fsdp" in ours) == ("--fsdp" in theirs) is True
    without = gpu_steps.handoff(tmp_path, {})  # the defaults: the same commands
    assert [c for c, _ in without] == [c for c, _ in rows]


def test_mt_bench_beside_the_headline_is_one_figure_the_mean_as_the_lab_counts_with_the_pooled_labelled():
    """Every place notebook 06 states MT-bench's τ gives one figure: the mean over its prompts (the per-category
    table's and the recipe lab's count, which the frontier's star is set against), with its interval; the details
    give all rounds pooled beside it, labelled; a summary without the pooled interval keeps the mean alone."""
    both = {"tau": 1.301, "low": 1.274, "high": 1.328, "pooled": 1.287, "pooled_low": 1.262, "pooled_high": 1.311}
    served = {**SIMULATED, "tau_vllm": 1.59, "vllm_prompts": 16, "mt-bench_vllm": both, "mt-bench_prompts": 80}
    said = ("1.30 [1.27, 1.33] (the mean over its prompts, as the recipe lab counts; all rounds pooled: "
            "1.29 [1.26, 1.31])")
    assert course.bench_tau(both) == said
    line = course.numbers_table(served)
    assert ("| τ on MT-bench's first turns | 1.301 [1.274, 1.328] | vLLM, 80 prompts, mean over prompts (the lab's "
            "count; pooled 1.287) |") in line  # one figure, the lab's count; the pooled labelled beside it
    assert course.bench_tau(both, with_pooled=False) == "1.30 [1.27, 1.33]"
    assert f"MT-bench's first turns: τ {said} over 80 prompts" in " ".join(course.headline(served))
    assert course.bench_tau(SIMULATED["mt-bench_sim"]) == "1.13 [1.10, 1.16]"


def test_reaching_the_break_even_says_whether_the_interval_clears_it_and_the_other_set_beside():
    import dataclasses

    full = read_lab()
    hit = next_run.first_reaching(full, 1.61)
    assert hit is not None
    lab = dataclasses.replace(full, frontier=[hit], beside=[])  # that point alone
    t = hit.tau["held-out"]
    unsure = next_run.reaches(lab, (t.low + t.mean) / 2)  # between its interval's low end and its mean
    assert "By its mean τ the lab first reached" in unsure and "not yet a sure one" in unsure
    assert "on mt-bench " in unsure and "not a forecast for that run" in unsure and "reaches below" in unsure
    sure = next_run.reaches(lab, t.low - 0.01)  # below its whole interval
    assert "By its mean τ the lab first reached" in sure and "not yet a sure one" not in sure
