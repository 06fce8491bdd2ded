"""``eagle3kit launch``: the run as speculators' TrainConfig YAML and the torchrun command, checked to fit, dry-run
on request."""

from __future__ import annotations

import argparse
import dataclasses
import math

from eagle3kit.cli.args import given
from eagle3kit.cli.train import run_options, run_spec


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
    from eagle3kit.data.loader import packs_per_epoch
    from eagle3kit.doctor.checks.run import trainer_findings
    from eagle3kit.doctor.findings import format_findings
    from eagle3kit.draft.config import DraftSpec, build_config
    from eagle3kit.plan.commands import check_rendezvous
    from eagle3kit.tables import format_table
    from eagle3kit.train import launch
    from eagle3kit.train.session import TrainSettings

    check_rendezvous(args.nodes, args.rdzv_endpoint)  # before the verifier and data are read
    spec, _data = run_spec(args, device="cpu")
    build = build_config(spec)
    settings = launch.cluster_settings(**given(args, TrainSettings))
    ranks = args.gpus * args.nodes
    packs = packs_per_epoch(args.data, settings.total_seq_len, settings.train_data_ratio, settings.seed)  # one a rank
    if settings.max_steps is not None and "epochs" not in given(args, TrainSettings):  # max_steps ends the run
        per_rank = max(1, math.ceil(packs / ranks))  # a rank's steps an epoch
        settings = dataclasses.replace(settings, epochs=math.ceil(settings.max_steps / per_rank))
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
    print(f"{packs} packs of {settings.total_seq_len} tokens an epoch: {settings.ending(packs, ranks)}")
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
