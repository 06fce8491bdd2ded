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
    assert "--data /data/here" in text and "speculators.train" in text and "notebook 07" in text
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


def test_the_options_split_a_lab_rows_steps_between_notebooks_05_and_06():
    lab = read_lab()
    row = max(lab.frontier, key=lambda r: r.minutes)
    options = dict(o.split("=") for o in course.set_options(row, lab).replace("--set ", "").split())
    first = presets.parameters("demo", "05")["first_steps"]
    assert int(options["max_steps"]) == row.steps == first + int(options["run_steps"]) + int(options["train_steps"])
    assert int(options["n_conversations"]) == course.conversations(row, lab)
