"""``eagle3kit plan``: disk, GPU memory per rank, time and served speedup of the GPU run, each number labelled."""

from __future__ import annotations

import argparse
import textwrap

from eagle3kit.cli.args import given_params, signature_options


def plan_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.plan.gpu_plan import plan_run

    signature_options(p, plan_run, {
        "verifier": "a preset (llama-3.1-8b, qwen3-8b, kimi-k2.5), smollm2, tiny or an HF directory",
        "samples": "training samples (conversations)", "tokens_per_sample": "mean tokens per sample (default: 1024)",
        "data": "a data directory made by `eagle3kit data`: its mean tokens per sample",
        "draft_vocab_size": "draft vocabulary (none: the verifier's)", "ttt_steps": "TTT steps",
        "num_layers": "draft decoder layers", "total_seq_len": "packed tokens per rank and step",
        "loss_implementation": "fused | eager", "optimizer": "adamw | muon",
        "attention": "simple_flex_attention | sdpa", "gpu": "H100-80GB | H200 | A100-80GB | A100-40GB | L40S | ...",
        "gpus": "GPUs of the run", "fsdp": "shard weights, gradients and optimizer state", "epochs": "epochs",
        "data_utilisation": "fraction of dense bf16 peak in data generation",
        "train_utilisation": "fraction of dense bf16 peak in training",
        "serve_batch": "sequences vLLM decodes together when serving the draft",
        "serve_k": "draft tokens per round when serving (default: --ttt-steps)",
        "serve_gpus": "GPUs the served verifier is split over (tensor parallel; default: as many as hold its bf16 "
                      "weights)",
        "tau": "acceptance length to expect (e.g. from `eagle3kit vllm-check`): the speedup at it",
        "acceptance": "or the acceptance per draft position (cumulative): tau = 1 + their sum"})


def cmd_plan(args: argparse.Namespace) -> int:
    """disk, GPU memory per rank and time of the GPU run, each number labelled measured/derived/assumed"""
    from eagle3kit.plan.gpu_plan import plan_run
    from eagle3kit.tables import format_sections, terminal_width

    plan = plan_run(**given_params(args, plan_run))
    print(format_sections(plan.table()))
    print("\nCommands for this run:\n  " + "\n  ".join(plan.commands))  # whole lines, to copy
    print("\nAssumptions:")
    for assumption in plan.assumptions:
        print(textwrap.fill(assumption, terminal_width(), initial_indent="  - ", subsequent_indent="    "))
    return 0 if plan.fits else 1
