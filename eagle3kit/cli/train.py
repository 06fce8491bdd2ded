"""``eagle3kit train``: the draft trained N steps on a data directory, checkpointed, resumed, exported (notebook 05).

:func:`run_options` / :func:`run_spec` are the options ``train`` and ``launch`` share: the data, the draft, the
settings."""

from __future__ import annotations

import argparse

from eagle3kit.cli.args import as_typed, given, settings_options
from eagle3kit.cli.preflight import room_for_training
from eagle3kit.errors import UserError
from eagle3kit.train.live_tau import EVERY, PROMPTS


FROM_DATA = {"verifier": "default: the verifier the data was made with",
             "draft_vocab_size": "default: the data's draft vocab (its d2t/t2d mapping)"}


def run_options(p: argparse.ArgumentParser, data_required: bool, skip_draft: tuple[str, ...]) -> None:
    """The options ``train`` and ``launch`` share: the data, the draft's fields and the training settings."""
    from eagle3kit.draft.config import DraftSpec
    from eagle3kit.train.session import TrainSettings

    p.add_argument("--data", required=data_required, help="data directory made by `eagle3kit data`, or by "
                   "speculators' prepare-data + generate-offline-data (then pass --verifier and --aux-layer-ids)")
    settings_options(p, DraftSpec, skip=("training", *skip_draft), helps=FROM_DATA)
    settings_options(p, TrainSettings)


def run_spec(args: argparse.Namespace, **fixed):
    """The draft of ``train`` / ``launch`` and their data directory: the options given, the rest as the directory
    says (:func:`eagle3kit.data.draft_spec.spec_for_data`, the one place that infers them)."""
    from eagle3kit.data.directory import DataDir
    from eagle3kit.data.draft_spec import spec_for_data
    from eagle3kit.draft.config import DraftSpec

    if not args.data:
        raise UserError("Pass --data DIR (a data directory made by `eagle3kit data --out DIR`), "
                        "or --resume CHECKPOINT to continue a run.")
    data = DataDir.open(args.data)
    return spec_for_data(data, {**given(args, DraftSpec), **fixed}), data


def train_options(p: argparse.ArgumentParser) -> None:
    run_options(p, data_required=False, skip_draft=())
    p.add_argument("--steps", type=int, default=10, help="steps to take now")
    p.add_argument("--save", default=None,
                   help="checkpoint directory, written at the end (default with --resume: that directory)")
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--resume", default=None, help="checkpoint directory to continue from (with its own settings)")
    p.add_argument("--export", default=None, help="also save the draft alone (speculators format)")
    p.add_argument("--eval-every", type=int, nargs="?", const=EVERY, default=None, metavar="N",
                   help=f"every N steps (alone: {EVERY}) measure the draft's simulated tau (bonus token counted) on "
                   f"{PROMPTS} held-out prompts of --data; the verifier's replies are written once, each measurement "
                   "is draft forwards only")
    p.add_argument("--keep-best-tau", action="store_true",
                   help="with --eval-every and --save: also keep the checkpoint with the best tau in SAVE_best_tau")


def cmd_train(args: argparse.Namespace) -> int:
    """train the draft N steps on a data directory (checkpoint, resume, export)"""
    from eagle3kit.draft.config import DraftSpec
    from eagle3kit.tables import column_blocks, format_table
    from eagle3kit.train.checkpoint import read_session
    from eagle3kit.train.live_tau import TAU
    from eagle3kit.train.session import TrainSession, TrainSettings, metric_columns

    if args.keep_best_tau and not (args.eval_every and (args.save or args.resume)):
        raise UserError("--keep-best-tau keeps the checkpoint with the best live tau: add --eval-every N (tau "
                        "measured every N steps) and --save DIR (it is kept in DIR_best_tau).")
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
    best = best_tau_dir(args.save) if args.keep_best_tau else None
    if args.eval_every:
        print(f"live: {session.track_tau(args.eval_every).describe()}")
    records = session.run(args.steps, checkpoint_dir=args.save, checkpoint_every=args.checkpoint_every,
                          best_tau_dir=best)
    cols = metric_columns(session.ttt_steps)
    history = session.history_frame()
    if len(history):
        extra = [TAU] if TAU in history else []
        print(format_table(history[cols + extra + ["tokens_per_s", "lr"]].round(4), fallback=column_blocks))
    if args.eval_every:
        print(_tau_line(session, best))
    if args.save:
        print(f"\ncheckpoint: {args.save} (resume: eagle3kit train --resume {args.save} --steps N)")
    if args.export:
        print(f"exported draft (speculators format): {session.export(args.export)}")
    return 0 if records or args.steps == 0 else 1


def best_tau_dir(save: str | None) -> str | None:
    """Where ``--keep-best-tau`` keeps the checkpoint with the best live τ: beside ``--save``, ``SAVE_best_tau``."""
    from pathlib import Path

    return None if save is None else str(Path(save).with_name(Path(save).name + "_best_tau"))


def _tau_line(session, best: str | None) -> str:
    """The live τ over the run, its best, and where the best checkpoint is."""
    from eagle3kit.evaluate.conventions import TAU_CONVENTION
    from eagle3kit.train.live_tau import tau_points

    steps, taus = tau_points(session.history)
    if not taus:
        return f"live tau: not measured yet (every {session.live_tau.every} steps)."
    top = max(range(len(taus)), key=taus.__getitem__)
    kept = f"; its checkpoint: {best}" if best else ""
    return (f"live tau: {taus[-1]:.3f} at step {steps[-1]}, best {taus[top]:.3f} at step {steps[top]}{kept} "
            f"({TAU_CONVENTION}).")
