"""``eagle3kit`` commands for the GPU run before it starts: ``launch`` (speculators' TrainConfig YAML and the torchrun
command), ``rehearse`` (speculators' own trainer run here on that YAML) and ``plan`` (its disk, memory, time and served
speedup); each command's options, then its handler."""

from __future__ import annotations

import argparse
import json

from eagle3kit.cli.args import given, given_params, signature_options
from eagle3kit.cli.train import run_options, run_spec
from eagle3kit.errors import UserError


# ----------------------------------------------------------------------------------------------- launch
def launch_options(p: argparse.ArgumentParser) -> None:
    run_options(p, data_required=True, skip_draft=("device",))
    p.add_argument("--out", required=True, help="folder for run.yaml (and the dry run's checkpoint)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs (ranks) per node (default: 8)")
    p.add_argument("--nodes", type=int, default=1, help="machines that each run --gpus ranks; more than 1 needs "
                   "--rdzv-endpoint (default: 1, torchrun --standalone)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="c10d rendezvous of a multi-node run: an address of the first node every node reaches")
    p.add_argument("--fsdp", action="store_true", help="shard parameters with FSDP2 (--fsdp-shard)")
    p.add_argument("--cluster-verifier", default=None, help="verifier path/hub id as the cluster sees it")
    p.add_argument("--cluster-data", default=None, metavar="PATH",
                   help="the data directory as the cluster sees it (the YAML's data_path; default: --data, absolute)")
    p.add_argument("--cluster-save", default=None, metavar="PATH",
                   help="where the cluster writes checkpoints (the YAML's save_path; default: --out/checkpoints)")
    p.add_argument("--gpu", default=None, help="the GPU to check the run fits (H100-80GB, H200, A100-80GB, ...)")
    p.add_argument("--dry-run", action="store_true",
                   help="run `speculators train --dry-run` here and compare its config.json with eagle3kit's")


def cmd_launch(args: argparse.Namespace) -> int:
    """write the speculators TrainConfig YAML + torchrun command (and dry-run it)"""
    from eagle3kit.doctor.checks import trainer_findings
    from eagle3kit.doctor.findings import format_findings
    from eagle3kit.draft.config import DraftSpec, build_config  # lazy: torch + speculators take seconds to import
    from eagle3kit.plan.commands import check_rendezvous
    from eagle3kit.tables import format_table
    from eagle3kit.train import launch
    from eagle3kit.train.session import TrainSettings

    check_rendezvous(args.nodes, args.rdzv_endpoint)  # before the verifier and data are read
    spec, _data = run_spec(args, device="cpu")
    build = build_config(spec)
    settings = launch.cluster_settings(**given(args, TrainSettings))
    attn = {"attn_implementation": spec.attn_implementation} if "attn_implementation" in given(args, DraftSpec) else {}
    plan = launch.write_plan(build, settings, args.data, args.out, n_gpus=args.gpus, fsdp=args.fsdp, gpu=args.gpu,
                             nodes=args.nodes, rdzv_endpoint=args.rdzv_endpoint, cluster_data=args.cluster_data,
                             cluster_save=args.cluster_save, verifier=args.cluster_verifier,
                             loss_implementation=settings.loss_implementation,
                             hidden_states_dtype=settings.hidden_states_dtype, **attn)
    print(plan.yaml)
    print(format_table(launch.explain_plan(plan)))
    where = f"{args.gpus} GPU(s)" if args.nodes == 1 else \
        f"{args.nodes} nodes x {args.gpus} GPUs (the same command on every node)"
    print(f"\nRun it on {where}:\n  {plan.command}")
    data_here = f" --data {args.data}" if args.cluster_data else ""
    print(f"Rehearse it here first: eagle3kit rehearse --config {plan.yaml_path}{data_here} --out REHEARSAL_DIR")
    if not args.dry_run and (found := trainer_findings()):  # this machine cannot run it: say so before a user tries
        print("\n" + format_findings(found))
    if args.dry_run:
        table = launch.round_trip(build, plan, plan.yaml_path.parent / "dry_run")
        bad = table[~table["equal"]]
        print(f"\nspeculators train --dry-run: config.json has {len(table)} fields, "
              f"{len(bad)} differ from eagle3kit's draft" + (":\n" + format_table(bad) if len(bad) else ""))
        return 1 if len(bad) else 0
    return 0


# ----------------------------------------------------------------------------------------------- rehearse
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
    from eagle3kit.doctor import rehearsal_checks  # lazy: torch + speculators take seconds to import
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


# ----------------------------------------------------------------------------------------------- plan
def plan_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.plan.report import plan_run  # lazy: torch + speculators take seconds to import

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
        "serve_gpus": "GPUs the served verifier is split over (tensor parallel)",
        "tau": "acceptance length to expect (e.g. from `eagle3kit vllm-check`): the speedup at it",
        "acceptance": "or the acceptance per draft position (cumulative): tau = 1 + their sum"})


def cmd_plan(args: argparse.Namespace) -> int:
    """disk, GPU memory per rank and time of the GPU run, each number labelled measured/derived/assumed"""
    from eagle3kit.plan.report import plan_run  # lazy: torch + speculators take seconds to import
    from eagle3kit.tables import format_table

    plan = plan_run(**given_params(args, plan_run))
    print(format_table(plan.table()))
    print("\nCommands for this run:\n  " + "\n  ".join(plan.commands))
    print("\nAssumptions:\n  - " + "\n  - ".join(plan.assumptions))
    return 0 if plan.fits else 1
