"""``eagle3kit doctor``: findings for a draft config built here, a data directory or a trained draft folder
(notebook 02); the options, the refusal of those that would do nothing, then the handler."""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass, field
from typing import Any

from eagle3kit.cli.args import given, settings_options
from eagle3kit.errors import UserError
from eagle3kit.evaluate import defaults
from eagle3kit.evaluate.benchmarks import SETS as BENCH_SETS


@dataclass(frozen=True)
class Option:
    """A doctor option that one mode alone reads: its flag, default and help, the rest of ``add_argument``'s
    arguments, and (an option of the draft-folder mode) what it does, for the refusal without ``--draft``."""

    flag: str
    default: Any
    help: str
    does: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)


def _switch(flag: str, help: str, does: str = "") -> Option:
    return Option(flag, False, help, does, {"action": "store_true"})


# dest -> Option: what only the doctor of a config built here reads, then what only the doctor of a draft folder reads
CONFIG_ONLY = {
    "target_device": Option("--device", "auto", "the device the findings are for (default: auto)"),
    "attn": Option("--attn", "auto", "auto | unset | sdpa | eager | simple_flex_attention | ... (set on the config "
                   "as given, so that the doctor judges it)"),
    "seq_len": Option("--seq-len", None, "total_seq_len of the packed batches", kwargs={"type": int}),
    "loss": Option("--loss", "auto", "loss implementation (default: speculators' loss_config=None, i.e. fused)",
                   kwargs={"choices": ["auto", "eager", "fused", "default"]}),
    "model": _switch("--model", "also build the model and check its weights"),
}
DRAFT_ONLY = {
    "why_tau": _switch("--why-tau", "with --draft: measure why its tau is low (acceptance per position, the untrained "
                       "baseline, the dataset's text vs the verifier's, k vs TTT steps)",
                       "measures a draft folder's tau"),
    "bench": Option("--bench", None, "with --draft --why-tau: measure on prompts of this named set, whole and per "
                    f"category ({', '.join(BENCH_SETS)}), instead of --data's held-out prompts",
                    "names the prompt set --why-tau measures on", {"metavar": "NAME", "choices": list(BENCH_SETS)}),
    "no_measure": _switch("--no-measure", "with --draft: skip the measurement that tells trained weights from an "
                          "initialisation", "skips a draft folder's measurement"),
    "k": Option("--k", None, "with --draft: the k it is served with, checked against its TTT steps and measured by "
                f"--why-tau (default, or {defaults.K}: the draft's ttt_steps)",
                "is the k a draft folder is served with", {"type": int}),
}


def _add_options(p: argparse.ArgumentParser, options: dict[str, Option]) -> None:
    for dest, o in options.items():
        p.add_argument(o.flag, dest=dest, default=o.default, help=o.help, **o.kwargs)


def doctor_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec

    settings_options(p, DraftSpec, skip=("attn_implementation", "device"),
                     helps={"training": "check for training (gradients); --no-training: inference only",
                            "verifier": "the verifier to check against (default: the one --data's manifest names, "
                            f"else the one --draft's config names, else {DraftSpec.verifier})"})
    _add_options(p, CONFIG_ONLY)
    p.add_argument("--data", default=None, help="also check a data directory: hidden-state files, last state, "
                   "loss mask vs the chat template, aux slices, vocab mapping")
    p.add_argument("--long", action="store_true", help="one block per finding instead of a table")
    p.add_argument("--draft", metavar="DIR", default=None,
                   help="check a trained draft folder (an export, a `speculators train` output, a downloaded draft) "
                   "against its verifier (--verifier overrides the one its config names) and --data")
    _add_options(p, DRAFT_ONLY)
    p.add_argument("--catalogue", action="store_true",
                   help="list the failure catalogue (what users of EAGLE-3 trainers and engines hit, and the check "
                   "that names each) and exit")


def refuse_idle_options(args: argparse.Namespace) -> None:
    """A :class:`UserError` for the first doctor option that would do nothing in this mode (or contradict another)."""
    from eagle3kit.draft.config import DraftSpec

    if not args.draft:
        for dest, o in DRAFT_ONLY.items():
            if getattr(args, dest) != o.default:
                raise UserError(f"{o.flag} needs --draft DIR: it {o.does}; see `eagle3kit doctor --help`.")
        return
    idle = [o.flag for dest, o in CONFIG_ONLY.items() if getattr(args, dest) != o.default]
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
    from eagle3kit.doctor.checks.ram import available_bytes, ram_line

    print(ram_line(verifier, available_bytes()), flush=True)


def cmd_catalogue() -> int:
    """``doctor --catalogue``: the catalogue's rows, one line each: id, where, the doctor's check, the symptom."""
    import pandas as pd

    from eagle3kit.doctor.catalogue.rows import catalogue_rows
    from eagle3kit.tables import format_table, terminal_width

    rows = catalogue_rows()
    frame = pd.DataFrame([{"id": r.id, "where": r.cells.get("where", ""), "check": r.check or "",
                           "symptom": r.cells.get("symptom", "")} for r in rows])
    print(format_table(frame, terminal_width()))
    print(f"\n{len(rows)} failures; each row's fix and public reference: "
          "eagle3kit.doctor.catalogue.rows.catalogue_frame()")
    return 0


def cmd_doctor_draft(args: argparse.Namespace) -> int:
    """``doctor --draft DIR``: the folder's findings, then (``--why-tau``) the tau verdict, from one measurement."""
    from eagle3kit.doctor.checks.draft_folder import examine_draft_folder
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.doctor.tau.verdict import why_low_tau
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
    from eagle3kit.doctor.checks import run as doctor
    from eagle3kit.doctor.findings import findings_table, format_findings, has_errors
    from eagle3kit.draft.config import DraftSpec, build_config, set_attention
    from eagle3kit.draft.model import build_model
    from eagle3kit.tables import terminal_width

    if args.catalogue:
        return cmd_catalogue()
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
