"""Every parsed option checked before a command's handler runs: its value against the library's rule for a value of
that name (:mod:`eagle3kit.validate`), the paths it reads (they must exist) and the places it writes
(:func:`eagle3kit.outputs.check_output`). Which options read and write follows from their names, below.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

from eagle3kit import validate
from eagle3kit.errors import UserError
from eagle3kit.outputs import OutputError, check_output

# options that name a place the command writes (dest -> a folder (True) or a file (False)), and that name inputs
OUTPUTS: dict[str, bool] = {"out": True, "out_dir": True, "save": True, "export": True, "path": True, "workdir": True,
                            "out_path": False, "plot": False, "json_path": False}
INPUTS: dict[str, str] = {  # dest -> how to make what it names
    "data": "make a data directory with `eagle3kit data --out DIR`",
    "source": "pass a JSONL file of conversations, or leave it out for ShareGPT V3",
    "resume": "pass a checkpoint folder written by `eagle3kit train ... --save DIR`",
    "draft": "pass a draft exported by `eagle3kit train ... --export DIR`",
    "config": "pass the run.yaml that `eagle3kit launch --out DIR` wrote (DIR/run.yaml)"}


class InputMissing(FileNotFoundError):
    """An option names a file or folder that is not there (one line, exit 2, as every missing file)."""


def command_actions(parser: argparse.ArgumentParser, command: str) -> list[argparse.Action]:
    """The options of subcommand ``command`` of the ``eagle3kit`` parser (those it has built)."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return [a for a in sub.choices[command]._actions if a.option_strings and a.dest != "help"]  # noqa: SLF001


def _given(args: argparse.Namespace, actions: list[argparse.Action]) -> Iterator[tuple[str, str, Any]]:
    """(flag, dest, value) of every option the namespace holds a value for (lists element by element)."""
    for action in actions:
        value = getattr(args, action.dest, None)
        for one in value if isinstance(value, list) else [value]:
            if one is not None:
                yield action.option_strings[0], action.dest, one


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, in one sentence, the first option value that its rule, the file system or the disk does not allow."""
    actions = command_actions(parser, args.command)
    for flag, dest, value in _given(args, actions):
        rule = validate.rule_for(dest)
        if rule is not None and not rule.fits(value):
            raise UserError(f"{flag} {value}: use {rule.allowed()}; see `eagle3kit {args.command} --help`.")
        if dest in INPUTS and not os.path.exists(value):
            raise InputMissing(f"{flag} {value}: no such file or folder; {INPUTS[dest]}.")
        if dest in OUTPUTS:
            check_output(value, flag, folder=OUTPUTS[dest])


def room_for_training(args: argparse.Namespace, session) -> None:
    """Refuse ``--save`` / ``--export`` places without room for the checkpoint / the draft, before any step."""
    from eagle3kit.train.checkpoint import checkpoint_bytes, weights_bytes

    for flag, place, size in (("--save", args.save, checkpoint_bytes), ("--export", args.export, weights_bytes)):
        if place:
            check_output(place, flag, need_bytes=size(session.model))


__all__ = ["OUTPUTS", "INPUTS", "InputMissing", "OutputError", "check", "command_actions", "room_for_training"]
