"""``eagle3kit overfit``: a fresh draft trained on one conversation, then decoding it (notebook 05)."""

from __future__ import annotations

import argparse
import textwrap

from eagle3kit.cli.args import given_params, signature_options


def overfit_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.train.overfit import overfit

    signature_options(p, overfit, {
        "verifier": "smollm2 | tiny | a local HF directory | a hub id",
        "out_dir": "folder for the conversation, its data directory and the run",
        "steps": "training steps on the one conversation",
        "k": "draft tokens per decode round (and TTT steps)",
        "lr": "learning rate",
        "reply_tokens": "length of the verifier's greedy reply the draft learns",
        "max_prompt_tokens": "the prompt is cut to this many tokens",
        "seed": "picks the conversation and seeds the run",
        "warm_start_layer": "start the draft from this verifier decoder layer (-1: the last; none: random init)",
        "draft_vocab_size": "draft vocabulary, capped at the verifier's (none: the verifier's whole vocab)",
        "threshold": "passes when the decode loop accepts >= threshold x the draft tokens a round that the "
                     "draft's training accuracy predicts",
        "source": "JSONL of conversations (None: ShareGPT V3)"}, flags={"out_dir": "--out"})


def cmd_overfit(args: argparse.Namespace) -> int:
    """train a fresh draft on one conversation and decode it: a wired draft is accepted as trained (exit 1 if not)"""
    from eagle3kit.tables import terminal_width
    from eagle3kit.train.overfit import overfit

    result = overfit(**given_params(args, overfit))
    print(textwrap.fill(result.message, terminal_width()))
    print(f"\ndata directory: {result.data_dir} ({result.seconds:.0f}s)")
    return 0 if result.passed else 1
