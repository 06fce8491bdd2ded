"""The hand-off run: the YAML ``eagle3kit launch`` writes gives a TrainSession the same run, speculators' trainer
records are read back per TTT step and compared, and the trainer itself runs on a GPU (``pytest -m cuda``)."""

from __future__ import annotations


import pytest
import torch
import yaml

from conftest import TINY_DATA_SEQ as SEQ
from eagle3kit.cli import main
from eagle3kit.errors import UserError
from eagle3kit.train import handoff
from eagle3kit.train.launch import validate_yaml
from eagle3kit.train.session import TrainSession, TrainSettings

STEPS = 3


def launch(tiny_data, out, *extra: str):
    argv = ["launch", "--data", str(tiny_data), "--out", str(out), "--gpus", "1", "--total-seq-len", str(SEQ),
            "--max-steps", str(STEPS), "--epochs", "1", "--warmup-steps", "0", *extra]
    assert main(argv) == 0
    return out / "run.yaml"


def test_the_launch_yaml_gives_the_session_the_same_settings_and_draft(tiny_data, tmp_path, capsys):
    path = launch(tiny_data, tmp_path, "--loss-implementation", "eager", "--hidden-states-dtype", "float32",
                  "--optimizer", "muon", "--lr", "3e-4", "--seed", "7")
    capsys.readouterr()
    train = yaml.safe_load(path.read_text())["train"]
    assert train["loss"]["loss_implementation"] == "eager" and train["data"]["hidden_states_dtype"] == "float32"
    settings = handoff.session_settings(validate_yaml(path))
    expected = TrainSettings(total_seq_len=SEQ, max_steps=STEPS, epochs=1, warmup_steps=0, loss_implementation="eager",
                             hidden_states_dtype="float32", optimizer="muon", lr=3e-4, seed=7, muon_lr=3e-4)
    assert TrainSettings(**settings) == expected
    spec = handoff.session_draft(validate_yaml(path), device="cpu")
    session = TrainSession(tiny_data, progress=False, **{**settings, "optimizer": "adamw"})  # the data's own draft
    assert spec.aux_layer_ids == session.build.aux_layer_ids
    assert spec.draft_vocab_size == session.build.config.draft_vocab_size
    assert spec.attn_implementation == "simple_flex_attention"  # launch's GPU default, what speculators trains


@pytest.mark.parametrize("key, value", [("scheduler_warmup_ratio", 0.1), ("muon_momentum", 0.9), ("epochs", 3)])
def test_a_yaml_the_session_cannot_reproduce_is_refused(tiny_data, tmp_path, capsys, key, value):
    path = launch(tiny_data, tmp_path, "--optimizer", "muon")
    capsys.readouterr()
    handoff.session_settings(validate_yaml(path))  # as written: reproducible
    doc = yaml.safe_load(path.read_text())
    group = {"scheduler_warmup_ratio": "scheduler", "muon_momentum": "optimizer", "epochs": "trainer"}[key]
    doc["train"][group][key] = value
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match=key):
        handoff.session_settings(validate_yaml(path))


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        handoff.last_checkpoint(tmp_path)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")
def test_speculators_trainer_and_the_session_train_the_same_run_on_cuda(tiny_data, tmp_path, capsys):
    from eagle3kit.train.rehearsal import compare
    from eagle3kit.train.rehearsal.run import rehearse

    path = launch(tiny_data, tmp_path, "--loss-implementation", "eager")  # the fused loss needs torch >= 2.12
    run = rehearse(path, tmp_path / "rehearsal", steps=STEPS, progress=False)
    assert run.ok and run.overrides == {"num_workers": 0, "max_steps": STEPS, "epochs": 1}, run.log_tail()
    session = compare.session_for(run, device="cuda")
    session.run(STEPS)
    table = handoff.side_by_side(run.metrics(), session.history_frame(), session.ttt_steps, rel=2e-2, abs_tol=1e-3)
    assert len(table) == STEPS * session.ttt_steps and table["within"].all(), table.to_string()
    assert (run.checkpoint() / "config.json").exists()
