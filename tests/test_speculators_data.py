"""Data that speculators' own pipeline made, wherever eagle3kit takes a data directory (issue 36).

The directory is written by speculators' own ``prepare-data`` (its pre-tokenized path here: rows that already hold
``input_ids`` and ``loss_mask``, made from conversations by eagle3kit's tokenizer; the render path against vLLM is in
``test_mask_agreement.py``), then ``eagle3kit data --out DIR`` fills its hidden states the way speculators'
``generate-offline-data`` would: no eagle3kit manifest. Every command that takes a data directory accepts it with what
must come from the user, or refuses it in one line naming what is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from datasets import load_from_disk
from speculators.cli.prepare_data import prepare_data
from test_refusals import refused

from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.data.directory import MANIFEST, DataDir, DataError
from eagle3kit.data.fill import fill_hidden_states
from eagle3kit.data.supervision import audit_mask
from eagle3kit.data.vocab import build_for_data
from eagle3kit.doctor.checks.run import check_data_dir
from eagle3kit.doctor.checks.data import mask_findings
from eagle3kit.doctor.checks.draft_folder import check_draft_folder
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import save_draft
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_tokenizer, resolve

AUX = [2, 4, 5]  # the tiny verifier's default [2, L//2, L-3], L = 8
VOCAB = 16  # <= the distinct supervised tokens of these conversations


def conversations() -> list[list[dict]]:
    """Single turn, multi-turn with a system prompt: one row per conversation through eagle3kit's tokenizer."""
    out = []
    for i in range(20):
        turns = [{"role": "system", "content": f"You are helper {i}; be brief."}] if i % 2 else []
        for j in range(1 + i % 3):
            turns += [{"role": "user", "content": f"What is {i} times {j}?"},
                      {"role": "assistant", "content": f"{i} times {j} is {i * j}."}]
        out.append(turns)
    return out


def write_rows(path: Path, rows: list[tuple[list[int], list[int]]]) -> Path:
    path.write_text("".join(json.dumps({"input_ids": x, "loss_mask": m}) + "\n" for x, m in rows))
    return path


def prepare(tmp: Path, rows, name: str = "spec") -> Path:
    """speculators' own prepare-data on pre-tokenized rows (its pass-through: no render endpoint)."""
    out = tmp / name
    prepare_data(model=resolve("tiny").path, data=[str(write_rows(tmp / f"{name}.jsonl", rows))], output=str(out),
                 seq_length=512, num_preprocessing_workers=1, skip_token_freq=False)
    return out


@pytest.fixture(scope="module")
def tiny_rows(tiny_verifier) -> list[tuple[list[int], list[int]]]:
    tok = load_tokenizer(tiny_verifier)
    return [(t.input_ids, t.loss_mask) for c in conversations() for t in conv.rows(tok, c, 512)]


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory, tiny_rows) -> Path:
    """A directory speculators' prepare-data wrote, its hidden states filled by `eagle3kit data` (no manifest)."""
    out = prepare(tmp_path_factory.mktemp("speculators"), tiny_rows)
    assert main(["data", "--out", str(out), "--verifier", "tiny", "--draft-vocab-size", str(VOCAB)]) == 0
    return out


@pytest.fixture(scope="module")
def exported(spec_dir, tmp_path_factory) -> Path:
    """A draft trained two steps on it through the CLI (the verifier and aux ids passed) and exported."""
    out = tmp_path_factory.mktemp("draft") / "draft"
    assert main(["train", "--data", str(spec_dir), "--verifier", "tiny", "--aux-layer-ids", *map(str, AUX),
                 "--steps", "2", "--total-seq-len", "512", "--export", str(out)]) == 0
    return out


def test_what_the_files_give_is_read_and_the_rest_is_told(spec_dir, tiny_verifier):
    data = DataDir(spec_dir)
    assert not data.has_manifest and not (spec_dir / MANIFEST).exists() and data.has_arrow
    assert (data.n_samples, data.complete) == (load_from_disk(str(spec_dir)).num_rows, True)
    assert (data.hidden_size, data.n_states, data.dtype, data.draft_vocab_sizes) == (64, 4, "float32", [VOCAB])
    assert (data.verifier_ref, data.aux_layer_ids, data.seq_length) == (None, None, None)
    with pytest.raises(DataError, match="pass --verifier"):
        data.require_verifier()
    with pytest.raises(DataError, match="pass --aux-layer-ids with the 3 ids"):
        data.require_aux_layer_ids()
    told = DataDir.open(spec_dir, "tiny", AUX)
    assert (told.require_verifier(), told.require_aux_layer_ids()) == ("tiny", AUX)
    with pytest.raises(DataError, match="stores 4 hidden states per token"):
        DataDir.open(spec_dir, aux_layer_ids=[1, 2])
    with pytest.raises(DataError, match="576"):  # SmolLM2's hidden size, not the files' 64
        DataDir.open(spec_dir, "smollm2")


def test_every_command_refuses_in_one_line_what_it_cannot_infer(spec_dir, exported, tmp_path, capsys):
    d = str(spec_dir)
    cases = {("data", "--out", d): "pass --verifier",
             ("data", "--out", d, "--verifier", "smollm2"): "576",  # another model's hidden size than its files'
             ("train", "--data", d, "--steps", "1"): "pass --verifier",
             ("train", "--data", d, "--verifier", "tiny", "--steps", "1"): "pass --aux-layer-ids",
             ("train", "--data", d, "--verifier", "tiny", "--aux-layer-ids", "1", "2"): "stores 4 hidden states",
             ("launch", "--data", d, "--out", str(tmp_path / "l")): "pass --verifier",
             ("launch", "--data", d, "--verifier", "tiny", "--out", str(tmp_path / "l")): "pass --aux-layer-ids",
             ("doctor", "--data", d): "pass --verifier",
             ("evaluate", "--draft", str(exported), "--data", d, "--max-prompt-tokens", "4"): "--max-prompt-tokens",
             ("vllm-check", "--draft", str(exported), "--data", d, "--max-prompt-tokens", "4"): "--max-prompt-tokens",
             ("overfit", "--verifier", "tiny", "--source", d, "--out", str(tmp_path / "o")): "a data directory?"}
    for argv, words in cases.items():
        assert words in refused(capsys, list(argv)), argv
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_notebook_05s_data_dir_without_a_draft_names_the_verifier(spec_dir):
    """Notebook 05 builds `TrainSession(DataDir(data_dir), config_01 or None)`: without notebook 01's draft the
    directory cannot say its verifier; with a spec naming it, its aux layers are still asked for."""
    with pytest.raises(DataError, match="the verifier"):
        TrainSession(DataDir(spec_dir), None)
    with pytest.raises(DataError, match="aux_layer_ids"):
        TrainSession(DataDir(spec_dir), build_config(verifier="tiny", draft_vocab_size=VOCAB).spec)


def test_train_launch_evaluate_and_doctor_on_it(spec_dir, exported, tmp_path, capsys):
    assert (exported / "config.json").exists()
    assert main(["launch", "--data", str(spec_dir), "--verifier", "tiny", "--aux-layer-ids", *map(str, AUX),
                 "--out", str(tmp_path / "launch"), "--gpus", "1"]) == 0
    run = yaml.safe_load((tmp_path / "launch" / "run.yaml").read_text())
    assert run["train"]["draft"]["target_layer_ids"] == AUX
    assert run["train"]["data"]["data_path"] == str(spec_dir.resolve())
    capsys.readouterr()
    assert main(["evaluate", "--draft", str(exported), "--data", str(spec_dir), "--n-prompts", "2",
                 "--max-new-tokens", "4", "--no-decode"]) == 0
    assert "2 prompts" in capsys.readouterr().out  # its validation rows' prompts
    found = check_data_dir(spec_dir, "tiny")
    assert not [f for f in found if f.severity != "info"], found
    assert any(f.check == "loss_mask" and "agrees with" in f.what for f in found)
    assert any(f.check == "aux_layers" and f"are layers {AUX}" in f.what for f in found)
    folder = check_draft_folder(exported, data_dir=spec_dir, measure=False)
    assert not [f for f in folder if f.severity == "error"], folder


@pytest.mark.catalogue("aux-ids-draft-vs-data")
def test_a_draft_on_other_layers_than_the_data_is_named_by_measurement(spec_dir, tmp_path):
    """The directory does not say its layers: the doctor measures them and names a draft built for others."""
    build = build_config(verifier="tiny", aux_layer_ids=[1, 3, 5], draft_vocab_size=VOCAB, device="cpu")
    folder = save_draft(build_for_data(build, spec_dir), tmp_path / "other")
    found = check_draft_folder(folder, data_dir=spec_dir, measure=False)
    assert any(f.check == "data" and f.severity == "error" and "measured" in f.what for f in found), found


def _rewrite(rows, how) -> list[tuple[list[int], list[int]]]:
    return [(x, how(x, m)) for x, m in rows]


def test_the_mask_is_checked_against_the_template_where_rows_allow_it(tiny_rows, tmp_path, tiny_verifier):
    """Without the conversations each supervised run is checked against the template's markers: silent on the
    healthy rows (above), loud on rows shifted by one, over the user turns, or without their end-of-turn token."""
    eos = load_tokenizer(tiny_verifier).eos_token_id
    broken = {"shifted": lambda x, m: [0, *m[:-1]],
              "outside": lambda x, m: [1] * len(m),
              "missed": lambda x, m: [b and int(t != eos) for t, b in zip(x, m, strict=True)]}
    for name, how in broken.items():
        found = mask_findings(audit_mask(prepare(tmp_path, _rewrite(tiny_rows, how), name), "tiny"))
        assert any(f.severity == "error" and f.check == "loss_mask" for f in found), (name, found)
        word = {"shifted": "shifted by one", "outside": "outside the assistant", "missed": "end-of-turn"}[name]
        assert any(word in f.what for f in found), (name, found)


def test_fill_refuses_what_prepare_data_did_not_write(spec_dir, tmp_path):
    """`eagle3kit data --out DIR` fills speculators' prepared dataset, and nothing else (never an interrupted
    eagle3kit build, which has written its held-out file first)."""
    with pytest.raises(DataError, match="no dataset `speculators prepare-data` wrote"):
        fill_hidden_states("tiny", tmp_path)
    (tmp_path / "ours").mkdir()
    for f in ("state.json", "dataset_info.json", "data-00000-of-00001.arrow"):
        (tmp_path / "ours" / f).write_bytes((spec_dir / f).read_bytes())
    (tmp_path / "ours" / DataDir.HELD_OUT).write_text("")
    with pytest.raises(DataError, match="no dataset `speculators prepare-data` wrote"):
        fill_hidden_states("tiny", tmp_path / "ours")


def test_a_prepared_dataset_without_hidden_states_gets_the_command_that_fills_it(tiny_rows, tmp_path):
    out = prepare(tmp_path, tiny_rows[:3])
    found = check_data_dir(out, "tiny")
    assert len(found) == 1 and found[0].severity == "error" and "has no hidden states" in found[0].what, found
    assert f"eagle3kit data --out {out} --verifier tiny" in found[0].fix
