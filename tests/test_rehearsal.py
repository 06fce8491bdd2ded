"""speculators' own trainer, run for real on this CPU on the YAML ``eagle3kit launch`` wrote: one process and two
ranks under torchrun (DDP and FSDP2), beside TrainSession; its checkpoint through the doctor; a preempted rank and the
rerun that resumes from speculators' checkpoint; and the failures only a running trainer shows (docs/failures.md,
"The trainer, rehearsed")."""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from conftest import TINY_DATA_SEQ as SEQ
from eagle3kit.cli import main
from eagle3kit.doctor.checks import rehearsal as rehearsal_checks
from eagle3kit.train.rehearsal import compare
from eagle3kit.train.rehearsal.resume import preempt
from eagle3kit.train.rehearsal.run import flags_for, rehearse, resolved
from eagle3kit.train.session import TrainSession

STEPS = 3


def checks(findings) -> set[str]:
    return {f.check for f in findings}


@pytest.fixture(scope="module")
def run_yaml(tiny_data, tmp_path_factory):
    """The YAML `eagle3kit launch` writes for the tiny data, as a CPU rehearsal trains it (sdpa, eager, float32)."""
    out = tmp_path_factory.mktemp("launch")
    argv = ["launch", "--data", tiny_data, "--out", out, "--gpus", "2", "--total-seq-len", SEQ, "--max-steps", 8,
            "--epochs", 1, "--warmup-steps", 0, "--attn", "sdpa", "--loss-implementation", "eager",
            "--hidden-states-dtype", "float32"]
    assert main(argv) == 0
    return out / "run.yaml"


@pytest.fixture(scope="module")
def one_process(run_yaml, tmp_path_factory):
    return rehearse(run_yaml, tmp_path_factory.mktemp("one"), steps=STEPS, progress=False)


def test_one_process_trains_like_the_session_step_for_step(one_process, tiny_data, tmp_path, capsys):
    run = one_process
    assert run.ok, run.log_tail()
    assert run.command[:3][1:] == ["-m", "eagle3kit.train.rehearsal.entry"]  # no torchrun for one process
    names = {p.name for p in run.save_path.iterdir()}
    assert {"0", "checkpoint_best", "epoch0_end", "run.yaml"} <= names
    assert list(run.metrics()["step"]) == [1, 2, 3] and rehearsal_checks.after(run) == []
    session = compare.session_for(run)
    session.run(STEPS)
    table = compare.side_by_side(run, session)
    summary = compare.summary(table)
    print(f"1 process: {summary}")
    assert len(table) == STEPS * 3 and summary["within"]
    # the comparison can fail: the same run with another seed is another run
    moved = TrainSession(tiny_data, session.build, progress=False, **{**dataclasses.asdict(session.settings),
                                                                      "seed": 1})
    moved.run(STEPS)
    assert not compare.side_by_side(run, moved)["within"].all()
    # the session's bf16 export is speculators' checkpoint, tensor for tensor
    exported = session.export(tmp_path / "session", dtype="bfloat16")
    same = compare.weights(exported, run.checkpoint())
    assert same.equal and same.tensors >= 10 and same.dtype == "bfloat16", same


def test_the_checkpoint_is_a_sound_draft_to_the_doctor(one_process, tiny_data, capsys):
    """`eagle3kit doctor --draft` on speculators' checkpoint_best: no error (tiny's head_dim 16 is a serving
    warning), and measured as trained."""
    code = main(["doctor", "--draft", one_process.save_path / "checkpoint_best", "--data", tiny_data, "--long"])
    out = capsys.readouterr().out
    assert code == 0 and "[ERROR]" not in out and "the weights are trained" in out, out


def test_two_ranks_ddp_and_fsdp_train_the_same_run_as_the_two_rank_session(preempted, run_yaml, tmp_path, capsys):
    """torchrun with 2 ranks (gloo), without and with --fsdp-shard (the FSDP run: the preemption's uninterrupted
    one, 5 steps with a checkpoint after step 2; the DDP run: the same flags): equal losses, and the session with
    each rank's sampler equals both; the one-rank session does not (each step averages two batches)."""
    fsdp = preempted.uninterrupted
    steps = len(fsdp.metrics())
    ddp = rehearse(run_yaml, tmp_path / "ddp", ranks=2, steps=steps, progress=False,
                   extra={"checkpoint_freq": fsdp.overrides["checkpoint_freq"]})
    assert ddp.ok and fsdp.ok and steps == 5, (ddp.log_tail(), fsdp.log_tail())
    assert "--nproc_per_node=2" in ddp.command and "--fsdp-shard" in fsdp.command and "--fsdp-shard" not in ddp.command
    assert ddp.overrides == fsdp.overrides  # the same run but for --fsdp-shard
    ttt = 3
    assert compare.max_loss_diff(ddp.metrics(), fsdp.metrics(), ttt) <= compare.ABS + compare.REL * 0.1
    session = compare.session_for(ddp)
    session.run(steps)
    table = compare.side_by_side(ddp, session)
    print(f"2 ranks: {compare.summary(table)}; fsdp vs ddp "
          f"{compare.max_loss_diff(ddp.metrics(), fsdp.metrics(), ttt)}")
    assert compare.summary(table)["within"] and compare.summary(compare.side_by_side(fsdp, session))["within"]
    one_rank = TrainSession(session.data, session.build, progress=False,
                            **{**dataclasses.asdict(session.settings), "ranks": 1})
    one_rank.run(steps)
    assert not compare.side_by_side(ddp, one_rank)["within"].all()


def test_the_cli_prints_both_runs_and_draws_them(run_yaml, tmp_path, capsys):
    out = tmp_path / "cli"
    code = main(["rehearse", "--config", run_yaml, "--out", out, "--steps", 2, "--compare", "--plot",
                 tmp_path / "loss.png"])
    text = capsys.readouterr().out
    assert code == 0 and "eagle3kit.train.rehearsal.entry" in text and "within" in text, text
    assert (tmp_path / "loss.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def preempted(run_yaml, tmp_path_factory):
    """FSDP over 2 ranks, 5 steps; the same run with a checkpoint after step 2 and rank 1 SIGKILLed after step 3,
    then rerun into the same save path."""
    return preempt(run_yaml, tmp_path_factory.mktemp("preempt"), ranks=2, fsdp=True, steps=5, checkpoint_step=2,
                   progress=False)


def test_a_killed_rank_is_named_and_the_rerun_resumes_from_the_checkpoint(preempted):
    p = preempted
    print(p.summary())
    assert p.killed.returncode != 0 and list(p.killed.metrics()['step']) == [1, 2, 3]
    assert checks(rehearsal_checks.after(p.killed)) == {"rank_killed"}
    assert p.resumed.ok and sorted(p.resumed.metrics()["step"]) == [3, 4, 5]
    assert compare.max_loss_diff(p.killed.metrics(), p.uninterrupted.metrics(), 3) == 0.0  # the same run until killed


@pytest.mark.catalogue("trainer-resume-bf16")
def test_the_rerun_is_not_the_uninterrupted_run_by_exactly_the_checkpoints_rounding(preempted, tmp_path):
    """speculators stores weights and optimizer state in bf16: the resumed float32 run differs from the uninterrupted
    one, and a session rounded the same way at the checkpoint's step replays it exactly."""
    p = preempted
    assert p.max_loss_diff > 10 * compare.ABS and not p.weights.equal  # not the uninterrupted run...
    assert p.weights.max_abs_diff < 0.05 and p.explained_diff <= compare.ABS  # ...by the rounding alone
    config = resolved(p.resumed.yaml, {**flags_for(p.resumed.yaml, 5, 0), "fsdp_shard": True})
    found = rehearsal_checks.before(config, 2, p.at_kill)
    assert "resume_bf16" in checks(found)
    fresh = tmp_path / "fresh"
    assert "resume_bf16" not in checks(rehearsal_checks.before(config, 2, fresh))


@pytest.mark.catalogue("trainer-resume-world-size")
def test_resuming_a_mid_epoch_checkpoint_with_another_world_size_is_named(preempted, tmp_path):
    mid = preempted.at_kill  # the killed run's save path: a mid-epoch checkpoint of a 2-rank run
    config = resolved(preempted.killed.yaml, {**flags_for(preempted.killed.yaml, 5, 0), "fsdp_shard": True})
    assert "resume_world_size" in checks(rehearsal_checks.before(config, 1, mid))
    assert "resume_world_size" not in checks(rehearsal_checks.before(config, 2, mid))


@pytest.mark.catalogue("trainer-save-path-finished")
def test_a_rerun_into_a_finished_run_trains_nothing_and_is_named(preempted, run_yaml, tmp_path):
    """The uninterrupted 2-rank run took all 5 batches of its epoch: a rerun there trains 0 steps and exits 0."""
    save = shutil.copytree(preempted.uninterrupted.out, tmp_path / "again", symlinks=True)
    config = resolved(run_yaml, {**flags_for(run_yaml, 5, 0), "fsdp_shard": True})
    assert checks(rehearsal_checks.before(config, 2, save / "checkpoints")) == {"save_path_finished"}
    again = rehearse(run_yaml, save, ranks=2, fsdp=True, steps=5, resume=True, progress=False)
    assert again.ok and again.metrics().empty and checks(rehearsal_checks.after(again)) == {"no_steps"}
    assert rehearsal_checks.before(config, 2, tmp_path / "empty") == []  # a fresh save path: nothing to say


@pytest.mark.catalogue("trainer-epoch-cut-by-max-steps")
def test_an_epoch_cut_by_max_steps_is_saved_as_finished_and_named(one_process, run_yaml):
    """3 steps of a 10-batch epoch: speculators saves it as end-of-epoch, so a rerun never trains batches 4-10."""
    import json

    state = json.loads((one_process.save_path / "0" / "training_state.json").read_text())
    assert state == {"epoch": 0, "local_step": 0, "global_step": STEPS}
    config = resolved(run_yaml, flags_for(run_yaml, STEPS, 0))
    found = rehearsal_checks.before(config, 1, one_process.save_path)
    assert checks(found) == {"epoch_cut_by_max_steps"} and "after 3 of its 10 batches" in found[0].what


@pytest.mark.catalogue("trainer-checkpoint-incomplete")
def test_an_incomplete_newest_checkpoint_is_named_before_the_rerun(one_process, run_yaml, tmp_path):
    save = shutil.copytree(one_process.save_path, tmp_path / "checkpoints", symlinks=True)
    config = resolved(run_yaml, {**flags_for(run_yaml, STEPS, 0), "epochs": 3})
    assert "checkpoint_incomplete" not in checks(rehearsal_checks.before(config, 1, save))
    (save / "1").mkdir()  # a save that died before writing its files (or a stray folder)
    assert "checkpoint_incomplete" in checks(rehearsal_checks.before(config, 1, save))


@pytest.mark.catalogue("trainer-resume-changed-run")
def test_resuming_a_save_path_with_another_optimizer_or_fsdp_setting_is_an_error(one_process, run_yaml):
    base = flags_for(run_yaml, STEPS, 0)
    same = checks(rehearsal_checks.before(resolved(run_yaml, base), 1, one_process.save_path))
    assert not same & {"resume_changed_run", "save_path_other_run"}
    for change in ({"fsdp_shard": True}, {"optimizer": "muon"}):
        found = rehearsal_checks.before(resolved(run_yaml, {**base, **change}), 2, one_process.save_path)
        assert "resume_changed_run" in checks(found), (change, found)
    lr = rehearsal_checks.before(resolved(run_yaml, {**base, "lr": 2e-3}), 1, one_process.save_path)
    assert "save_path_other_run" in checks(lr) and "resume_changed_run" not in checks(lr)


@pytest.mark.catalogue("trainer-hidden-state-count")
def test_data_with_another_number_of_hidden_states_than_the_draft_reads_is_named(run_yaml):
    base = flags_for(run_yaml, STEPS, 0)
    assert "hidden_state_count" not in checks(rehearsal_checks.before(resolved(run_yaml, base), 1))
    found = rehearsal_checks.before(resolved(run_yaml, {**base, "target_layer_ids": [2, 4]}), 1)
    assert "hidden_state_count" in checks(found)


@pytest.mark.catalogue("trainer-validation-empty")
def test_a_validation_split_smaller_than_the_ranks_is_named(run_yaml):
    base = flags_for(run_yaml, STEPS, 0)
    assert "validation_empty" not in checks(rehearsal_checks.before(resolved(run_yaml, base), 2))
    found = rehearsal_checks.before(resolved(run_yaml, {**base, "train_data_ratio": 0.95}), 2)
    assert "validation_empty" in checks(found)


@pytest.mark.catalogue("trainer-nan-hidden-states")
def test_a_nan_in_a_stored_hidden_state_trains_on_with_nan_and_is_named(run_yaml, tiny_data, tmp_path):
    from safetensors.torch import load_file, save_file

    from eagle3kit.train.launch import validate_yaml

    holed = shutil.copytree(tiny_data, tmp_path / "data")
    path = holed / "hidden_states" / "hs_3.safetensors"
    tensors = load_file(str(path))
    tensors["hidden_states"].view(-1)[7] = float("nan")
    save_file(tensors, str(path))
    moved = tmp_path / "run.yaml"
    moved.write_text(run_yaml.read_text().replace(str(validate_yaml(run_yaml).data.data_path), str(holed)))
    run = rehearse(moved, tmp_path / "run", steps=8, progress=False)
    found = rehearsal_checks.after(run)
    assert run.ok and checks(found) == {"loss_not_finite"}, run.log_tail()  # exit 0: speculators trains on
    assert 1 < int(found[0].what.split("step ")[1].split()[0]) <= 8


@pytest.mark.catalogue("trainer-max-steps-epochs")
def test_max_steps_with_several_epochs_takes_more_steps_and_is_named(run_yaml, one_process, tmp_path):
    extra = {"epochs": 3}
    config = resolved(run_yaml, flags_for(run_yaml, 2, 0, extra))
    assert "max_steps_epochs" in checks(rehearsal_checks.before(config, 1))
    run = rehearse(run_yaml, tmp_path / "epochs", steps=2, extra=extra, progress=False)
    assert run.ok and list(run.metrics()["step"]) == [1, 2, 3, 4]  # one more step in each of epochs 1 and 2
    assert checks(rehearsal_checks.after(run)) == {"max_steps_epochs"}
    assert "max_steps_epochs" not in checks(rehearsal_checks.before(resolved(run_yaml, flags_for(run_yaml, 2, 0)), 1))


@pytest.mark.catalogue("trainer-data-path-missing")
def test_a_data_path_the_trainer_cannot_see_passes_the_dry_run_and_is_named_by_the_rehearsal(run_yaml, tmp_path):
    from eagle3kit.train.launch import LaunchPlan, dry_run, validate_yaml

    moved = tmp_path / "run.yaml"
    moved.write_text(run_yaml.read_text().replace(str(validate_yaml(run_yaml).data.data_path),
                                                  str(tmp_path / "not-here")))
    dry_run(LaunchPlan(validate_yaml(moved), moved, 1, False), tmp_path / "dry")  # speculators' dry run: no error
    run = rehearse(moved, tmp_path / "run", steps=1, progress=False)
    found = rehearsal_checks.after(run)
    assert not run.ok and checks(found) == {"path_missing"} and "not-here" in found[0].what


@pytest.mark.catalogue("trainer-hidden-states-missing")
def test_a_missing_hidden_state_file_fails_mid_epoch_and_is_named(run_yaml, tiny_data, tmp_path):
    from eagle3kit.train.launch import validate_yaml

    holed = shutil.copytree(tiny_data, tmp_path / "data")
    (holed / "hidden_states" / "hs_3.safetensors").unlink()
    moved = tmp_path / "run.yaml"
    moved.write_text(run_yaml.read_text().replace(str(validate_yaml(run_yaml).data.data_path), str(holed)))
    run = rehearse(moved, tmp_path / "run", steps=8, progress=False)
    found = rehearsal_checks.after(run)
    assert not run.ok and checks(found) == {"hidden_states_missing"} and "sample 3" in found[0].what
    assert 0 < len(run.metrics()) < 8  # the trainer started, then failed at the batch that needs sample 3


def test_the_rehearsals_checkpoint_is_compared_as_built_with_no_dry_run(one_process, run_yaml, tmp_path):
    """Notebook 05 compares the config.json of the rehearsal's checkpoint with eagle3kit's draft (no second build by
    a dry run); a field eagle3kit sets otherwise shows as unequal."""
    import json

    from eagle3kit.train.launch import LaunchPlan, compare_configs, eagle3kit_config_json, round_trip, validate_yaml

    session = compare.session_for(one_process)
    plan = LaunchPlan(validate_yaml(run_yaml), run_yaml, 1, False)
    table = round_trip(session.build, plan, tmp_path / "dry", model=session.model, saved=one_process.checkpoint())
    assert len(table) > 30 and table["equal"].all(), table[~table["equal"]].to_string()
    assert not (tmp_path / "dry").exists()  # read from the checkpoint, not dry-run
    ours = eagle3kit_config_json(session.build, plan.local_data_path)  # bf16, as the trainer saves
    theirs = json.loads((one_process.checkpoint() / "config.json").read_text())
    theirs["norm_output"] = not theirs["norm_output"]
    assert list(compare_configs(ours, theirs).query("not equal")["field"]) == ["norm_output"]
