"""`eagle3kit launch` warns, before writing anything, when the planned run will not fit a GPU or the disk."""

from __future__ import annotations

import warnings

import pytest

from eagle3kit.draft.config import build_config
from eagle3kit.plan.fit import run_problems
from eagle3kit.train import launch
from eagle3kit.train.session import TrainSettings

from conftest import TINY_DATA_SEQ, TINY_DATA_VOCAB


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", draft_vocab_size=TINY_DATA_VOCAB, device="cpu")


def test_launch_warns_before_writing_an_oversized_run(tiny_data, tmp_path):
    big = build_config(verifier="tiny", draft_vocab_size=None, device="cpu")
    settings = TrainSettings(total_seq_len=262144, loss_implementation="eager").resolved("cuda")
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="will not fit.*GB per GPU.*--total-seq-len") as caught:
        launch.write_plan(big, settings, tiny_data, out, n_gpus=1, gpu="L40S", loss_implementation="eager")
    assert len([w for w in caught if "will not fit" in str(w.message)]) == 1
    with warnings.catch_warnings():  # the warning comes before anything is written
        warnings.filterwarnings("error", message=".*will not fit.*")
        with pytest.raises(UserWarning):
            launch.write_plan(big, settings, tiny_data, tmp_path / "fresh", gpu="L40S", loss_implementation="eager")
    assert not (tmp_path / "fresh").exists()


def test_a_plan_written_without_warnings_keeps_what_will_not_fit(build, tiny_data, tmp_path):
    """Notebook 05 prints ``plan.fit`` instead of a warning on stderr."""
    big = build_config(verifier="tiny", draft_vocab_size=None, device="cpu")
    settings = TrainSettings(total_seq_len=262144, loss_implementation="eager").resolved("cuda")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*will not fit.*")
        plan = launch.write_plan(big, settings, tiny_data, tmp_path / "big", n_gpus=1, gpu="L40S",
                                 loss_implementation="eager", warn=False)
        healthy = launch.write_plan(build, TrainSettings(total_seq_len=TINY_DATA_SEQ).resolved("cuda"), tiny_data,
                                    tmp_path / "run", n_gpus=1, warn=False)
    assert plan.fit.startswith("will not fit: the planned step needs") and "L40S" in plan.fit
    assert healthy.problems == [] and healthy.fit == "fits its GPUs and disk"


def test_launch_is_silent_on_the_demo_sized_run(build, tiny_data, tmp_path):
    settings = TrainSettings(total_seq_len=TINY_DATA_SEQ).resolved("cuda")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*will not fit.*")
        launch.write_plan(build, settings, tiny_data, tmp_path / "run", n_gpus=1)


@pytest.mark.catalogue("eager-loss-memory")
def test_the_eager_loss_does_not_fit_where_the_fused_one_does(tmp_path):
    """speculators PR 951's case at Llama-3.1-8B's shapes: the full 128K vocabulary, 8192 tokens, one A100-40GB."""
    full = build_config(verifier="llama-3.1-8b", draft_vocab_size=None, device="cpu")
    on_gpu = dict(n_gpus=1, gpu="A100-40GB", disk=False)  # the GPU alone: this host's free disk is not the question
    eager = run_problems(full, 8192, "eager", "adamw", 1, tmp_path, **on_gpu)
    assert len(eager) == 1 and "GB per GPU" in eager[0] and "or the fused loss" in eager[0]
    assert run_problems(full, 8192, "fused", "adamw", 1, tmp_path, **on_gpu) == []
    assert run_problems(full, 4096, "eager", "adamw", 1, tmp_path, **on_gpu) == []


def test_disk_for_checkpoints_is_checked(build, tmp_path):
    assert run_problems(build, 1024, "fused", "adamw", 20, tmp_path) == []
    problems = run_problems(build, 1024, "fused", "adamw", 10**12, tmp_path)
    assert len(problems) == 1 and "checkpoints" in problems[0]
