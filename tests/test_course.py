"""Notebook 06's conclusion is generated from the run's summaries, the recipe lab and the presets."""

from __future__ import annotations

from eagle3kit import course, presets
from eagle3kit.evaluate.recipes import read_lab
from eagle3kit.runner import record_summary

SIMULATED = {"k": 3, "tau_trained": 1.117, "tau_untrained": 1.004, "held_out_prompts": 4, "tau_vllm": None,
             "tau_convention": "τ = accepted + 1", "decode_prompts_trained": 1, "lossless": True,
             "mt-bench_sim": {"tau": 1.13, "low": 1.1, "high": 1.16, "pooled": 1.12}, "mt-bench_prompts": 8,
             "plan_verifier": "llama-3.1-8b", "plan_gpu": "H100-80GB", "serve_batch": 1,
             "speedup_predicted_there": 0.61, "break_even_there": 1.9, "acceptance_there": [0.1, 0.01, 0.0],
             "acceptance_from": "simulated", "minutes_to_make": 2.4}


def test_the_conclusion_states_what_the_summary_measured_and_labels_it(tmp_path):
    record_summary(tmp_path, "04", data_dir="/data/here")
    record_summary(tmp_path, "06", **SIMULATED)
    text = course.conclusion(tmp_path)
    assert "**τ = 1.12** on 4 held-out prompts, simulated" in text and "at most k + 1 = 4" in text
    assert "MT-bench's first turns: τ 1.13 [1.10, 1.16] over 8 prompts (simulated" in text
    assert "Correctness check, not a τ measurement" in text and "on 1 prompt(s)" in text
    assert "Here: not measured" in text and "predicted: 0.61x" in text and "above τ 1.90" in text
    assert "--data $DATA" in text and "speculators.train" in text and "Notebook 07" in text
    assert "/data/here" not in text  # the hand-off is for the user's verifier and data, not the demo's folder
    assert "did not reach τ 1.90" in text or "reached τ 1.90" in text  # the break-even against the lab's minutes
    lab = read_lab()
    for row in lab.frontier:  # what more minutes buy, with the options that run each point
        assert str(row.tau["held-out"]) in text and course.set_options(row, lab) in text


def test_the_headline_is_vllm_with_its_batch_when_vllm_served_the_draft(tmp_path):
    served = {**SIMULATED, "tau_vllm": 1.13, "vllm_prompts": 16, "vllm_batch": 96, "vllm_version": "0.32.0",
              "tokens_per_s_vllm": {"draft": 50.0, "plain": 100.0}, "mt-bench_vllm": SIMULATED["mt-bench_sim"]}
    record_summary(tmp_path, "06", **served)
    text = course.conclusion(tmp_path)
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


def test_the_options_split_a_lab_rows_steps_between_notebooks_05_and_06():
    lab = read_lab()
    row = max(lab.frontier, key=lambda r: r.minutes)
    options = dict(o.split("=") for o in course.set_options(row, lab).replace("--set ", "").split())
    first = presets.parameters("demo", "05")["first_steps"]
    assert int(options["max_steps"]) == row.steps == first + int(options["run_steps"]) + int(options["train_steps"])
    assert int(options["n_conversations"]) == course.conversations(row, lab)


def test_why_names_the_vocab_cap_and_the_gap_between_the_training_and_validation_splits(tmp_path):
    """The run's own counts: the share of held-out reply tokens outside the draft vocab, and the first guess on the
    training split beside the validation split, memorised only where the gap is at least MEMORISED_GAP; each sentence
    silent when its count is absent."""
    split = {"training_samples": 115, "validation_samples": 13, "train_steps_total": 241}
    counted = {**SIMULATED, "outside_vocab_share": 0.28, "train_full_acc_0": 0.78, "val_full_acc_0": 0.52, **split}
    text = course.why(counted)
    assert "28% of the held-out replies' tokens lie outside the draft's vocabulary" in text
    assert "right 0.78 of the time on its 115 training conversations and 0.52 on the 13 it never trained on" in text
    assert "learnt its training replies better than the language" in text
    close = course.why({**counted, "val_full_acc_0": 0.78 - course.MEMORISED_GAP / 2})
    assert "no memorising shows" in close and "better than the language" not in close
    plain = course.why(SIMULATED)
    assert "outside the draft's vocabulary" not in plain and "training conversations" not in plain
    assert "training conversations" not in course.why({**counted, "val_full_acc_0": None})  # no validation batch


def test_a_lab_rows_options_carry_its_presets_packs_and_conversations():
    """pack-512's frontier points trained on the full preset's 256 conversations in 512-token packs: the options that
    rerun them say both (the demo's own packs are the typed default and are not restated)."""
    lab = read_lab()
    for row in lab.frontier:
        made = course.recipe_of(row, lab)
        options = course.set_options(row, lab)
        assert f"--set n_conversations={made['n_conversations']}" in options
        packs = made["total_seq_len"]
        assert (f"--set total_seq_len={packs}" in options) == (packs != presets.parameters("demo", "05").get(
            "total_seq_len", course._default_packs()))


def test_a_break_even_only_round_1_reached_is_said_with_its_host_and_one_neither_reached_without():
    lab = read_lab()
    best_before = max(r.tau["held-out"].mean for r in lab.frontier_before)
    best_now = max(r.tau["held-out"].mean for r in lab.frontier)
    between = (best_before + best_now) / 2  # reached by round 1's frontier only (the faint points in 06's figure)
    assert best_now < between < best_before
    said = course.reaches(lab, between)
    assert "did not reach" in said and "Round 1's frontier, drawn faint in the figure, did reach it" in said
    assert course.BEFORE_HOST in said
    assert "Round 1" not in course.reaches(lab, best_before + 0.1)
