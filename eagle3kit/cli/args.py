"""How the ``eagle3kit`` command line builds options: the parser, and options generated from typed fields.

The draft and training options are generated from the fields of :class:`~eagle3kit.draft.config.DraftSpec` and
:class:`~eagle3kit.train.session.TrainSettings` (``lr`` -> ``--lr``, its type, its comment as help): a default is
written once, in the dataclass. An option the user does not pass is absent from the parsed namespace, so the
dataclass's own default applies (:func:`given` picks the ones passed). Options for a function's parameters take
their types and defaults from its signature (:func:`signature_options`). Each command declares its options beside its
handler, in the module named after it (``cli.train``, ``cli.doctor``, ...).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

ALIASES = {"attn_implementation": ("--attn",)}  # short spellings kept for the option of this field


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (exit 2) naming the help to read."""

    help_prog = ""  # set on the top parser to the subcommand being parsed: its unknown options are reported here

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"eagle3kit: {message}; see `{self.help_prog or self.prog} --help`.\n")


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: the one ending its line, else the comment lines just above it."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):  # no source (a frozen install): options without comments
        return {}
    notes: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        if line.strip().startswith("#"):
            above.append(line.strip().lstrip("#").strip())
            continue
        match = re.match(r"\s+(\w+)\s*:[^=#]+(?:=[^#]*)?(?:#\s*(.*))?$", line)
        if match:
            notes[match[1]] = match[2] or " ".join(above)
        above = []
    return notes


def _option_type(hint: Any) -> tuple[type, type | None]:
    """(the base type, the element type of a list) of a field annotation; ``X | None`` counts as ``X``, and a union
    that admits ``str`` (``Verifier | str``, ``str | os.PathLike``) is typed as text."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    base = str if str in args else args[0]
    if typing.get_origin(base) is list:
        return list, typing.get_args(base)[0]
    return base, None


def _or_none(base: type) -> Callable[[str], Any]:
    """``base(text)``, or None for ``none``: a way to type None where the default is another value."""
    def parse(text: str) -> Any:
        return None if text.lower() == "none" else base(text)

    parse.__name__ = base.__name__  # argparse names it in "invalid int value"
    return parse


def _add_option(group, name: str, hint: Any, flags: list[str], text: str, default: Any = argparse.SUPPRESS) -> None:
    """One option for a typed value: a ``--flag/--no-flag`` pair for a bool, ``N ...`` for a list, ``none`` for
    None where the type allows it and the default is something else."""
    kwargs: dict[str, Any] = {"dest": name, "default": default, "help": text.replace("%", "%%")}
    base, element = _option_type(hint)
    if base is bool:
        group.add_argument(*flags, action=argparse.BooleanOptionalAction, **kwargs)
    elif base is list:
        group.add_argument(*flags, nargs="+", type=element, metavar="N", **kwargs)
    else:
        metavar = {int: "N", float: "X"}.get(base, "TEXT")
        if type(None) in typing.get_args(hint) and default not in (None, argparse.SUPPRESS):
            base, metavar = _or_none(base), f"{metavar}|none"
        group.add_argument(*flags, type=base, metavar=metavar, **kwargs)


def settings_options(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
                     helps: dict[str, str] | None = None) -> None:
    """Add ``--kebab-name`` for every field of the dataclass ``cls`` but ``skip``; ``helps`` replaces a help text."""
    hints = typing.get_type_hints(cls)
    notes = field_comments(cls)
    group = parser.add_argument_group(f"{cls.__name__} fields")
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        text = (helps or {}).get(f.name) or " ".join(filter(None, [notes.get(f.name), f"(default: {default})"]))
        _add_option(group, f.name, hints[f.name], [f"--{f.name.replace('_', '-')}", *ALIASES.get(f.name, ())], text)


def signature_options(parser: argparse.ArgumentParser, fn: Callable, helps: dict[str, str],
                      flags: dict[str, str] | None = None) -> None:
    """Add ``--kebab-name`` (or ``flags[name]``) for each parameter of ``fn`` named in ``helps``, with the
    parameter's type and default: the function stays the one home of its defaults."""
    hints = typing.get_type_hints(fn)
    params = inspect.signature(fn).parameters
    for name, text in helps.items():
        default = params[name].default
        flag = (flags or {}).get(name, f"--{name.replace('_', '-')}")
        _add_option(parser, name, hints.get(name, type(default)), [flag],
                    " ".join(filter(None, [text, f"(default: {default})"])), default)


def given_params(args: argparse.Namespace, fn: Callable) -> dict[str, Any]:
    """The parameters of ``fn`` that the parsed namespace holds (by name)."""
    return {name: getattr(args, name) for name in inspect.signature(fn).parameters if hasattr(args, name)}


def given(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The fields of ``cls`` the user passed on the command line (the others keep the dataclass's default)."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}


def as_typed(options: dict[str, Any]) -> str:
    """``{"lr": 0.01, "norm_output": False}`` -> ``--lr 0.01 --no-norm-output``, as a user types them."""
    def one(name: str, value) -> str:
        flag = name.replace("_", "-")
        if isinstance(value, bool):
            return f"--{flag}" if value else f"--no-{flag}"
        return f"--{flag} " + (" ".join(map(str, value)) if isinstance(value, list) else str(value))

    return " ".join(one(k, v) for k, v in options.items())


def no_options(_p: argparse.ArgumentParser) -> None:
    """A subcommand without options."""
