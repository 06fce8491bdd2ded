"""``eagle3kit doctor``: findings for a draft config built here, a data directory or a trained draft folder
(notebook 02); the options, the refusal of those that would do nothing, then the handler."""

from __future__ import annotations

import argparse
import textwrap

from eagle3kit.cli.args import given, settings_options
from eagle3kit.errors import UserError
from eagle3kit.evaluate.benchmarks import SETS as BENCH_SETS


# dest -> (flag, default): what only the doctor of a config built here reads, and only the doctor of a draft folder
CONFIG_ONLY = {"target_device": ("--device", "auto"), "attn": ("--attn", "auto"), "seq_len": ("--seq-len", None),
               "loss": ("--loss", "auto"), "model": ("--model", False)}
DRAFT_ONLY = {"why_tau": ("--why-tau", False, "measures a draft folder's tau"),
              "no_measure": ("--no-measure", False, "skips a draft folder's measurement"),
              "k": ("--k", None, "is the k a draft folder is served with"),
              "bench": ("--bench", None, "names the prompt set --why-tau measures on")}


def doctor_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import
    from eagle3kit.evaluate import defaults

    settings_options(p, DraftSpec, skip=("attn_implementation", "device"),
                     helps={"training": "check for training (gradients); --no-training: inference only",
                            "verifier": "the verifier to check against (default: the one --data's manifest names, "
                            f"else the one --draft's config names, else {DraftSpec.verifier})"})
    p.add_argument("--device", dest="target_device", default=CONFIG_ONLY["target_device"][1],
                   help="the device the findings are for (default: auto)")
    p.add_argument("--attn", default=CONFIG_ONLY["attn"][1], help="auto | unset | sdpa | eager | "
                   "simple_flex_attention | ... (set on the config as given, so that the doctor judges it)")
    p.add_argument("--seq-len", type=int, default=CONFIG_ONLY["seq_len"][1], help="total_seq_len of the packed batches")
    p.add_argument("--loss", default=CONFIG_ONLY["loss"][1], choices=["auto", "eager", "fused", "default"],
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
    p.add_argument("--bench", metavar="NAME", default=None, choices=list(BENCH_SETS),
                   help="with --draft --why-tau: measure on prompts of this named set, whole and per category "
                   f"({', '.join(BENCH_SETS)}), instead of --data's held-out prompts")
    p.add_argument("--no-measure", action="store_true",
                   help="with --draft: skip the measurement that tells trained weights from an initialisation")
    p.add_argument("--k", type=int, default=DRAFT_ONLY["k"][1], help="with --draft: the k it is served with, checked "
                   f"against its TTT steps and measured by --why-tau (default, or {defaults.K}: the draft's "
                   "ttt_steps)")


def refuse_idle_options(args: argparse.Namespace) -> None:
    """A :class:`UserError` for the first doctor option that would do nothing in this mode (or contradict another)."""
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import

    if not args.draft:
        for dest, (flag, default, does) in DRAFT_ONLY.items():
            if getattr(args, dest) != default:
                raise UserError(f"{flag} needs --draft DIR: it {does}; see `eagle3kit doctor --help`.")
        return
    idle = [flag for dest, (flag, default) in CONFIG_ONLY.items() if getattr(args, dest) != default]
    idle += [f"--{name.replace('_', '-')}" for name in given(args, DraftSpec) if name != "verifier"]
    if idle:
        raise UserError(f"{idle[0]} does nothing with --draft DIR: it shapes the draft config the doctor builds, and "
                        f"a draft folder is checked as it was saved; leave {idle[0]} out, or drop --draft.")
    if args.bench and not args.why_tau:
        raise UserError("--bench names the prompts --why-tau measures on; add --why-tau, or leave --bench out.")
    if args.why_tau and args.no_measure:
        raise UserError("--why-tau is a measurement (it also tells trained weights from an initialisation) and "
                        "--no-measure skips it: pass one of them.")


def state_ram(verifier) -> None:
    """Print the RAM the verifier takes in float32 on the CPU before the doctor loads it; refuse when short."""
    from eagle3kit.doctor.ram import available_bytes, ram_line  # lazy: torch + speculators take seconds to import

    print(ram_line(verifier, available_bytes()), flush=True)


def cmd_doctor_draft(args: argparse.Namespace) -> int:
    """``doctor --draft DIR``: the folder's findings, then (``--why-tau``) the tau verdict, from one measurement."""
    from eagle3kit.doctor.draft_folder import examine_draft_folder  # lazy: torch + speculators take seconds
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.doctor.low_tau import why_low_tau
    from eagle3kit.tables import format_table, terminal_width

    verifier, k = getattr(args, "verifier", None), args.k or None
    report = (why_low_tau(args.draft, verifier, args.data, k=k, before_load=state_ram, bench=args.bench)
              if args.why_tau else None)
    findings = report.findings if report else examine_draft_folder(
        args.draft, verifier, args.data, k, measure=not args.no_measure, before_load=state_ram).findings
    print(format_findings(findings, terminal_width()) if args.long else findings_table(findings))
    if report is not None:
        print()
        if report.agreement is not None:
            print(format_table(report.table()))
            if report.bench:
                print(f"\n{report.bench}, τ per category:")
                print(format_table(report.category_table()))
        print("\n".join(textwrap.fill(line, terminal_width()) for line in report.verdict))
    return 1 if has_errors(findings) else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """preflight findings for a draft on a device (exit 1 on an error finding)"""
    from eagle3kit.doctor import checks as doctor  # lazy: torch + speculators take seconds to import
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.draft.config import DraftSpec, build_config, set_attention
    from eagle3kit.draft.model import build_model
    from eagle3kit.tables import terminal_width

    refuse_idle_options(args)
    if args.draft:
        return cmd_doctor_draft(args)
    fields = given(args, DraftSpec)
    named = fields.get("verifier")
    if args.data and named is None:  # the data's own verifier (a directory without a manifest needs it named)
        from eagle3kit.data.directory import DataDir

        fields["verifier"] = DataDir.open(args.data).require_verifier()
    spec = DraftSpec(**fields, device="cpu")
    build = build_config(spec)
    if args.attn != "auto":  # set it raw, so that the doctor (not the builder) judges it
        set_attention(build.config, None if args.attn == "unset" else args.attn)
    subject = build_model(build) if args.model else build
    loss = None if args.loss == "default" else args.loss
    findings = doctor.check(subject, device=args.target_device, training=spec.training, loss=loss, seq_len=args.seq_len)
    if args.data:
        if build.verifier.has_weights:
            state_ram(build.verifier)
        findings += doctor.check_data_dir(args.data, named)
    print(format_findings(findings, terminal_width()) if args.long else findings_table(findings))
    return 1 if has_errors(findings) else 0
