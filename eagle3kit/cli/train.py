"""``eagle3kit`` commands for data and training (notebooks 04-05): ``regenerate``, ``data``, ``train`` and
``overfit``; each command's options, then its handler (a thin wrapper over the stage's library functions).
:func:`run_options` / :func:`run_spec` are the options ``train`` and ``launch`` share."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import textwrap

from eagle3kit.cli.args import as_typed, given, given_params, settings_options, signature_options
from eagle3kit.cli.preflight import room_for_training
from eagle3kit.errors import UserError


# ----------------------------------------------------------------------------------------------- data
def regenerate_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.data.regenerate import regenerate  # lazy: torch + transformers take seconds to import

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


def cmd_regenerate(args: argparse.Namespace) -> int:
    """replace each reply by the verifier's own greedy answer (self-distillation)"""
    from eagle3kit.data.regenerate import regenerate  # lazy: torch + transformers take seconds to import

    info = regenerate(**given_params(args, regenerate))
    print(json.dumps(dataclasses.asdict(info), indent=2))
    print(f"\nMake training data from it with: eagle3kit data --source {info.path} --verifier {args.verifier} "
          "--out DIR")
    return 0


def _count_or_all(text: str) -> int | None:
    """``--n-conversations``: a count, or ``all`` (None: every conversation of the source)."""
    return None if text.lower() == "all" else int(text)


_count_or_all.__name__ = "count or 'all'"  # argparse names it in "invalid ... value"


def data_options(p: argparse.ArgumentParser) -> None:
    import inspect

    from eagle3kit import validate
    from eagle3kit.data.dataset import build_dataset  # lazy: torch + transformers take seconds to import

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

    from eagle3kit.assets import AssetMissingError  # lazy: torch + transformers take seconds to import
    from eagle3kit.data.dataset import build_dataset, prepared_elsewhere
    from eagle3kit.data.targets import verify_targets
    from eagle3kit.verifier import DEFAULT_VERIFIER

    if prepared_elsewhere(args.out):
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


# ----------------------------------------------------------------------------------------------- train
FROM_DATA = {"verifier": "default: the verifier the data was made with",
             "draft_vocab_size": "default: the data's draft vocab (its d2t/t2d mapping)"}


def run_options(p: argparse.ArgumentParser, data_required: bool, skip_draft: tuple[str, ...]) -> None:
    """The options ``train`` and ``launch`` share: the data, the draft's fields and the training settings."""
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import
    from eagle3kit.train.session import TrainSettings

    p.add_argument("--data", required=data_required, help="data directory made by `eagle3kit data`, or by "
                   "speculators' prepare-data + generate-offline-data (then pass --verifier and --aux-layer-ids)")
    settings_options(p, DraftSpec, skip=("training", *skip_draft), helps=FROM_DATA)
    settings_options(p, TrainSettings)


def run_spec(args: argparse.Namespace, **fixed):
    """The draft of ``train`` / ``launch`` and their data directory: the options given, else the data directory's
    verifier and vocab (a directory without a manifest refuses, naming the option, what it cannot say)."""
    from eagle3kit.data.directory import DataDir  # lazy: torch takes seconds to import
    from eagle3kit.draft.config import DraftSpec

    if not args.data:
        raise UserError("Pass --data DIR (a data directory made by `eagle3kit data --out DIR`), "
                        "or --resume CHECKPOINT to continue a run.")
    chosen = given(args, DraftSpec)
    data = DataDir.open(args.data, chosen.get("verifier"), chosen.get("aux_layer_ids"))
    chosen.setdefault("verifier", data.require_verifier())
    if not data.has_manifest:  # its aux layers must be told (the default would be a guess)
        chosen.setdefault("aux_layer_ids", data.require_aux_layer_ids())
    chosen.setdefault("draft_vocab_size", data.draft_vocab_size)
    return DraftSpec(**{**chosen, **fixed}), data


def train_options(p: argparse.ArgumentParser) -> None:
    run_options(p, data_required=False, skip_draft=())
    p.add_argument("--steps", type=int, default=10, help="steps to take now")
    p.add_argument("--save", default=None,
                   help="checkpoint directory, written at the end (default with --resume: that directory)")
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--resume", default=None, help="checkpoint directory to continue from (with its own settings)")
    p.add_argument("--export", default=None, help="also save the draft alone (speculators format)")


def cmd_train(args: argparse.Namespace) -> int:
    """train the draft N steps on a data directory (checkpoint, resume, export)"""
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import
    from eagle3kit.tables import column_blocks, format_table
    from eagle3kit.train.checkpoint import read_session
    from eagle3kit.train.session import TrainSession, TrainSettings, metric_columns

    if args.resume:
        changed = {**given(args, DraftSpec), **given(args, TrainSettings)}
        if changed:
            data = args.data or read_session(args.resume)["data_dir"]
            names = ", ".join("--" + name.replace("_", "-") for name in changed)
            raise UserError(f"--resume continues the checkpoint's run with its own settings, so {names} cannot apply; "
                            f"drop {'it' if len(changed) == 1 else 'them'}, or start a new run with "
                            f"`eagle3kit train --data {data} {as_typed(changed)} --save NEW_DIR`.")
        session = TrainSession.resume(args.resume, data_dir=args.data)
        args.save = args.save or args.resume  # a resumed run goes on checkpointing where it was
    else:
        spec, data = run_spec(args)
        session = TrainSession(data, spec, **given(args, TrainSettings))
    room_for_training(args, session)  # the checkpoint and export fit, before any step
    records = session.run(args.steps, checkpoint_dir=args.save, checkpoint_every=args.checkpoint_every)
    cols = metric_columns(session.ttt_steps)
    history = session.history_frame()
    if len(history):
        print(format_table(history[cols + ["tokens_per_s", "lr"]].round(4), fallback=column_blocks))
    if args.save:
        print(f"\ncheckpoint: {args.save} (resume: eagle3kit train --resume {args.save} --steps N)")
    if args.export:
        print(f"exported draft (speculators format): {session.export(args.export)}")
    return 0 if records or args.steps == 0 else 1


# ----------------------------------------------------------------------------------------------- overfit
def overfit_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.train.overfit import overfit  # lazy: torch + speculators take seconds to import

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
    from eagle3kit.tables import terminal_width  # lazy: torch + speculators take seconds to import
    from eagle3kit.train.overfit import overfit

    result = overfit(**given_params(args, overfit))
    print(textwrap.fill(result.message, terminal_width()))
    print(f"\ndata directory: {result.data_dir} ({result.seconds:.0f}s)")
    return 0 if result.passed else 1
