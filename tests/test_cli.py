"""The ``eagle3kit`` command as a user types it: options generated from the typed settings, one-line errors (exit 2)
with the command to run next, a start-up that does not import torch."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import TINY_DATA_SEQ as SEQ
from eagle3kit.cli import build_parser, main
from eagle3kit.cli.args import field_comments, given
from eagle3kit.draft.config import DraftSpec, check_draft_vocab_size
from eagle3kit.errors import UserError, is_user_error
from eagle3kit.runner import check_parameters, notebooks
from eagle3kit.train.session import TrainSettings

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr and no traceback. Return that line."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eagle3kit: ") and "Traceback" not in err, err
    return err


def test_help_and_a_light_command_do_not_import_torch():
    code = "import sys; from eagle3kit import cli; cli.build_parser(''); cli.build_parser('masks'); " \
           "print('torch' in sys.modules, 'speculators' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_run_notebooks_help_names_every_preset(capsys):
    from eagle3kit import presets

    with pytest.raises(SystemExit):
        build_parser("run-notebooks").parse_args(["run-notebooks", "--help"])
    assert " | ".join(presets.NAMES) in " ".join(capsys.readouterr().out.split())  # argparse wraps the line


def test_python_dash_m_runs_the_same_command():
    out = subprocess.run([sys.executable, "-m", "eagle3kit.cli", "--help"], capture_output=True, text=True, check=True)
    assert "vllm-check" in out.stdout and "install-assets" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "eagle3kit.cli", "no-such-command"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_evaluate_and_vllm_check_measure_with_the_same_defaults():
    from eagle3kit.evaluate import defaults

    # n_prompts: None is defaults.N_PROMPTS held-out prompts, or a whole --bench set (both commands resolve it alike)
    shared = {"n_prompts": None, "bench": None, "max_prompt_tokens": defaults.MAX_PROMPT_TOKENS,
              "max_new_tokens": defaults.MAX_NEW_TOKENS, "k": defaults.K}
    for argv in (["evaluate"], ["vllm-check", "--draft", "d"]):
        args = vars(build_parser(argv[0]).parse_args(argv))
        assert {key: args[key] for key in shared} == shared, argv[0]


@pytest.mark.parametrize("command", ["train", "launch"])
def test_every_training_setting_and_draft_field_is_an_option(command):
    actions = {a.dest: a for a in build_parser(command)._subparsers._group_actions[0].choices[command]._actions}
    assert {f.name for f in dataclasses.fields(TrainSettings)} <= set(actions)  # a new field appears by itself
    assert {f.name for f in dataclasses.fields(DraftSpec)} - {"training", "device"} <= set(actions)
    assert actions["lr"].option_strings == ["--lr"] and "(default: 0.001)" in actions["lr"].help
    assert actions["scheduler_type"].help.startswith('"linear" | "cosine" | "none"')  # the field's own comment


@pytest.mark.parametrize("command", ["config", "train", "launch", "doctor"])
def test_only_generated_options_carry_a_field_name(command):
    """given() reads fields by name: a hand-written option under a field's name would leak into the settings."""
    fields = {f.name for cls in (DraftSpec, TrainSettings) for f in dataclasses.fields(cls)}
    parser = build_parser(command)._subparsers._group_actions[0].choices[command]
    leaks = [a.option_strings for a in parser._actions if a.dest in fields and a.default is not argparse.SUPPRESS]
    assert not leaks


def test_cli_config_builds_the_spec_it_was_given(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that no cell wraps
    assert main(["config", "--verifier", "tiny", "--device", "cpu", "--ttt-steps", "2", "--attn", "eager"]) == 0
    out = capsys.readouterr().out
    assert "eager" in out and "chosen by you" in out


def test_options_given_are_the_ones_typed_and_the_rest_keep_the_dataclass_default():
    args = build_parser("train").parse_args(["train", "--data", "D", "--lr", "2e-3", "--optimizer", "muon",
                                             "--aux-layer-ids", "1", "2", "--no-norm-output", "--warm-start-layer",
                                             "-1"])
    assert given(args, TrainSettings) == {"lr": 2e-3, "optimizer": "muon", "warm_start_layer": -1}
    assert given(args, DraftSpec) == {"aux_layer_ids": [1, 2], "norm_output": False}
    assert TrainSettings(**given(args, TrainSettings)).total_seq_len == TrainSettings().total_seq_len
    config = build_parser("config").parse_args(["config", "--attn", "eager", "--ttt-steps", "4"])
    assert given(config, DraftSpec) == {"attn_implementation": "eager", "ttt_steps": 4}


def test_field_comments_read_the_line_or_the_lines_above():
    notes = field_comments(TrainSettings)
    assert notes["muon_lr"].startswith("the Muon group's LR")
    assert notes["hidden_states_dtype"].startswith('"auto": float32 on CPU')  # the comment line above the field
    assert "lr" in notes and notes["lr"] == ""


def test_parse_errors_are_one_line_naming_the_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["masks", "--total-seq-lem", "128"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "see `eagle3kit masks --help`" in err


def test_unknown_set_key_is_refused_before_anything_runs(capsys, tmp_path):
    err = one_line_error(capsys, ["run-notebooks", "--preset", "ci", "--only", "01", "--set", "verifer=tiny",
                                  "--out", str(tmp_path)])
    assert "01_build_draft_config.ipynb" in err and "'verifer'" in err and "verifier" in err
    assert not list(tmp_path.glob("*.ipynb"))


def test_a_key_that_some_selected_notebooks_declare_is_fine():
    check_parameters(notebooks(NOTEBOOK_DIR, select=["01", "03"]), "ci", {"n_documents": 3, "forward_tokens": 64})


def test_a_preset_key_the_notebook_does_not_declare_is_refused(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell("workdir = ''\nforward_tokenz = 1")
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "01_x.ipynb")  # the ci preset sets forward_tokens for notebook 01
    with pytest.raises(UserError, match=r"'ci' sets forward_tokens for 01_x\.ipynb.*closest: forward_tokenz"):
        check_parameters(notebooks(tmp_path), "ci", {})


def test_bad_preset_and_bad_set_syntax(capsys, tmp_path):
    assert "use one of ci, demo" in one_line_error(capsys, ["run-notebooks", "--preset", "nope", "--out",
                                                            str(tmp_path)])
    assert "--set ttt_steps=4" in one_line_error(capsys, ["run-notebooks", "--set", "ttt_steps", "--out",
                                                          str(tmp_path)])


def test_missing_data_dir(capsys, tmp_path):
    err = one_line_error(capsys, ["train", "--data", str(tmp_path / "nowhere"), "--steps", "1"])
    assert "eagle3kit data" in err


def test_finished_run_and_settings_given_with_resume(tiny_data, tmp_path, capsys):
    ck = tmp_path / "ck"
    assert main(["train", "--data", str(tiny_data), "--device", "cpu", "--total-seq-len", str(SEQ), "--max-steps", "1",
                 "--steps", "1", "--save", str(ck)]) == 0
    capsys.readouterr()
    err = one_line_error(capsys, ["train", "--resume", str(ck), "--steps", "1"])
    assert "The run is complete" in err and "--max-steps" in err
    err = one_line_error(capsys, ["train", "--resume", str(ck), "--lr", "1e-2", "--ttt-steps", "2"])
    assert "--lr" in err and f"`eagle3kit train --data {tiny_data} --ttt-steps 2 --lr 0.01 --save NEW_DIR`" in err


def test_only_eagle3kit_diagnosed_value_errors_count_as_user_errors():
    with pytest.raises(ValueError) as ours:
        check_draft_vocab_size(0, 10)
    assert is_user_error(ours.value)
    with pytest.raises(ValueError) as theirs:  # raised inside a library: a bug to report, with its traceback
        json.loads("{")
    assert not is_user_error(theirs.value)


@pytest.mark.parametrize("argv", [["config", "--verifier", "tiny", "--device", "cpu", "--counts"],
                                  ["doctor", "--verifier", "tiny", "--attn", "unset", "--seq-len", "300"],
                                  ["masks", "--lengths", "300,100,77", "--ttt-steps", "4"]])
def test_tables_fit_an_80_column_terminal(argv, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    main(argv)
    out = capsys.readouterr().out
    assert len(out.splitlines()) > 5
    assert not [line for line in out.splitlines() if len(line) > 80]


def test_overfit_options_are_the_functions_defaults():
    import inspect

    from eagle3kit.train.overfit import overfit

    args = build_parser("overfit").parse_args(["overfit", "--warm-start-layer", "none"])
    defaults = {n: p.default for n, p in inspect.signature(overfit).parameters.items()}
    assert args.warm_start_layer is None and args.out_dir == defaults["out_dir"]
    assert {n: getattr(args, n) for n in ("steps", "k", "lr", "threshold", "draft_vocab_size")} == {
        n: defaults[n] for n in ("steps", "k", "lr", "threshold", "draft_vocab_size")}


def test_overfit_that_fails_exits_1_naming_a_wiring_bug(tiny_verifier, tmp_path, capsys):
    """A real run too short to learn (1 step at lr 1e-7, random init): the verdict, exit 1."""
    assert main(["overfit", "--verifier", "tiny", "--out", str(tmp_path), "--steps", "1", "--lr", "1e-7",
                 "--reply-tokens", "24", "--warm-start-layer", "none"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "FAILED" in out and "of a possible 4" in out and "wiring bug" in out


def test_install_vllm_of_a_finished_environment_returns_at_once(tmp_path, capsys):
    from eagle3kit.vllm_env import MARKER

    (tmp_path / MARKER).write_text("{}")
    assert main(["install-vllm", "--path", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path)


def test_vllm_check_user_errors_are_one_line(smollm2, tmp_path, capsys, monkeypatch):
    """A missing draft dir; one without config.json; a real (SmolLM2) draft config with no prompts; no vLLM env."""
    from eagle3kit.draft.config import build_config, save_config
    from eagle3kit.vllm_env import VENV_VAR

    assert "no such file or folder" in one_line_error(capsys, ["vllm-check", "--draft", str(tmp_path / "nothing")])
    (tmp_path / "empty").mkdir()
    assert "no config.json" in one_line_error(capsys, ["vllm-check", "--draft", str(tmp_path / "empty"), "--prompt",
                                                       "Hi"])
    draft = save_config(build_config(verifier="smollm2", ttt_steps=2, device="cpu"), tmp_path / "draft")
    monkeypatch.setenv(VENV_VAR, str(tmp_path / "no-env"))
    err = one_line_error(capsys, ["vllm-check", "--draft", str(draft), "--data", str(tmp_path)])
    assert "no held-out conversations" in err and "--prompt TEXT" in err
    err = one_line_error(capsys, ["vllm-check", "--draft", str(draft), "--prompt", "Hi"])
    assert "make vllm" in err and str(tmp_path / "no-env") in err
