"""``eagle3kit rehearse``: speculators' own trainer run here on a run.yaml (1 process or N ranks, FSDP, preemption
and resume), beside TrainSession on request."""

from __future__ import annotations

import argparse
import json

from eagle3kit.errors import UserError


def rehearse_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="the run.yaml `eagle3kit launch` wrote (any speculators train YAML)")
    p.add_argument("--out", required=True, help="folder for speculators' checkpoints, its log and per-step records")
    p.add_argument("--data", default=None, help="this machine's copy of the data, when the YAML names the cluster's "
                   "(`eagle3kit launch --cluster-data`); default: the YAML's data_path")
    p.add_argument("--ranks", type=int, default=1, help="processes: 1 runs speculators' trainer in one process, more "
                                                        "run it under torchrun (gloo on a CPU)")
    p.add_argument("--fsdp", action="store_true", help="--fsdp-shard: FSDP2 over the ranks (needs --ranks 2+)")
    p.add_argument("--steps", type=int, default=3, help="steps to train (--max-steps, one epoch)")
    p.add_argument("--num-workers", type=int, default=0, help="data-loader worker processes per rank")
    p.add_argument("--compare", action="store_true",
                   help="also train TrainSession on the same run and compare the loss per TTT step")
    p.add_argument("--plot", default=None, help="PNG of both loss curves (with --compare)")
    p.add_argument("--preempt", type=int, default=None, metavar="STEP",
                   help="checkpoint after STEP, kill the last rank after STEP+1, rerun, compare with the run "
                        "uninterrupted (needs --steps >= STEP+2)")
    p.add_argument("--rerun", action="store_true",
                   help="keep --out's checkpoints: speculators resumes from them, as a rerun of the job would")
    p.add_argument("--timeout", type=float, default=600, help="seconds before the trainer is stopped")


def cmd_rehearse(args: argparse.Namespace) -> int:
    """run speculators' own trainer here on a run.yaml: 1 process or N ranks (torchrun), FSDP, resume"""
    from eagle3kit.doctor.checks import rehearsal as rehearsal_checks
    from eagle3kit.doctor.findings import format_findings, has_errors
    from eagle3kit.tables import column_blocks, format_table, terminal_width
    from eagle3kit.train.rehearsal import run as rehearsal

    if args.plot and not args.compare:
        raise UserError("--plot draws speculators' loss beside the session's: add --compare.")
    local = rehearsal.local_data(args.config, args.data)
    if args.preempt is not None:
        return _preempt(args, local)
    flags = rehearsal.flags_for(args.config, args.steps, args.num_workers,
                                {**local, **({"fsdp_shard": True} if args.fsdp else {})})
    found = rehearsal_checks.before(rehearsal.resolved(args.config, flags), args.ranks,
                                    rehearsal.save_path(args.out) if args.rerun else None)
    run = rehearsal.rehearse(args.config, args.out, ranks=args.ranks, fsdp=args.fsdp, steps=args.steps,
                             num_workers=args.num_workers, resume=args.rerun, timeout=args.timeout, extra=local)
    print("ran: " + " ".join(run.command))
    print(format_table(rehearsal.overrides_table(args.config, run.overrides)))
    records = run.metrics()
    if len(records):
        cols = ["step", "loss"] + [c for c in records if c.startswith(("loss_", "full_acc_"))] + ["lr"]
        print(format_table(records[cols].round(6), fallback=column_blocks))
    found += rehearsal_checks.after(run)
    if run.ok and len(records):
        print(f"\ncheckpoint: {run.checkpoint()} (doctor it: eagle3kit doctor --draft {run.checkpoint()})")
    if found:
        print("\n" + format_findings(found, terminal_width()))
    if args.compare and run.ok and len(records):
        return max(_compare(run, args.plot), 1 if has_errors(found) else 0)
    return 1 if has_errors(found) or not run.ok else 0


def _compare(run, plot: str | None) -> int:
    from eagle3kit.tables import format_table
    from eagle3kit.train.rehearsal import compare

    table = compare.side_by_side(run)
    summary = compare.summary(table)
    print(f"\nTrainSession on the same run ({run.ranks} rank(s)): |Δloss| per TTT step "
          f"{summary['max_abs_diff']} over {summary['steps']} steps; tolerance {summary['tolerance']}: "
          + ("within" if summary["within"] else "OUTSIDE"))
    print(format_table(table.round(8)))
    if plot:
        from eagle3kit.train.rehearsal.plots import plot_side_by_side

        plot_side_by_side(table, f"speculators' trainer ({run.ranks} rank(s)) and TrainSession").savefig(plot)
        print(f"figure: {plot}")
    return 0 if summary["within"] else 1


def _preempt(args: argparse.Namespace, local: dict[str, str]) -> int:
    from eagle3kit.train.rehearsal.resume import preempt

    result = preempt(args.config, args.out, ranks=args.ranks, fsdp=args.fsdp, steps=args.steps,
                     checkpoint_step=args.preempt, num_workers=args.num_workers, timeout=args.timeout, extra=local)
    print(json.dumps(result.summary(), indent=2, default=str))
    explained = result.explained_diff
    print(f"\nThe rerun resumed at step {result.checkpoint_step + 1} from speculators' checkpoint; it ends "
          + ("equal to" if result.weights.equal else "apart from") + " the uninterrupted run"
          + ("" if explained is None or result.weights.equal else
             f", and a session rounded to the checkpoint's dtype at step {result.checkpoint_step} replays the rerun "
             f"to |Δloss| {explained:.3g}: the checkpoint's rounding is the whole difference") + ".")
    return 0 if result.resumed.ok else 1
