"""``eagle3kit`` commands for the draft before training (notebooks 01-03): ``config``, ``doctor``, ``probe`` and
``masks``; each command's options, then its handler (a thin wrapper over the stage's library functions)."""

from __future__ import annotations

import argparse
import textwrap

from eagle3kit.cli.args import given, settings_options


# ----------------------------------------------------------------------------------------------- config
def config_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import

    settings_options(p, DraftSpec)
    p.add_argument("--counts", action="store_true", help="also build the model and count parameters")


def cmd_config(args: argparse.Namespace) -> int:
    """build the draft config for a verifier and explain every field"""
    from eagle3kit.draft.config import DraftSpec, build_config  # lazy: torch + speculators take seconds to import
    from eagle3kit.draft.model import build_model
    from eagle3kit.draft.report import explain
    from eagle3kit.tables import format_table

    build = build_config(DraftSpec(**given(args, DraftSpec)))
    model = build_model(build) if args.counts else None
    print(format_table(explain(build, model)))
    return 0


# ----------------------------------------------------------------------------------------------- doctor, probe
def doctor_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import

    settings_options(p, DraftSpec, skip=("attn_implementation", "device"),
                     helps={"training": "check for training (gradients); --no-training: inference only"})
    p.add_argument("--device", dest="target_device", default="auto",
                   help="the device the findings are for (default: auto)")
    p.add_argument("--attn", default="auto", help="auto | unset | sdpa | eager | simple_flex_attention | ... "
                   "(set on the config as given, so that the doctor judges it)")
    p.add_argument("--seq-len", type=int, default=None, help="total_seq_len of the packed batches")
    p.add_argument("--loss", default="auto", choices=["auto", "eager", "fused", "default"],
                   help="loss implementation (default: speculators' loss_config=None, i.e. fused)")
    p.add_argument("--model", action="store_true", help="also build the model and check its weights")
    p.add_argument("--data", default=None, help="also check a data directory: hidden-state files, last state, "
                   "loss mask vs the chat template, aux slices, vocab mapping")
    p.add_argument("--long", action="store_true", help="one block per finding instead of a table")
    p.add_argument("--draft", metavar="DIR", default=None,
                   help="check a trained draft folder (an export, a `speculators train` output, a downloaded draft) "
                   "against its verifier (--verifier overrides the one its config names) and --data")
    p.add_argument("--why-tau", action="store_true", help="with --draft: measure why its tau is low (acceptance per "
                   "position, the untrained baseline, the dataset's text vs the verifier's, k vs TTT steps)")
    p.add_argument("--no-measure", action="store_true",
                   help="with --draft: skip the measurement that tells trained weights from an initialisation")


def cmd_doctor_draft(args: argparse.Namespace) -> int:
    """``doctor --draft DIR``: the folder's findings, then (``--why-tau``) the tau verdict."""
    from eagle3kit.doctor.draft_folder import check_draft_folder  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.tables import format_table, terminal_width

    verifier = getattr(args, "verifier", None)
    findings = check_draft_folder(args.draft, verifier, args.data, measure=not args.no_measure)
    print(format_findings(findings, terminal_width()) if args.long else findings_table(findings))
    if args.why_tau:
        from eagle3kit.doctor.low_tau import why_low_tau

        report = why_low_tau(args.draft, verifier, args.data)
        print()
        print(format_table(report.table()))
        print("\n".join(textwrap.fill(line, terminal_width()) for line in report.verdict))
    return 1 if has_errors(findings) else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """preflight findings for a draft on a device (exit 1 on an error finding)"""
    from eagle3kit.doctor import checks as doctor  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.draft.config import DraftSpec, build_config, set_attention
    from eagle3kit.draft.model import build_model
    from eagle3kit.tables import terminal_width

    if args.draft:
        return cmd_doctor_draft(args)
    spec = DraftSpec(**given(args, DraftSpec), device="cpu")
    build = build_config(spec)
    if args.attn != "auto":  # set it raw, so that the doctor (not the builder) judges it
        set_attention(build.config, None if args.attn == "unset" else args.attn)
    subject = build_model(build) if args.model else build
    loss = None if args.loss == "default" else args.loss
    findings = doctor.check(subject, device=args.target_device, training=spec.training, loss=loss, seq_len=args.seq_len)
    if args.data:  # the data's own verifier unless one is named (a directory without a manifest needs it named)
        verifier = given(args, DraftSpec).get("verifier")
        if verifier is None:
            from eagle3kit.data.directory import DataDir

            DataDir.open(args.data).require_verifier()
        findings += doctor.check_data_dir(args.data, verifier)
    print(format_findings(findings, terminal_width()) if args.long else findings_table(findings))
    return 1 if has_errors(findings) else 0


def probe_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--backends", nargs="+", default=["eager", "sdpa", "simple_flex_attention", "flex_attention"])
    p.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell before it is killed")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per cell (median)")
    p.add_argument("--isolate-each", action="store_true", help="a fresh process for every cell")


def cmd_probe(args: argparse.Namespace) -> int:
    """measure every attention backend on this device, crash-isolated"""
    from eagle3kit.doctor import probe  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.verdict import recommend
    from eagle3kit.tables import format_table

    matrix = probe.probe(verifier=args.verifier, device=args.device, backends=args.backends, modes=args.modes,
                         seq_len=args.seq_len, ttt_steps=args.ttt_steps, timeout_s=args.timeout,
                         repeats=args.repeats, isolate_each=args.isolate_each)
    print(format_table(matrix.drop(columns=["loss"])))
    for training in (True, False):
        print(f"fastest backend matching eager ({'training' if training else 'inference'}): "
              f"{recommend(matrix, training) or 'none'}")
    return 0


# ----------------------------------------------------------------------------------------------- masks
def masks_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lengths", default="", help="packed document lengths, e.g. '300,512,77' (default: one document)")
    p.add_argument("--total-seq-len", type=int, default=None,
                   help="padded sequence length (default: the lengths' sum rounded up to a multiple of 128)")
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--sliding-window", type=int, default=0, help="0: full attention")
    p.add_argument("--plot", metavar="PNG", help="also save the token heatmap to this PNG file")


def cmd_masks(args: argparse.Namespace) -> int:
    """the EAGLE-3 training mask of a packed batch: stats per TTT step, PNG heatmap"""
    from eagle3kit.atomic import atomic_file  # lazy, with the stages below: torch takes seconds to import
    from eagle3kit.masks import plots as mask_plots
    from eagle3kit.masks.eagle_mask import build_mask
    from eagle3kit.masks.explorer import parse_lengths
    from eagle3kit.masks.stats import stats
    from eagle3kit.tables import column_blocks, format_table, terminal_width

    lengths = parse_lengths(args.lengths)
    mask = build_mask(lengths or [args.total_seq_len or 128], args.total_seq_len, args.ttt_steps,
                      args.sliding_window or None)
    print(textwrap.fill(f"{len(lengths)} documents, total_seq_len {mask.total_seq_len}, {mask.ttt_steps} TTT steps, "
                        f"window {mask.sliding_window or 'off'}; BlockMask built in {mask.build_seconds:.2f}s "
                        f"({'compiled' if mask.compiled else 'uncompiled'} create_block_mask)", terminal_width()))
    print(format_table(stats(mask), fallback=column_blocks))
    if args.plot:
        with atomic_file(args.plot) as tmp:
            mask_plots.plot_token_mask(mask).savefig(tmp, format="png", dpi=100)
        print(f"token heatmap written to {args.plot}")
    return 0
