"""``eagle3kit regenerate``: each reply replaced by the verifier's own greedy answer (self-distillation,
notebook 04)."""

from __future__ import annotations

import argparse
import dataclasses
import json

from eagle3kit.cli.args import given_params, signature_options


def regenerate_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.data.regenerate import regenerate

    signature_options(p, regenerate, {
        "verifier": "smollm2 | tiny | a local HF directory | a hub id",
        "out_path": "JSONL to write (resumes an interrupted run)",
        "n_conversations": "conversations to answer",
        "max_new_tokens": "longest reply, in tokens",
        "max_prompt_tokens": "the user turn is cut to this many tokens",
        "source": "JSONL of conversations (default: ShareGPT V3)",
        "seed": "picks the conversations",
        "batch_size": "replies decoded together (rows leave as they finish, waiting prompts join)",
        "device": "auto | cpu | cuda",
    }, flags={"out_path": "--out"})
    from eagle3kit.data.regenerate import ENGINES

    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="what writes the replies: vllm = vLLM's CPU build offline (vllm.LLM, no server; the fastest "
                        "here), vllm-served = the same engine served and asked by speculators' regenerate-responses, "
                        "transformers = its batched loop; auto = vllm when `make vllm` installed it and it runs this "
                        "verifier on a CPU, else transformers")


def cmd_regenerate(args: argparse.Namespace) -> int:
    """replace each reply by the verifier's own greedy answer (self-distillation)"""
    from eagle3kit.data.regenerate import regenerate

    info = regenerate(**given_params(args, regenerate))
    print(json.dumps(dataclasses.asdict(info), indent=2))
    print(f"\nMake training data from it with: eagle3kit data --source {info.path} --verifier {args.verifier} "
          "--out DIR")
    return 0
