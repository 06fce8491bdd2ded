"""The ``eagle3kit`` command line's options, one function per subcommand.

The draft and training options are generated from the fields of :class:`~eagle3kit.draft.config.DraftSpec` and
:class:`~eagle3kit.train.session.TrainSettings` (``lr`` -> ``--lr``, its type, its comment as help): a default is
written once, in the dataclass. An option the user does not pass is absent from the parsed namespace, so the
dataclass's own default applies (:func:`given` picks the ones passed).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
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
    """(the base type, the element type of a list) of a field annotation; ``X | None`` counts as ``X``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if isinstance(hint, types.UnionType) else [hint]
    base = args[0]
    if typing.get_origin(base) is list:
        return list, typing.get_args(base)[0]
    return base, None


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
        flags = [f"--{f.name.replace('_', '-')}", *ALIASES.get(f.name, ())]
        kwargs: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": text.replace("%", "%%")}
        base, element = _option_type(hints[f.name])
        if base is bool:
            group.add_argument(*flags, action=argparse.BooleanOptionalAction, **kwargs)
        elif base is list:
            group.add_argument(*flags, nargs="+", type=element, metavar="N", **kwargs)
        else:
            group.add_argument(*flags, type=base, metavar={int: "N", float: "X"}.get(base, "TEXT"), **kwargs)


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


def run_notebooks(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="demo", help="a named preset of eagle3kit.presets: ci | demo (default: demo)")
    p.add_argument("--out", default="runs/demo", help="output folder for executed notebooks and the summary")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="set a notebook parameter (checked against each notebook's parameters cell)")
    p.add_argument("--only", nargs="+", metavar="NN", help="run only these notebooks (e.g. 01 03)")
    p.add_argument("--keep-going", action="store_true", help="run later notebooks after a failure")


def config(p: argparse.ArgumentParser) -> None:
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import

    settings_options(p, DraftSpec)
    p.add_argument("--counts", action="store_true", help="also build the model and count parameters")


def regenerate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="JSONL to write (resumes an interrupted run)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-prompt-tokens", type=int, default=256, help="the user turn is cut to this many tokens")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="auto")


def data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--out", required=True, help="data directory (pass it to speculators train --data-path)")
    p.add_argument("--n-conversations", type=int, default=64)
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--draft-vocab-size", type=int, default=None, help="write d2t-N.npy / t2d-N.npy for this size")
    p.add_argument("--held-out", type=int, default=8, help="conversations kept out for evaluation")
    p.add_argument("--source", default=None, help="JSONL of conversations (default: ShareGPT V3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--overwrite", action="store_true", help="rebuild a directory made with other settings")
    p.add_argument("--verify", type=int, default=2, metavar="N", help="targets check on N samples (0: skip)")


FROM_DATA = {"verifier": "default: the verifier the data was made with",
             "draft_vocab_size": "default: the data's draft vocab (its d2t/t2d mapping)"}


def _run_options(p: argparse.ArgumentParser, data_required: bool, skip_draft: tuple[str, ...]) -> None:
    """The options ``train`` and ``launch`` share: the data, the draft's fields and the training settings."""
    from eagle3kit.draft.config import DraftSpec  # lazy: torch + speculators take seconds to import
    from eagle3kit.train.session import TrainSettings  # lazy: torch + speculators take seconds to import

    p.add_argument("--data", required=data_required, help="data directory made by `eagle3kit data`")
    settings_options(p, DraftSpec, skip=("training", *skip_draft), helps=FROM_DATA)
    settings_options(p, TrainSettings)


def train(p: argparse.ArgumentParser) -> None:
    _run_options(p, data_required=False, skip_draft=())
    p.add_argument("--steps", type=int, default=10, help="steps to take now")
    p.add_argument("--save", default=None,
                   help="checkpoint directory, written at the end (default with --resume: that directory)")
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--resume", default=None, help="checkpoint directory to continue from (with its own settings)")
    p.add_argument("--export", default=None, help="also save the draft alone (speculators format)")


def launch(p: argparse.ArgumentParser) -> None:
    _run_options(p, data_required=True, skip_draft=("device",))
    p.add_argument("--out", required=True, help="folder for run.yaml (and the dry run's checkpoint)")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--fsdp", action="store_true", help="shard parameters with FSDP2 (--fsdp-shard)")
    p.add_argument("--cluster-verifier", default=None, help="verifier path/hub id as the cluster sees it")
    p.add_argument("--dry-run", action="store_true",
                   help="run `speculators train --dry-run` here and compare its config.json with eagle3kit's")


def doctor(p: argparse.ArgumentParser) -> None:
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
    p.add_argument("--data", default=None, help="also check a data directory's hidden-state files and convention")
    p.add_argument("--long", action="store_true", help="one block per finding instead of a table")


def probe(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--backends", nargs="+", default=["eager", "sdpa", "simple_flex_attention", "flex_attention"])
    p.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell before it is killed")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per cell (median)")
    p.add_argument("--isolate-each", action="store_true", help="a fresh process for every cell")


def evaluate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    p.add_argument("--data", help="a data directory: its held-out conversations give the prompts")
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable; without --data)")
    p.add_argument("--n-prompts", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=0, help="draft tokens per round (0: the draft's ttt_steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-decode", action="store_true", help="simulated acceptance only (skip the decode loop)")


def masks(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lengths", default="", help="packed document lengths, e.g. '300,512,77' (default: one document)")
    p.add_argument("--total-seq-len", type=int, default=None,
                   help="padded sequence length (default: the lengths' sum rounded up to a multiple of 128)")
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--sliding-window", type=int, default=0, help="0: full attention")
    p.add_argument("--plot", metavar="PNG", help="also save the token heatmap to this PNG file")


def no_options(_p: argparse.ArgumentParser) -> None:
    """A subcommand without options."""
