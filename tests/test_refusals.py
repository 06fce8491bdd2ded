"""Every bad input refused in one line before any work starts (issue 30).

The cases are derived, not listed: every option of every ``eagle3kit`` command (from the parsers) and every parameter
of every notebook (from papermill's inspection) gets the bad values its type and its rule imply -- text where a number
goes, one below the rule's minimum (negative, or zero where zero is not allowed), a value outside the choices, a
missing input path, an output path under a file, a folder that cannot be written. Each must end in one line on
stderr, exit 2, no traceback, no output on stdout and nothing written. A new option or parameter is covered by itself.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import papermill
import pytest

from eagle3kit import validate
from eagle3kit.cli import COMMANDS, build_parser, main
from eagle3kit.cli.preflight import INPUTS, OUTPUTS, check, command_actions
from eagle3kit.data import hidden_states as hs
from eagle3kit.outputs import OutputError, check_output
from eagle3kit.params import parameters
from eagle3kit.presets import NAMES
from eagle3kit.runner import check_values, notebooks

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"

UNWRITABLE = Path("/sys/eagle3kit-refusals")  # sysfs refuses new files even to root (chmod would not stop root)
PARSER = build_parser()


def _numeric(action: argparse.Action) -> type | None:
    """int or float for an option that parses numbers (``type=int``, or the ``int|none`` parser), else None."""
    name = getattr(action.type, "__name__", "")
    return {"int": int, "float": float}.get(name)


def below(rule: validate.Rule) -> list[tuple[str, str]]:
    """(what, value) pairs a rule forbids: below its minimum, at its exclusive bound, above its maximum, no choice."""
    out = []
    if rule.choices:
        out.append(("not one of the choices", "no-such-choice"))
    if rule.minimum is not None:
        value = rule.minimum - 1
        out.append(("negative" if value < 0 else "zero" if value == 0 else "too small", f"{value:g}"))
    if rule.above is not None:
        out.append(("zero" if rule.above == 0 else "at the bound", f"{rule.above:g}"))
    if rule.maximum is not None:
        out.append(("too large", f"{rule.maximum + 1:g}"))
    return out


def option_cases() -> list[tuple[str, str, str, str]]:
    """(command, flag, what, value) for every option of every command; paths are placeholders filled per test."""
    cases = []
    for command, _handler, _options in COMMANDS:
        for action in command_actions(PARSER, command):
            flag = action.option_strings[0]
            kind = _numeric(action)
            if kind is not None:
                cases.append((command, flag, "wrong type", "abc"))
            rule = validate.rule_for(action.dest)
            if rule is not None and (kind is not None or (rule.choices and not action.choices)):
                cases += [(command, flag, what, value) for what, value in below(rule)]
            if action.choices and not isinstance(action, argparse.BooleanOptionalAction):
                cases.append((command, flag, "not one of the choices", "no-such-choice"))
            if action.dest in INPUTS:
                cases.append((command, flag, "missing input", "{missing}"))
            if action.dest in OUTPUTS:
                cases += [(command, flag, "output under a file", "{file}/sub"),
                          (command, flag, "unwritable folder", f"{UNWRITABLE}/out")]
                if not OUTPUTS[action.dest]:
                    cases.append((command, flag, "a folder where a file goes", "{folder}"))
    return cases


def notebook_cases() -> list[tuple[str, str, str, str]]:
    """(notebook, parameter, what, --set text) for every parameter of every notebook but ``workdir`` (the runner
    sets it from ``--out``, whose cases are above)."""
    cases = []
    for path in notebooks(NOTEBOOK_DIR):
        for name, param in parameters(path).items():
            if name == "workdir":
                continue
            wrong = {int: "abc", float: "abc", bool: "3", str: "5"}.get(param.kind)
            if wrong is not None:
                cases.append((path.name, name, "wrong type", wrong))
            rule = validate.rule_for(name)
            if rule is not None:  # a notebook's 0 stands for None where the rule allows None: -1 is the bad value
                cases += [(path.name, name, what, value) if not (what == "zero" and rule.none) else
                          (path.name, name, "negative", "-1") for what, value in below(rule)]
    return cases


OPTION_CASES = option_cases()
NOTEBOOK_CASES = notebook_cases()


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A working folder (the cwd, so relative default outputs land in it) with a file, a folder and an input."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "an_input").mkdir()
    return tmp_path


def _unwritable_or_skip() -> None:
    try:
        fd, probe = tempfile.mkstemp(dir=UNWRITABLE.parent)
    except OSError:
        return
    os.close(fd)
    os.unlink(probe)
    pytest.skip(f"{UNWRITABLE.parent} is writable on this machine")


def base_argv(command: str, place: Path) -> list[str]:
    """The command with a valid value for each required option (an existing input, a new output)."""
    argv = [command]
    for action in command_actions(PARSER, command):
        if action.required:
            assert action.dest in INPUTS or action.dest in OUTPUTS, f"{command} {action.option_strings[0]}: no value"
            argv += [action.option_strings[0],
                     str(place / "an_input") if action.dest in INPUTS else str(place / f"new_{action.dest}")]
    return argv


def with_option(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag value`` (replacing the flag's valid value when it was required)."""
    if flag in argv:
        i = argv.index(flag)
        return [*argv[:i], *argv[i + 2:], flag, value]
    return [*argv, flag, value]


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def refused(capsys, argv: list[str]) -> str:
    """Run the CLI in-process; it must exit 2 with one line on stderr, no traceback, nothing on stdout."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals (wrong type, not a choice) exit from the parser
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert err.count("\n") == 1 and err.startswith("eagle3kit: ") and "Traceback" not in err, (argv, err)
    assert out == "", (argv, out)
    return err


def test_the_walk_covers_every_command_and_notebook():
    assert {c for c, *_ in OPTION_CASES} == {name for name, *_ in COMMANDS} - {"install-assets"}  # it has no options
    assert {n for n, *_ in NOTEBOOK_CASES} == {p.name for p in notebooks(NOTEBOOK_DIR)}
    assert {dest for dest in OUTPUTS if dest != "workdir"} <= {a.dest for c, *_ in COMMANDS
                                                               for a in command_actions(PARSER, c)}
    print(f"\n{len(OPTION_CASES)} option cases + {len(NOTEBOOK_CASES)} notebook cases "
          f"= {len(OPTION_CASES) + len(NOTEBOOK_CASES)} (command, option, bad value) cases")


@pytest.mark.parametrize("command, flag, what, value", OPTION_CASES,
                         ids=[f"{c} {f} {w}" for c, f, w, _ in OPTION_CASES])
def test_every_bad_option_is_refused_before_work(command, flag, what, value, place, capsys):
    if what == "unwritable folder":
        _unwritable_or_skip()
    value = value.format(missing=place / "missing", file=place / "a_file", folder=place / "a_folder")
    before = tree(place)
    err = refused(capsys, with_option(base_argv(command, place), flag, value))
    assert flag in err or "invalid" in err, err  # ours name the flag; argparse's say "invalid ... value"
    assert tree(place) == before  # nothing was written, not even a folder


@pytest.mark.parametrize("command", [name for name, *_ in COMMANDS])
def test_valid_and_default_options_pass_the_checks(command, place):
    """The other direction: the defaults and a valid value for each required option raise nothing."""
    before = tree(place)
    check(PARSER, PARSER.parse_args(base_argv(command, place)))
    assert tree(place) == before


@pytest.mark.parametrize("notebook, name, what, value", NOTEBOOK_CASES,
                         ids=[f"{n[:2]} {p} {w}" for n, p, w, _ in NOTEBOOK_CASES])
def test_every_bad_notebook_parameter_is_refused_before_any_notebook_runs(notebook, name, what, value, place,
                                                                          capsys, monkeypatch):
    ran = []  # a tripwire, not a stand-in: a case that is not refused fails at once instead of running a notebook
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: ran.append(a) or 1 / 0)
    out = place / "run"
    err = refused(capsys, ["run-notebooks", "--notebooks", str(NOTEBOOK_DIR), "--preset", "ci", "--only", notebook[:2],
                           "--out", str(out),
                           "--set", f"{name}={value}"])
    assert notebook[:2] in err and f"parameter {name}=" in err and "--set" in err, err
    assert not out.exists() and not ran


@pytest.mark.parametrize("preset", NAMES)
def test_the_presets_and_defaults_pass_every_notebook(preset, tmp_path):
    check_values(notebooks(NOTEBOOK_DIR), preset, {}, tmp_path / "work")


def test_issue_cases_through_a_real_process(tmp_path):
    """The issue's cases as a user types them: exit status 2, one line, no traceback, nothing made (a handful: each
    process imports torch; the walk above runs every case in-process)."""
    (tmp_path / "f").write_text("x")
    cases = [["run-notebooks", "--notebooks", str(NOTEBOOK_DIR), "--preset", "ci", "--set", "ttt_steps=abc", "--out",
              str(tmp_path / "r")],
             ["data", "--out", str(tmp_path / "f" / "sub")],
             ["train", "--data", str(tmp_path), "--save", str(tmp_path / "f" / "sub")]]
    for argv in cases:
        proc = subprocess.run([sys.executable, "-m", "eagle3kit.cli", *argv], capture_output=True, text=True,
                              cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == "", (argv, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_check_output_fires_on_a_full_disk_and_stays_silent_with_room(tmp_path):
    check_output(tmp_path / "new" / "deeper", "--out", need_bytes=1)  # can be made, has room
    with pytest.raises(OutputError, match="needs about .* free"):
        check_output(tmp_path / "new", "--out", need_bytes=1 << 60)
    assert list(tmp_path.iterdir()) == []


def test_the_hidden_state_size_is_what_a_file_takes(tmp_path):
    """The estimate the data command checks the disk with, against a real file of the layout."""
    import torch

    tokens, states, hidden = 37, 4, 24
    path = tmp_path / "hs_0.safetensors"
    hs.write_file(path, torch.zeros(tokens, states, hidden, dtype=torch.bfloat16), torch.arange(tokens))
    assert hs.sample_file_bytes(tokens, hidden, states, torch.bfloat16.itemsize) == path.stat().st_size


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 KiB file system (tmpfs) to run out of room on; skipped where this user cannot mount one."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if made.returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=True)


def test_training_without_room_for_its_checkpoint_is_refused_before_a_step(tiny_data, small_disk, capsys):
    argv = ["train", "--data", str(tiny_data), "--device", "cpu", "--total-seq-len", "256", "--steps", "1"]
    err = refused(capsys, [*argv, "--save", str(small_disk / "ck")])
    assert "--save" in err and "needs about" in err
    err = refused(capsys, [*argv, "--export", str(small_disk / "draft")])
    assert "--export" in err and "needs about" in err
    assert list(small_disk.iterdir()) == []


@pytest.mark.catalogue("hidden-states-disk")
def test_data_without_room_for_its_hidden_states_is_refused_before_the_verifier_loads(small_disk, capsys):
    """The size follows from the token count, known once the conversations are tokenized (seconds, kept: a rerun
    resumes from there); the refusal comes then, before the verifier loads and any hidden state is written."""
    out = small_disk / "d"
    assert main(["data", "--verifier", "tiny", "--out", str(out), "--n-conversations", "4", "--seq-length", "256",
                 "--held-out", "0", "--verify", "0"]) == 2
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1].split("\r")[-1]
    assert last.startswith("eagle3kit: out_dir") and "needs about" in last and "Traceback" not in captured.err
    assert captured.out == "" and "extract" not in captured.err
    assert not list((out / "hidden_states").glob("*")) if (out / "hidden_states").exists() else True
