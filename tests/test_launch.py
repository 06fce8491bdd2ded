"""Scale-out through speculators' own trainer: YAML validated by TrainConfig, torchrun command, CPU dry run."""

from __future__ import annotations

import json

import pytest
import yaml

from eagle3kit.cli import main
from eagle3kit.draft.config import build_config
from eagle3kit.errors import UserError
from eagle3kit.evaluate import recipes
from eagle3kit.train import launch
from eagle3kit.train.loop import optimizer_args
from eagle3kit.train.session import TrainSettings

from conftest import TINY_DATA_SEQ as SEQ
from conftest import TINY_DATA_VOCAB as VOCAB


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", draft_vocab_size=VOCAB, device="cpu")


def test_yaml_is_speculators_train_config(build, tiny_data, tmp_path):
    settings = TrainSettings(total_seq_len=SEQ, lr=3e-4, seed=7, max_steps=40).resolved("cpu")
    plan = launch.write_plan(build, settings, tiny_data, tmp_path, n_gpus=4, fsdp=True)
    cfg = plan.config
    assert type(cfg).__name__ == "TrainConfig"
    assert (cfg.optimizer.optimizer, cfg.optimizer.lr, cfg.seed) == ("adamw", 3e-4, 7)
    assert (cfg.data.total_seq_len, cfg.trainer.max_steps, cfg.loss.ttt_steps) == (SEQ, 40, 3)
    assert cfg.draft.target_layer_ids == build.aux_layer_ids and cfg.draft.draft_vocab_size == VOCAB
    assert cfg.verifier.verifier_name_or_path == build.verifier.path
    assert yaml.safe_load(plan.yaml)["train"]["draft"]["norm_before_fc"] is True
    assert plan.command.startswith("torchrun --standalone --nproc_per_node=4 -m speculators.train --config ")
    assert plan.command.endswith("--fsdp-shard")
    head, lines = plan.head(12).splitlines(), plan.yaml.splitlines()  # a notebook's view: a head, not a wall
    assert head[:12] == lines[:12] and head[12] == f"… {len(lines) - 12} more lines in {plan.yaml_path}"
    assert plan.head(len(lines)) == plan.yaml.rstrip("\n")
    table = launch.explain_plan(plan)
    differs = set(table.loc[table["differs"] == "yes", "field"])
    assert {"optimizer", "total_seq_len", "seed"} <= differs
    assert not {"norm_before_fc", "norm_output", "norm_before_residual", "ttt_steps"} & differs
    why = table.set_index("field").loc["optimizer", "why"]  # AdamW, not speculators' Muon: the lab's row says why
    muon = next(r for r in recipes.read_lab().rows if r.name == "muon")
    assert "`muon`" in why and f"{muon.delta['held-out'].mean:+.3f}" in why


def test_yaml_carries_the_muon_optimizer(build, tiny_data, tmp_path):
    """optimizer="muon": speculators' TrainConfig resolves the very Muon + AdamW settings the session steps."""
    settings = TrainSettings(total_seq_len=SEQ, lr=3e-4, optimizer="muon", muon_lr=0.02).resolved("cpu")
    plan = launch.write_plan(build, settings, tiny_data, tmp_path)
    assert plan.config.optimizer.model_dump() == optimizer_args(settings).model_dump()
    assert (plan.config.optimizer.optimizer, plan.config.optimizer.muon_lr) == ("muon", 0.02)
    table = launch.explain_plan(plan).set_index("field")
    assert table.loc["optimizer", "differs"] == "" and table.loc["muon_lr", "differs"] == "yes"
    unset = launch.write_plan(build, TrainSettings(total_seq_len=SEQ, lr=3e-4, optimizer="muon"), tiny_data,
                              tmp_path / "unset")
    assert unset.config.optimizer.muon_lr == 3e-4  # unset: the lr, as speculators resolves it


def test_flex_length_trap_is_refused(build, tiny_data, tmp_path):
    settings = TrainSettings(total_seq_len=300).resolved("cpu")
    with pytest.raises(UserError, match="not a multiple of 128.*`--total-seq-len 384`.*`--attn sdpa`"):
        launch.write_plan(build, settings, tiny_data, tmp_path)
    plan = launch.write_plan(build, settings, tiny_data, tmp_path, attn_implementation="sdpa")
    assert plan.config.draft.draft_attn_impl == "sdpa"


def test_unknown_yaml_key_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  verifier:\n    verifier_name_or_path: x\n  optimiser: adamw\n")
    with pytest.raises(UserError, match="unrecognised keys"):
        launch.validate_yaml(path)


def test_dry_run_config_equals_eagle3kit_draft(build, tiny_data, tmp_path):
    """`speculators train --config run.yaml --dry-run` on the CPU writes the config.json eagle3kit built (a YAML
    naming the cluster's paths is dry-run with this machine's)."""
    settings = TrainSettings(total_seq_len=SEQ).resolved("cpu")
    plan = launch.write_plan(build, settings, tiny_data, tmp_path, n_gpus=2, cluster_data="/cluster/data",
                             cluster_save="/cluster/run", verifier="/cluster/verifier")  # the dry run uses ours
    assert set(plan.local) == {"data_path", "verifier_name_or_path", "save_path", "log_dir"}
    table = launch.round_trip(build, plan, tmp_path / "dry")
    assert len(table) > 30
    assert table["equal"].all(), table[~table["equal"]].to_string()
    fields = set(table["field"])
    assert {"draft_vocab_size", "eagle_aux_hidden_state_layer_ids", "norm_before_fc",
            "transformer_layer_config.hidden_size"} <= fields


def test_round_trip_notices_a_different_draft(build, tiny_data, tmp_path):
    settings = TrainSettings(total_seq_len=SEQ).resolved("cpu")
    plan = launch.write_plan(build, settings, tiny_data, tmp_path, n_gpus=1)
    saved = launch.dry_run(plan, tmp_path / "dry")

    theirs = json.loads((saved / "config.json").read_text())
    other = build_config(verifier="tiny", draft_vocab_size=VOCAB, device="cpu", norm_output=False)
    table = launch.compare_configs(launch.eagle3kit_config_json(other, tiny_data), theirs)
    assert list(table.loc[~table["equal"], "field"]) == ["norm_output"]


def test_cli_launch_prints_yaml_table_and_command(tiny_data, tmp_path, capsys):
    assert main(["launch", "--data", str(tiny_data), "--out", str(tmp_path), "--total-seq-len", str(SEQ),
                 "--gpus", "2", "--fsdp"]) == 0
    out = capsys.readouterr().out
    assert "draft_vocab_size: 512" in out and "speculators default" in out
    assert "--nproc_per_node=2 -m speculators.train --config" in out and "--fsdp-shard" in out
    assert (tmp_path / "run.yaml").exists()


def test_cli_launch_max_steps_writes_the_epochs_that_hold_them_and_says_which_bound_ends_the_run(tiny_data, tmp_path,
                                                                                                  capsys):
    """--max-steps alone: the YAML's epochs are the fewest that hold those steps on the ranks, so max_steps (the LR
    schedule's horizon) ends the run; --epochs given too is kept, and the line says when the epochs end it first."""
    argv = ["launch", "--data", str(tiny_data), "--total-seq-len", str(SEQ), "--gpus", "2", "--max-steps", "40"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    packs = int(out.split(" packs of ")[0].rsplit("\n", 1)[-1])
    epochs = yaml.safe_load((tmp_path / "a" / "run.yaml").read_text())["train"]["trainer"]["epochs"]
    per_rank = -(-packs // 2)
    assert epochs == -(-40 // per_rank) and (epochs - 1) * per_rank < 40 <= epochs * per_rank
    assert "max_steps 40 ends the run on 2 ranks" in out
    assert main([*argv, "--epochs", "1", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "b" / "run.yaml").read_text())["train"]["trainer"]["epochs"] == 1
    assert f"the 1 epochs end the run first, at about {per_rank} of its 40 steps" in out


def test_cluster_run_gets_speculators_length_cluster_paths_and_a_multi_node_command(build, tiny_data, tmp_path):
    """cluster_settings: speculators' own total_seq_len unless given; the YAML names the cluster's paths, the plan
    keeps this machine's; several nodes rendezvous through c10d in a command torchrun itself parses."""
    import shlex

    from speculators.train.config import TrainConfig
    from torch.distributed.run import get_args_parser

    assert launch.cluster_settings().total_seq_len == TrainConfig().flatten()["total_seq_len"]
    assert launch.cluster_settings(total_seq_len=SEQ).total_seq_len == SEQ
    plan = launch.write_plan(build, launch.cluster_settings(), tiny_data, tmp_path, n_gpus=4, nodes=2,
                             rdzv_endpoint="node0:29500", cluster_data="/shared/data", cluster_save="/shared/run")
    written = yaml.safe_load(plan.yaml)["train"]
    assert written["data"]["data_path"] == "/shared/data" and plan.local_data_path == str(tiny_data.resolve())
    assert plan.config.trainer.save_path == "/shared/run" and plan.config.logging.log_dir == "/shared/run/logs"
    table = launch.explain_plan(plan).set_index("field")
    assert table.loc["total_seq_len", "differs"] == "" and "--cluster-data" in table.loc["data_path", "why"]
    assert "0 unless --seed" in table.loc["seed", "why"]
    args = get_args_parser().parse_args(shlex.split(plan.command)[1:])
    assert (args.nnodes, args.nproc_per_node, args.rdzv_backend, args.rdzv_endpoint, args.standalone) == (
        "2", "4", "c10d", "node0:29500", False)
    here = launch.write_plan(build, launch.cluster_settings(), tiny_data, tmp_path / "here", n_gpus=4)
    assert here.local == {} and here.config.data.data_path == str(tiny_data.resolve())
    assert "this machine's data directory" in launch.explain_plan(here).set_index("field").loc["data_path", "why"]
    assert get_args_parser().parse_args(shlex.split(here.command)[1:]).standalone
    for nodes, endpoint, match in ((2, None, "needs --rdzv-endpoint"), (1, "node0:29500", "one node"),
                                   (2, "node0", "HOST:PORT")):
        with pytest.raises(UserError, match=match):
            launch.write_plan(build, launch.cluster_settings(), tiny_data, tmp_path / "x", nodes=nodes,
                              rdzv_endpoint=endpoint)


def test_cli_launch_for_the_cluster_and_rehearse_told_the_local_data(tiny_data, tmp_path, capsys):
    from eagle3kit.train.rehearsal.run import local_data

    argv = ["launch", "--data", str(tiny_data), "--out", str(tmp_path), "--gpus", "2", "--cluster-data", "/shared/d"]
    assert main([*argv, "--nodes", "2"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main([*argv, "--nodes", "2", "--rdzv-endpoint", "node0:29500"]) == 0
    out = capsys.readouterr().out
    assert "2 nodes x 2 GPUs" in out and "--nnodes=2" in out and f"--data {tiny_data}" in out
    assert main(["rehearse", "--config", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert "/shared/d" in capsys.readouterr().err and "--data DIR" in str(
        pytest.raises(UserError, local_data, tmp_path / "run.yaml", None).value)
    assert local_data(tmp_path / "run.yaml", tiny_data) == {"data_path": str(tiny_data.resolve())}


def test_the_plan_says_which_bound_ends_the_run_and_when_epochs_would_cut_the_schedule_short():
    """speculators stops at max_steps or after epochs, whichever comes first: a 1306-step run ends a one-rank
    run after 13.7 epochs of its 95 packs, while on 8 ranks its 20 epochs would end it at 240 steps."""
    from eagle3kit.train.session import TrainSettings

    demo = TrainSettings(max_steps=1306)
    assert demo.ending(95) == ("max_steps 1306 ends the run on 1 rank, after 13.7 epochs of this data "
                               "(`epochs: 20` is only an upper bound)")
    assert demo.ending(95, 8).startswith("on 8 ranks the 20 epochs end the run first, at about 240 of its 1306")
    assert "set max_steps to 240 or epochs to 109" in demo.ending(95, 8)
    assert TrainSettings().ending(95, 8) == "20 epochs end the run: 240 steps on 8 ranks"
    fitted = demo.for_ranks(95, 8)  # notebook 05's YAML for 8 GPUs: the packs the session sees, max_steps ends it
    assert (fitted.max_steps, fitted.epochs) == (164, 14)  # 1306 packs / 8 ranks; 12 steps an epoch on 8 ranks
    assert fitted.ending(95, 8).startswith("max_steps 164 ends the run on 8 ranks, after 13.7 epochs")
    assert (demo.for_ranks(95, 1).max_steps, demo.for_ranks(95, 1).epochs) == (1306, 14)
    assert TrainSettings().for_ranks(95, 8) == TrainSettings()  # no max_steps: the epochs as given
