"""``eagle3kit config``: the draft config built for a verifier, every field explained (notebook 01)."""

from __future__ import annotations

import argparse

from eagle3kit.cli.args import given, settings_options


def config_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec

    settings_options(p, DraftSpec)
    p.add_argument("--counts", action="store_true", help="also build the model and count parameters")


def cmd_config(args: argparse.Namespace) -> int:
    """build the draft config for a verifier and explain every field"""
    from eagle3kit.draft.config import DraftSpec, build_config
    from eagle3kit.draft.model import build_model
    from eagle3kit.draft.explain import explain
    from eagle3kit.tables import format_table

    build = build_config(DraftSpec(**given(args, DraftSpec)))
    model = build_model(build) if args.counts else None
    print(format_table(explain(build, model)))
    return 0
