"""TrainSession on real speculators pieces: metrics per TTT step, parity with a plain loop, bit-exact resume, bad input.

Data: a real (tiny) data directory made by eagle3kit.data.dataset from ShareGPT conversations with the tiny verifier.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest import mock

import papermill
import pytest
import torch
from matplotlib.figure import Figure
from speculators.model import SpeculatorModel

from eagle3kit.cli import main
from eagle3kit.data.loader import make_loader
from eagle3kit.data.directory import MANIFEST, DataDir, DataError, verifier_identity
from eagle3kit.data.plots import plot_batch
from eagle3kit.draft.config import DraftSpec, build_config, save_config, spec_from_saved
from eagle3kit.device import native_bf16
from eagle3kit.errors import UserError
from eagle3kit.presets import NOTEBOOKS, parameters
from eagle3kit.train.checkpoint import SESSION_FILE, CheckpointError, read_session
from eagle3kit.train.loop import PlainLoop, make_schedulers, warmup_steps
from eagle3kit.train.plots import plot_metrics, plot_step
from eagle3kit.train.session import TrainingDiverged, TrainSession, TrainSettings

from conftest import TINY_DATA_SEQ as SEQ
from conftest import TINY_DATA_VOCAB as VOCAB

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"


def spec(**kw) -> DraftSpec:
    return DraftSpec(verifier="tiny", draft_vocab_size=VOCAB, device="cpu", **kw)


def session(data, **kw):
    return TrainSession(data, spec(), progress=False, total_seq_len=SEQ, **kw)


def test_step_returns_metrics_per_ttt_step(tiny_data):
    s = session(tiny_data, lr=1e-3, warmup_steps=0)
    record = s.step()
    for k in range(3):
        for name in ("loss", "full_acc", "cond_acc"):
            assert f"{name}_{k}" in record and math.isfinite(record[f"{name}_{k}"])
        assert 0.0 <= record[f"full_acc_{k}"] <= 1.0
    assert record["loss"] == pytest.approx(sum(record[f"loss_{k}"] for k in range(3)), rel=1e-5)
    assert 0 < record["loss_tokens"] <= record["tokens"] <= SEQ
    assert record["lr"] == pytest.approx(1e-3) and record["seconds"] > 0
    assert s.history == [record] and s.global_step == 1 and s.position == (0, 1)
    assert len(s.history_frame()) == 1


def counting(method: str):
    """A spy on a :class:`DataDir` method that still runs it: ``with counting("open") as calls: ...``."""
    return mock.patch.object(DataDir, method, autospec=True, side_effect=getattr(DataDir, method))


def test_a_data_directory_is_opened_and_checked_once_per_trip(tiny_data, tmp_path):
    """From a path to a trained step, the session opens the directory once and checks it against the draft once;
    the batches, the loader, the health check and the vocab mapping are handed that one DataDir."""
    with counting("open") as opened, counting("__init__") as read, counting("check_compatible") as checked:
        session(tiny_data).step()
    assert (opened.call_count, read.call_count, checked.call_count) == (1, 1, 1)
    with counting("open") as opened, counting("__init__") as read:  # `eagle3kit train --data DIR`: opened by the CLI
        assert main(["train", "--data", str(tiny_data), "--verifier", "tiny", "--total-seq-len", str(SEQ),
                     "--steps", "1", "--device", "cpu"]) == 0
    assert (opened.call_count, read.call_count) == (1, 1)


def test_bfloat16_on_cpu_autocasts(tiny_data):
    """hidden_states_dtype="bfloat16" on CPU: bf16 batches, bf16 matmuls under autocast, fp32 weights; the loss
    stays close to the exact float32 step's."""
    exact = session(tiny_data, lr=1e-3, warmup_steps=0).step()
    s = session(tiny_data, lr=1e-3, warmup_steps=0, hidden_states_dtype="bfloat16")
    assert s.peek_batch()["hidden_states"].dtype == torch.bfloat16
    with s.autocast():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    fast = s.step()
    assert fast["loss"] != exact["loss"] and fast["loss"] == pytest.approx(exact["loss"], rel=0.05)
    assert all(p.dtype == torch.float32 for p in s.model.parameters())


@pytest.mark.parametrize(("optimizer", "attention"), [("adamw", "speculators"), ("muon", "speculators"),
                                                      ("muon", "block_sparse_cpu")])
def test_step_equals_plain_speculators_loop(tiny_data, optimizer, attention):
    """Two TrainSession steps == the plain loop (same batches, seed, forward, and speculators' optimizer: AdamW, or
    Muon on the 2D weights + AdamW on the rest): both call the one train_step."""
    s = session(tiny_data, lr=1e-3, warmup_steps=0, seed=0, optimizer=optimizer, attention=attention)
    kinds = [type(o).__name__ for o in s.optimizers]
    assert kinds == (["AdamW"] if optimizer == "adamw" else ["Muon", "AdamW"])
    records = [s.step(), s.step()]

    loop = PlainLoop(build_config(spec()), tiny_data, s.settings, s.total_steps, attention=attention)
    init_fc = loop.model.fc.weight.detach().clone()
    loader = make_loader(tiny_data, SEQ, torch.float32, train_ratio=0.9, seed=0)
    for record, batch in zip(records, loader, strict=False):
        assert abs(loop.step(batch) - record["loss"]) <= 1e-6
    mine = dict(s.model.named_parameters())
    worst = max((p - mine[n]).abs().max().item() for n, p in loop.model.named_parameters())
    assert worst <= 1e-6
    assert not torch.equal(init_fc, mine["fc.weight"])  # the steps did train


def test_a_session_reads_its_manifest_and_its_session_json_once(tiny_data, tmp_path):
    """issue 32: one TrainSession(data_dir) reads eagle3kit_data.json once and fingerprints the verifier once;
    TrainSession.resume reads session.json once. The spies wrap the real functions: every Path.read_text call is
    counted by the file it reads."""
    with mock.patch.object(Path, "read_text", autospec=True, side_effect=Path.read_text) as reads, \
            mock.patch("eagle3kit.data.directory.verifier_identity", wraps=verifier_identity) as fingerprints:
        s = TrainSession(tiny_data, progress=False, total_seq_len=SEQ)
        read = [c.args[0].name for c in reads.call_args_list]
        assert read.count(MANIFEST) == 1 and fingerprints.call_count == 1, (read, fingerprints.call_count)
        assert s.build.config.draft_vocab_size == VOCAB  # the draft got the data's vocab from that one read
        s.save(tmp_path / "ck")
        reads.reset_mock()
        fingerprints.reset_mock()
        resumed = TrainSession.resume(tmp_path / "ck", progress=False)
        read = [c.args[0].name for c in reads.call_args_list]
        assert read.count(SESSION_FILE) == 1 and read.count(MANIFEST) == 1 and fingerprints.call_count == 1, read
    assert resumed.global_step == 0 and resumed.data.path.resolve() == s.data.path.resolve()
    given = DataDir(tiny_data)  # a DataDir handed in is not read again
    with mock.patch.object(Path, "read_text", autospec=True, side_effect=Path.read_text) as reads:
        assert TrainSession(given, progress=False, total_seq_len=SEQ).data is given
    assert [c.args[0].name for c in reads.call_args_list].count(MANIFEST) == 0


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_resume_equals_uninterrupted_bit_for_bit(tiny_data, tmp_path, optimizer):
    full = session(tiny_data, lr=2e-3, warmup_steps=1, max_steps=50, optimizer=optimizer, muon_lr=1e-2)
    full.run(4)

    first = session(tiny_data, lr=2e-3, warmup_steps=1, max_steps=50, optimizer=optimizer, muon_lr=1e-2)
    first.run(2, checkpoint_dir=tmp_path / "ck")
    resumed = TrainSession.resume(tmp_path / "ck", progress=False)
    assert resumed.global_step == 2 and resumed.position == first.position
    resumed.run(2)

    assert [r["loss"] for r in resumed.history] == [r["loss"] for r in full.history]
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.settings.optimizer == optimizer and len(resumed.optimizers) == len(full.optimizers)
    for opt_a, opt_b in zip(full.optimizers, resumed.optimizers, strict=True):
        sa, sb = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
        assert sa.keys() == sb.keys() and sa
        assert all(torch.equal(sa[i][m], sb[i][m]) for i in sa for m in sa[i])
    assert [s.get_last_lr() for s in full.schedulers] == [s.get_last_lr() for s in resumed.schedulers]


def test_checkpoint_is_a_speculators_model_dir(tiny_data, tmp_path):
    s = session(tiny_data, warmup_steps=0)
    s.step()
    s.save(tmp_path / "ck")
    loaded = SpeculatorModel.from_pretrained(str(tmp_path / "ck"))
    assert type(loaded).__name__ == "Eagle3DraftModel"
    mine = s.model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, mine[name]), name
    exported = s.export(tmp_path / "export", dtype="bfloat16")
    again = SpeculatorModel.from_pretrained(str(exported))
    assert again.fc.weight.dtype == torch.bfloat16


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_data, tmp_path):
    s = session(tiny_data, warmup_steps=0)
    s.run(1, checkpoint_dir=tmp_path / "ck")
    before = {n: p.detach().clone() for n, p in s.model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        s.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")
    before["layers.0.mlp.down_proj.weight"][0, 0] = float("nan")
    with pytest.raises(TrainingDiverged, match="non-finite.*last good checkpoint is"):
        s.run(3, checkpoint_dir=tmp_path / "ck", checkpoint_every=1)
    assert s.global_step == 1 and len(s.history) == 1 and s.position == (0, 1)
    for n, p in s.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p.nan_to_num(7.0), before[n].nan_to_num(7.0)), n
    read_session(tmp_path / "ck")
    good = TrainSession.resume(tmp_path / "ck", progress=False)
    assert good.global_step == 1 and math.isfinite(good.step()["loss"])


def test_bad_input_is_refused_with_a_clear_message(tiny_data, tmp_path):
    with pytest.raises(DataError, match="more than total_seq_len=64"):
        TrainSession(tiny_data, spec(), total_seq_len=64, progress=False)
    with pytest.raises(DataError, match="leaves none for training"):
        session(tiny_data, train_data_ratio=0.01)
    with pytest.raises(DataError, match="no eagle3kit_data.json"):
        session(tmp_path)
    other = build_config(verifier="tiny", device="cpu", aux_layer_ids=[1, 3, 6], draft_vocab_size=VOCAB)
    with pytest.raises(DataError, match="aux layers"):
        TrainSession(tiny_data, other, total_seq_len=SEQ)
    with pytest.raises(ValueError, match="no backward"):
        TrainSession(tiny_data, spec(attn_implementation="simple_flex_attention"), total_seq_len=SEQ)
    with pytest.raises(TypeError, match="Unknown training setting"):
        session(tiny_data, learning_rate=1.0)
    with pytest.raises(UserError, match=r"optimizer='sgd' is not one .* of \('adamw', 'muon'\)"):
        session(tiny_data, optimizer="sgd")

    s = session(tiny_data, lr=1e-3)
    s.save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="another configuration.*lr"):
        session(tiny_data, lr=5e-4).load(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="optimizer is 'adamw' there and 'muon' here"):
        session(tiny_data, lr=1e-3, optimizer="muon").load(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="not an eagle3kit training checkpoint"):
        s.load(tmp_path)


def test_other_verifier_data_is_refused(tiny_data, smollm2):
    with pytest.raises(DataError, match="was made with verifier 'tiny'"):
        TrainSession(tiny_data, DraftSpec(verifier="smollm2", device="cpu"), total_seq_len=SEQ)


def test_plots_return_figures(tiny_data):
    s = session(tiny_data, warmup_steps=0)
    s.run(2)
    fig = plot_metrics(s.history)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    assert all(len(ax.lines) == 6 for ax in fig.axes)
    assert isinstance(plot_step(s.history[-1]), Figure)
    batch = s.peek_batch()
    assert isinstance(plot_batch(batch["document_ids"], 3, batch["loss_mask"]), Figure)
    assert isinstance(plot_metrics([]), Figure)


def test_spec_from_saved_config_rebuilds_the_same_draft(tmp_path):
    build = build_config(verifier="tiny", device="cpu", num_layers=2, ttt_steps=4, norm_output=False,
                         full_attention_indices=[1])
    save_config(build, tmp_path / "cfg")
    again = build_config(spec_from_saved(tmp_path / "cfg", device="cpu"))
    save_config(again, tmp_path / "again")
    assert (tmp_path / "again" / "config.json").read_text() == (tmp_path / "cfg" / "config.json").read_text()


def test_a_saved_draft_config_trains_with_the_data_vocab(tiny_data, tmp_path):
    """Notebook 05's one call: a Path to notebook 01's config folder gives its shape and the data's draft vocab."""
    save_config(build_config(verifier="tiny", device="cpu", num_layers=2, ttt_steps=2), tmp_path / "cfg")
    s = TrainSession(tiny_data, tmp_path / "cfg", progress=False, total_seq_len=SEQ)
    assert s.build.spec == spec_from_saved(tmp_path / "cfg", draft_vocab_size=VOCAB)
    assert (s.build.spec.num_layers, s.ttt_steps, s.build.config.draft_vocab_size) == (2, 2, VOCAB)
    assert math.isfinite(s.step()["loss"])


def test_cli_train_save_and_resume(tiny_data, tmp_path, capsys):
    ck = tmp_path / "ck"
    assert main(["train", "--data", str(tiny_data), "--total-seq-len", str(SEQ), "--steps", "1", "--device", "cpu",
                 "--hidden-states-dtype", "bfloat16", "--save", str(ck)]) == 0
    assert main(["train", "--resume", str(ck), "--steps", "1", "--save", str(ck)]) == 0
    out = capsys.readouterr().out
    assert "full_acc_2" in out and "--resume" in out
    assert json.loads((ck / "session.json").read_text())["settings"]["hidden_states_dtype"] == "bfloat16"
    assert main(["train", "--steps", "1"]) == 2  # no data: one clear sentence, no stack trace
    assert "Pass --data DIR" in capsys.readouterr().err


def test_notebook_05_declares_every_preset_parameter():
    declared = set(papermill.inspect_notebook(str(NOTEBOOK_DIR / "05_training_step.ipynb")))
    for preset in ("ci", "demo"):
        assert set(parameters(preset, "05")) | {"workdir"} <= declared
    assert NOTEBOOKS["05"]["ci"]["total_seq_len"] % 128 == 0  # the launch YAML uses flex attention


def test_bf16_without_native_support_is_warned(tiny_data, recwarn):
    """"auto" trains in float32 on CPU; bf16 autocast and Muon (bf16 orthogonalization) are warned about on a CPU
    that emulates bf16 (they ran ~30x and ~18x slower per step there), and not on one that has it."""
    assert TrainSettings().resolved("cpu").hidden_states_dtype == "float32"
    TrainSettings(hidden_states_dtype="bfloat16").resolved("cpu")
    session(tiny_data, optimizer="muon")
    said = " ".join(str(w.message) for w in recwarn.list)
    if native_bf16():
        assert "without native bf16" not in said
    else:
        assert "hidden_states_dtype='bfloat16' on a CPU without native bf16" in said
        assert "optimizer='muon' on a CPU without native bf16" in said


def test_native_picks_bf16_only_where_the_hardware_has_it(tiny_data, recwarn):
    """"native" (the demo's choice) trains in bf16 autocast on CUDA and on a CPU with native bf16, float32 elsewhere,
    and never warns about emulated bf16; the session's autocast follows it."""
    assert TrainSettings(hidden_states_dtype="native").resolved("cuda").hidden_states_dtype == "bfloat16"
    expected = "bfloat16" if native_bf16() else "float32"
    assert TrainSettings(hidden_states_dtype="native").resolved("cpu").hidden_states_dtype == expected
    s = session(tiny_data, hidden_states_dtype="native")
    assert s.settings.hidden_states_dtype == expected and s.dtype == getattr(torch, expected)
    assert "without native bf16" not in " ".join(str(w.message) for w in recwarn.list)
    with pytest.raises(UserError, match="'native'"):
        session(tiny_data, hidden_states_dtype="bf16")


def test_a_verifier_name_trains_the_datas_draft_vocab(tiny_data):
    """A session given only a verifier name (or nothing) builds the draft over the vocab the data has a mapping for."""
    assert session(tiny_data).model.lm_head.out_features == VOCAB
    assert TrainSession(tiny_data, "tiny", progress=False, total_seq_len=SEQ).model.lm_head.out_features == VOCAB
    assert TrainSession(tiny_data, None, progress=False, total_seq_len=SEQ).model.lm_head.out_features == VOCAB


def test_warmup_is_one_percent_rounded_down_and_its_first_step_runs_at_lr_zero():
    from eagle3kit.train.settings import TrainSettings

    assert warmup_steps(TrainSettings(), 99) == 0 and warmup_steps(TrainSettings(), 241) == 2
    assert warmup_steps(TrainSettings(warmup_steps=5), 241) == 5
    lrs = []
    for total in (241, 40):
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        (scheduler,) = make_schedulers([optimizer], TrainSettings(), total)
        seen = []
        for _ in range(3):  # the LR each step runs at, then the scheduler steps (as train_step)
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        lrs.append(seen)
    assert lrs[0] == pytest.approx([0.0, 5e-4, 1e-3])  # a warmup of 2: LR 0, lr / 2, then lr
    assert lrs[1][0] == pytest.approx(1e-3)  # no warmup: the first step at lr
