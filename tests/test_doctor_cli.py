"""`eagle3kit doctor` as a user types it (issue 38): options that would do nothing in a mode are refused in one line,
`--draft --why-tau` loads the verifier and measures once (its `--k` measured), `--data` is checked against the
verifier its manifest names, and the verifier's float32 RAM is stated before it loads (refused when short)."""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from eagle3kit.cli import main
from eagle3kit.doctor.checks import trained
from eagle3kit.doctor.checks.ram import available_bytes, ram_line
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model, save_draft
from eagle3kit.errors import UserError
from eagle3kit import verifier as verifiers
from eagle3kit.verifier import make_tiny, resolve


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    """A tiny draft folder as speculators saves it (its initialisation: cheap, and a real folder to measure)."""
    torch.manual_seed(1)
    return save_draft(build_model(build_config(verifier="tiny", device="cpu")), tmp_path_factory.mktemp("d") / "draft")


def refused(capsys, argv: list[str], words: str) -> None:
    """``eagle3kit argv`` ends in exit 2 with one stderr line containing ``words``."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


# ----------------------------------------------------------------------------------------------- idle options
@pytest.mark.parametrize("option", [["--why-tau"], ["--no-measure"], ["--k", "2"]])
def test_a_draft_folder_option_without_draft_is_refused(option, capsys):
    refused(capsys, ["doctor", "--verifier", "tiny", *option], f"{option[0]} needs --draft DIR")


def test_the_config_doctor_without_draft_options_runs(capsys):
    assert main(["doctor", "--verifier", "tiny", "--device", "cpu"]) in (0, 1)
    captured = capsys.readouterr()
    assert captured.err == "" and "attention" in captured.out


@pytest.mark.parametrize("option", [["--attn", "sdpa"], ["--model"], ["--seq-len", "256"], ["--loss", "eager"],
                                    ["--device", "cpu"], ["--ttt-steps", "2"], ["--draft-vocab-size", "64"]])
def test_a_config_option_with_draft_is_refused(option, draft, capsys):
    refused(capsys, ["doctor", "--draft", str(draft), *option], f"{option[0]} does nothing with --draft DIR")


def test_why_tau_with_no_measure_is_refused(draft, capsys):
    refused(capsys, ["doctor", "--draft", str(draft), "--why-tau", "--no-measure"], "pass one of them")


def test_draft_options_with_draft_run_and_state_the_ram_first(draft, capsys):
    assert main(["doctor", "--draft", str(draft), "--verifier", "tiny", "--no-measure", "--k", "2", "--long"]) == 0
    captured = capsys.readouterr()
    assert "eagle3kit:" not in captured.err  # (transformers' progress bar is there)
    assert captured.out.startswith("loading tiny in float32 on the CPU: about ") and "GB of RAM" in captured.out


# ----------------------------------------------------------------------------------------------- measure once
@pytest.mark.parametrize("k, possible", [([], 4), (["--k", "2"], 3)])  # tiny drafts train 3 TTT steps
def test_why_tau_loads_the_verifier_and_measures_once_with_its_k(k, possible, draft, capsys):
    """The spies wrap the real functions: the folder check's "trained" finding and the verdict share one load of
    the verifier and one measurement, made at the served k."""
    with mock.patch("eagle3kit.doctor.checks.trained.measure", wraps=trained.measure) as measures, \
            mock.patch("eagle3kit.verifier.load_model", wraps=verifiers.load_model) as loads:
        assert main(["doctor", "--draft", str(draft), "--why-tau", "--long", *k]) == 1  # an initialisation: an error
    assert measures.call_count == 1 and loads.call_count == 1, (measures.call_args_list, loads.call_args_list)
    assert measures.call_args.args[5] == possible - 1
    out = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal's width: compare words
    assert "no better than an untrained one" in out and f"of a possible {possible}" in out


# ----------------------------------------------------------------------------------------------- --data's verifier
def test_data_is_checked_against_the_verifier_its_manifest_names(tiny_data, capsys):
    assert main(["doctor", "--data", str(tiny_data), "--device", "cpu", "--long"]) == 0  # made with tiny
    out = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal's width: compare words
    assert "loading tiny-llama in float32" in out  # the manifest's verifier (its directory), not SmolLM2
    assert "head_dim=16" in out  # the config was built for it too (SmolLM2's head_dim is 64)
    assert "every hidden-state file is usable" in out


def test_a_named_verifier_overrides_the_datas_and_its_mismatch_is_named(tiny_data, tmp_path, capsys):
    other = make_tiny(tmp_path / "other", seed=1)
    assert main(["doctor", "--data", str(tiny_data), "--verifier", str(other), "--device", "cpu", "--long"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # wrapped to the terminal's width: compare words
    assert "loading other in float32" in out and "[ERROR] data directory" in out
    assert f"datadirectory{tiny_data}" in out.replace(" ", "")  # a long path may be broken across lines


# ----------------------------------------------------------------------------------------------- RAM
def test_the_ram_is_stated_from_the_config_and_refused_when_short():
    eight_b = resolve("llama-3.1-8b")  # its config only: counted on the meta device, no weights read
    assert ram_line(eight_b, 64 * 10**9) == "loading llama-3.1-8b in float32 on the CPU: about 32 GB of RAM"
    assert ram_line(eight_b, None).endswith("about 32 GB of RAM")  # unknown available RAM: stated, not refused
    with pytest.raises(UserError, match="about 32 GB of RAM, but this machine has 16 GB available"):
        ram_line(eight_b, 16 * 10**9)
    assert ram_line(resolve("tiny"), 10**8).startswith("loading tiny")
    with pytest.raises(UserError, match="this machine has"):
        ram_line(resolve("tiny"), 10**6)


def test_available_ram_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemFree:  1000 kB\nMemAvailable:   2048 kB\n")
    assert available_bytes(meminfo) == 2048 * 1024
    meminfo.write_text("MemTotal:       32000000 kB\n")
    assert available_bytes(meminfo) is None and available_bytes(tmp_path / "absent") is None
