"""Nothing lost: a run killed (SIGKILL) right after a checkpoint resumes from the CLI and ends bit for bit where the
uninterrupted run ends; a checkpoint made with another configuration is refused in one sentence."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from conftest import TINY_DATA_SEQ as SEQ
from eagle3kit.draft.config import DraftSpec
from eagle3kit.device import native_bf16
from eagle3kit.train.checkpoint import OPTIMIZER_FILE, SCHEDULER_FILE, STATE_FILE, CheckpointError
from eagle3kit.train.session import TrainSession

# The CLI exactly as a user runs it, in a process that kills itself right after its second complete checkpoint:
# a deterministic stand-in for "the machine died mid-run" (no polling, no race).
KILLED_AFTER_SECOND_CHECKPOINT = """
import os, signal, sys
from eagle3kit import cli
from eagle3kit.train.session import TrainSession

real_save, saved = TrainSession.save, []


def save(self, directory):
    out = real_save(self, directory)
    saved.append(out)
    if len(saved) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return out


TrainSession.save = save
sys.exit(cli.main(sys.argv[1:]))
"""


def eagle3kit(*args: str, killed: bool = False) -> subprocess.CompletedProcess:
    code = KILLED_AFTER_SECOND_CHECKPOINT if killed else "import sys; from eagle3kit import cli; sys.exit(cli.main())"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=600)


# Muon + AdamW: the most optimizer state to restore; AdamW alone resumes bit for bit in test_train (in process).
@pytest.mark.parametrize("optimizer", ["muon"])
def test_a_run_killed_after_its_second_checkpoint_resumes_bit_for_bit(tiny_data, tmp_path, optimizer):
    # 12 steps: killed mid-epoch 0 (10 batches) after its checkpoint at step 8, resumed across the epoch's end
    run = ["train", "--data", tiny_data, "--device", "cpu", "--max-steps", 12, "--total-seq-len", SEQ, "--lr", "2e-3",
           "--optimizer", optimizer, "--checkpoint-every", 4]
    whole = eagle3kit(*run, "--steps", 12, "--save", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr

    killed = eagle3kit(*run, "--steps", 10, "--save", tmp_path / "ck", killed=True)
    assert killed.returncode == -signal.SIGKILL
    assert torch.load(tmp_path / "ck" / STATE_FILE, weights_only=True)["global_step"] == 8

    resumed = eagle3kit("train", "--resume", tmp_path / "ck", "--steps", 4)
    assert resumed.returncode == 0, resumed.stderr

    a, b = tmp_path / "whole", tmp_path / "ck"
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    # one state dict per optimizer (a list for Muon + AdamW, as speculators' checkpointer writes them)
    oa, ob = ([s["state"] for s in as_list(torch.load(d / OPTIMIZER_FILE, weights_only=True))] for d in (a, b))
    assert len(oa) == len(ob) == (1 if optimizer == "adamw" else 2)
    for x, y in zip(oa, ob, strict=True):
        assert x and x.keys() == y.keys() and all(torch.equal(x[i][m], y[i][m]) for i in x for m in x[i])
    sa, sb = (as_list(torch.load(d / SCHEDULER_FILE, weights_only=True)) for d in (a, b))
    assert [s["_last_lr"] for s in sa] == [s["_last_lr"] for s in sb]
    assert {s["last_epoch"] for s in sa + sb} == {12}
    ha, hb = (torch.load(d / STATE_FILE, weights_only=True)["history"] for d in (a, b))
    keep = ("step", "epoch", "batch", "loss", "lr", "grad_norm")
    assert [{k: r[k] for k in keep} for r in ha] == [{k: r[k] for k in keep} for r in hb]

    done = eagle3kit("train", "--resume", tmp_path / "ck", "--steps", 1)
    # one line for the error; a warning (Muon on a CPU without native bf16) is one plain line before it
    *warned, error = done.stderr.splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert all(w.startswith("eagle3kit: warning: optimizer='muon'") for w in warned)
    assert len(warned) == (optimizer == "muon" and not native_bf16())
    assert error.startswith("eagle3kit: The run is complete") and "--max-steps" in error


def as_list(loaded):
    return loaded if isinstance(loaded, list) else [loaded]


def test_another_configuration_is_refused_in_one_sentence_naming_the_fields(tiny_data, tmp_path):
    spec = DraftSpec(verifier="tiny", draft_vocab_size=512, device="cpu")
    first = TrainSession(tiny_data, spec, progress=False, total_seq_len=SEQ, lr=1e-3)
    first.run(2, checkpoint_dir=tmp_path / "ck", checkpoint_every=1)  # two checkpoints: the case that broke
    other = TrainSession(tiny_data, spec, progress=False, total_seq_len=SEQ, lr=2e-3)
    try:
        other.load(tmp_path / "ck")
    except CheckpointError as exc:
        message = str(exc)
    else:
        raise AssertionError("a checkpoint with another lr was accepted")
    assert "lr is 0.001 there and 0.002 here" in message and "\n" not in message
    assert "draft_config" not in message and "architectures" not in message
    same = TrainSession(tiny_data, spec, progress=False, total_seq_len=SEQ, lr=1e-3).load(tmp_path / "ck")
    assert same.global_step == 2
