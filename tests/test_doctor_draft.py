"""`doctor --draft DIR` on real draft folders (tiny verifier, speculators' own save_pretrained): a trained export is
sound; each broken copy (the failures of docs/failures.md) is named. Also the version traps and the tau verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from packaging.version import Version
from safetensors.torch import load_file, save_file

from eagle3kit.cli import main
from eagle3kit.data.vocab import load_mapping
from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.checks.draft_folder import check_draft_folder
from eagle3kit.doctor.checks.draft_loader import NotADraftError, locate
from eagle3kit.doctor.findings import format_findings
from eagle3kit.doctor.tau.verdict import why_low_tau
from eagle3kit.doctor.checks.versions import floor, version_findings
from eagle3kit.draft.config import DraftSpec, build_config
from eagle3kit.draft.model import build_model, save_draft
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import make_tiny

from conftest import TINY_DATA_SEQ, TINY_DATA_VOCAB

FAST = {"n_prompts": 2, "max_new_tokens": 24}  # the measurement on fewer held-out tokens: the loss separates anyway
SERVING = "serving"  # tiny's head_dim 16: a true warning (vLLM's CPU build cannot serve it), not a false one


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """A full-vocab tiny draft trained on the tiny data until it predicts the verifier, exported by eagle3kit."""
    session = TrainSession(tiny_data, DraftSpec(verifier="tiny", device="cpu"), progress=False,
                           total_seq_len=TINY_DATA_SEQ, lr=1e-2, warmup_steps=0)
    session.run(8)
    return session.export(tmp_path_factory.mktemp("trained") / "draft")


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """speculators' initialisation, exported as it is (what a conversion that lost the weights saves)."""
    torch.manual_seed(1)
    return save_draft(build_model(build_config(verifier="tiny", device="cpu")),
                      tmp_path_factory.mktemp("untrained") / "draft")


@pytest.fixture(scope="module")
def reduced(tiny_data, tmp_path_factory):
    """A draft with the data's reduced vocabulary (d2t/t2d from its token frequencies)."""
    build = build_config(verifier="tiny", device="cpu", draft_vocab_size=TINY_DATA_VOCAB)
    t2d, d2t = load_mapping(tiny_data, TINY_DATA_VOCAB, build.verifier.text_config.vocab_size)
    return save_draft(build_model(build, t2d, d2t), tmp_path_factory.mktemp("reduced") / "draft")


def broken(src: Path, tmp_path: Path, config=None, tensors=None) -> Path:
    """A copy of a draft folder with its config.json and/or its tensors edited in place by the given functions."""
    out = tmp_path / f"broken-{src.parent.name}"
    shutil.copytree(src, out)
    if config is not None:
        cfg = json.loads((out / "config.json").read_text())
        config(cfg)
        (out / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        t = load_file(str(out / "model.safetensors"))
        tensors(t)
        save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def errors(findings, check=None) -> list:
    return [f for f in findings if f.severity == "error" and (check is None or f.check == check)]


def checks(findings, severity=("error", "warning")) -> set[str]:
    return {f.check for f in findings if f.severity in severity}


# ----------------------------------------------------------------------------------------------- healthy
def test_a_fresh_export_of_a_trained_draft_is_sound(trained, tiny_data):
    found = check_draft_folder(trained, data_dir=tiny_data, **FAST)
    assert checks(found) == {SERVING}, format_findings(found)
    assert [f.what for f in found if f.check == "trained"] == ["the weights are trained"]


def test_a_bfloat16_folder_is_sound_too(trained, tmp_path):
    """What `speculators train` saves: bfloat16 tensors, config dtype bfloat16."""
    def bf16(t):
        for name in t:
            t[name] = t[name].bfloat16() if t[name].is_floating_point() else t[name]

    def dtype(cfg):
        cfg["dtype"] = "bfloat16"
    found = check_draft_folder(broken(trained, tmp_path, config=dtype, tensors=bf16), **FAST)
    assert checks(found) == {SERVING}, format_findings(found)
    assert [f.what for f in found if f.check == "trained"] == ["the weights are trained"]


@pytest.mark.catalogue("conversion-random-weights")
def test_an_initialisation_saved_as_a_draft_is_named_by_measurement(untrained, trained):
    found = check_draft_folder(untrained, **FAST)
    assert [f.check for f in errors(found)] == ["trained"], format_findings(found)
    assert "no better than an untrained one" in errors(found)[0].what and "1114" in errors(found)[0].why
    assert not errors(check_draft_folder(trained, **FAST))


@pytest.mark.catalogue("d2t-missing")
def test_a_reduced_vocab_without_d2t_is_named(reduced, trained, tmp_path):
    assert "vocab" not in checks(check_draft_folder(reduced, measure=False))
    assert "vocab" not in checks(check_draft_folder(trained, measure=False))  # full vocab: no d2t needed

    def drop(t):
        del t["d2t"], t["t2d"]
    found = errors(check_draft_folder(broken(reduced, tmp_path, tensors=drop), measure=False), "vocab")
    assert len(found) == 1 and "d2t and t2d not saved" in found[0].what and "2447" in found[0].why


@pytest.mark.catalogue("d2t-all-zero")
def test_an_all_zero_d2t_is_named(reduced, tmp_path):
    def zero(t):
        t["d2t"] = torch.zeros_like(t["d2t"])
    found = errors(check_draft_folder(broken(reduced, tmp_path, tensors=zero), measure=False), "vocab")
    assert len(found) == 1 and "all zeros" in found[0].what and "EAGLE issue 222" in found[0].why


@pytest.mark.catalogue("d2t-absolute-ids")
def test_a_d2t_of_absolute_ids_is_named(reduced, tmp_path):
    def absolute(t):
        t["d2t"] = torch.arange(t["d2t"].numel()) + t["d2t"]
    found = errors(check_draft_folder(broken(reduced, tmp_path, tensors=absolute), measure=False), "vocab")
    assert [f.what for f in found] == ["t2d and d2t disagree"]


@pytest.mark.catalogue("embed-not-verifier")
def test_an_embedding_that_is_not_the_verifiers_is_named(trained, tmp_path):
    def fresh(t):
        t["embed_tokens.weight"] = torch.randn_like(t["embed_tokens.weight"]) * 0.02
    found = check_draft_folder(broken(trained, tmp_path, tensors=fresh), measure=False)
    assert [f.what for f in errors(found)] == ["the draft's embedding is not the verifier's"], format_findings(found)


@pytest.mark.catalogue("verifier-mismatch")
def test_another_verifier_of_the_same_shape_is_named(trained, tmp_path, tiny_verifier):
    other = make_tiny(tmp_path / "tiny-seed-1", seed=1)  # same shapes, other weights
    found = check_draft_folder(trained, verifier=str(other), measure=False)
    assert "embedding" in {f.check for f in errors(found)}, format_findings(found)
    assert not errors(check_draft_folder(trained, verifier=tiny_verifier.path, measure=False))


@pytest.mark.catalogue("draft-hidden-size-mismatch")
def test_a_hidden_size_that_does_not_fit_the_verifier_is_named(trained, tmp_path):
    def wider(cfg):
        cfg["transformer_layer_config"]["hidden_size"] = 128
    found = check_draft_folder(broken(trained, tmp_path, config=wider), **FAST)
    assert "draft hidden_size 128 differs from the verifier's 64" in [f.what for f in errors(found, "shape")]
    assert errors(found, "layout") and not errors(found, "trained")  # not measured: the weights would not load


@pytest.mark.catalogue("aux-ids-draft-vs-data")
def test_aux_ids_other_than_the_datas_are_named(trained, tiny_data, tmp_path):
    def other_ids(cfg):
        cfg["eagle_aux_hidden_state_layer_ids"] = [1, 3, 6]
    found = errors(check_draft_folder(broken(trained, tmp_path, config=other_ids), data_dir=tiny_data,
                                      measure=False), "data")
    assert [f.what for f in found] == ["draft aux layer ids [1, 3, 6] differ from the data's [2, 4, 5]"]


def test_a_vocab_mapping_other_than_the_datas_is_named(reduced, tiny_data, tmp_path):
    assert "data" not in checks(check_draft_folder(reduced, data_dir=tiny_data, measure=False))

    def shuffled(t):  # a consistent mapping, but not the data's: the first 512 ids
        t["d2t"], t["t2d"] = torch.zeros_like(t["d2t"]) + 1, torch.zeros_like(t["t2d"])
        t["t2d"][1:TINY_DATA_VOCAB + 1] = True
    found = check_draft_folder(broken(reduced, tmp_path, tensors=shuffled), data_dir=tiny_data, measure=False)
    assert [f.what for f in errors(found, "data")] == ["the draft's vocab mapping is not the data's"]


@pytest.mark.catalogue("fc-norm-flag-lost")
def test_a_norm_flag_lost_from_the_config_is_named(trained, tmp_path):
    def lose(cfg):
        cfg["norm_before_fc"] = False  # the folder still holds input_norm.weight
    found = errors(check_draft_folder(broken(trained, tmp_path, config=lose), measure=False), "layout")
    assert len(found) == 1 and "input_norm.weight" in found[0].what and "no place for" in found[0].what


@pytest.mark.catalogue("fp16-overflow")
def test_non_finite_weights_are_named(trained, tmp_path):
    def overflow(t):
        t["fc.weight"] = t["fc.weight"].half()
        t["fc.weight"][0, 0] = float("inf")
    found = errors(check_draft_folder(broken(trained, tmp_path, tensors=overflow), measure=False), "tensors")
    assert len(found) == 1 and "fc.weight" in found[0].what


@pytest.mark.catalogue("draft-context-too-short")
def test_a_draft_context_shorter_than_the_verifiers_is_named(trained, tmp_path):
    def short(cfg):
        cfg["transformer_layer_config"]["max_position_embeddings"] = 64
    found = check_draft_folder(broken(trained, tmp_path, config=short), measure=False)
    assert [f.what for f in found if f.check == "context"] == [
        "draft max_position_embeddings 64 < the verifier's 8192"]


# ----------------------------------------------------------------------------------------------- serving
@pytest.mark.catalogue("eagle3-served-as-eagle")
def test_an_eagle3_draft_that_names_another_method_is_named(trained, tmp_path):
    def eagle(cfg):
        cfg["architectures"] = ["LlamaForCausalLMEagle"]
        cfg["speculators_config"]["algorithm"] = "eagle"
    found = errors(check_draft_folder(broken(trained, tmp_path, config=eagle), measure=False), "method")
    assert len(found) == 1 and "21272" in found[0].why
    assert "architectures=['LlamaForCausalLMEagle']" in found[0].what and "algorithm='eagle'" in found[0].what


@pytest.mark.catalogue("vllm-load-fails")
def test_tensors_under_another_trainers_names_are_named(trained, tmp_path):
    renamed = []

    def midlayer(t):
        for name in [n for n in t if n.startswith("layers.0.")]:
            t[name.replace("layers.0.", "midlayer.")] = t.pop(name)
            renamed.append(name)
    found = errors(check_draft_folder(broken(trained, tmp_path, tensors=midlayer), **FAST), "layout")
    assert [f.what.split(":")[0] for f in found] == [f"{len(renamed)} weights missing from the folder",
                                                      f"{len(renamed)} weights the config has no place for"]
    assert "1114" in found[0].why and "54526" in found[0].why


@pytest.mark.catalogue("k-beyond-ttt")
def test_served_k_beyond_the_trained_ttt_steps_is_named(trained, tmp_path):
    out = tmp_path / "speculators-output"  # what `speculators train` writes: run.yaml, epoch folders
    shutil.copytree(trained, out / "0")
    (out / "run.yaml").write_text(yaml.safe_dump({"train": {"loss": {"ttt_steps": 2}}}))
    assert locate(out) == out / "0"
    found = [f for f in check_draft_folder(out, measure=False) if f.check == "steps"]
    assert [(f.severity, f.what) for f in found] == [("warning", "served k=3 > the 2 TTT steps the draft was "
                                                                 "trained with")]
    assert not [f for f in check_draft_folder(out, k=2, measure=False) if f.check == "steps"]
    (out / "run.yaml").write_text(yaml.safe_dump({"train": {"loss": {"ttt_steps": 3}}}))
    assert not [f for f in check_draft_folder(out, measure=False) if f.check == "steps"]


@pytest.mark.catalogue("vllm-cpu-head-dim")  # its row came into main from another branch
def test_a_head_dim_vllms_cpu_build_cannot_serve_is_a_warning_on_a_folder(trained):
    found = [f for f in check_draft_folder(trained, measure=False) if f.check == SERVING]
    assert [(f.severity, f.what) for f in found] == [("warning", "vLLM's CPU build cannot serve head_dim=16; GPU "
                                                                 "vLLM can")]


# ----------------------------------------------------------------------------------------------- versions
@pytest.mark.catalogue("fused-loss-compile-torch211")
def test_the_fused_loss_under_compile_on_old_torch_is_named_from_versions():
    found = version_findings(torch_version="2.11.0", cuda=True)
    assert [f.check for f in found] == ["versions"] and "177600" in found[0].why and "eager" in found[0].fix
    assert not version_findings(torch_version="2.12.0", cuda=True)
    assert not version_findings(torch_version="2.11.0", cuda=True, loss="eager")
    assert not version_findings(torch_version="2.11.0", cuda=False)  # speculators compiles only with CUDA
    on_this_machine = [f.check for f in check(build_config(verifier="tiny").config, device="cuda")]
    assert ("versions" in on_this_machine) == (Version(torch.__version__.split("+")[0]) < Version("2.12"))


@pytest.mark.cuda
@pytest.mark.catalogue("fused-loss-compile-torch211")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")
def test_the_fused_loss_under_compile_fails_exactly_when_the_doctor_says(tiny_data):
    """On a GPU: one training step with speculators' fused loss in its compiled forward fails with the dynamo error
    exactly when the version finding predicts it (torch < 2.12)."""
    spec = DraftSpec(verifier="tiny", draft_vocab_size=TINY_DATA_VOCAB, device="cuda")
    session = TrainSession(tiny_data, spec, progress=False, total_seq_len=TINY_DATA_SEQ, warmup_steps=0,
                           loss_implementation="fused")
    predicted = any(f.check == "versions" and "fused loss" in f.what for f in version_findings(loss="fused"))
    failed = False
    try:
        session.run(1)
    except Exception as exc:  # noqa: BLE001 - the dynamo failure is what is measured
        chain = []
        while exc is not None:
            chain.append(str(exc))
            exc = exc.__cause__ or exc.__context__
        failed = any("tracked for mutation" in text for text in chain)
        assert failed, chain[0]  # another failure is not the one the finding predicts
    assert failed == predicted


@pytest.mark.catalogue("transformers-crop-floor")
def test_transformers_below_the_floor_is_named():
    need = floor("transformers")
    assert need is not None
    older = f"{need.major}.{need.minor - 1}.0"
    assert [f.what for f in version_findings(transformers_version=older)] == [f"transformers {older} < {need}"]
    assert not version_findings(transformers_version=str(need))
    assert not version_findings()  # this environment is sound


# ----------------------------------------------------------------------------------------------- tau verdict
def test_why_low_tau_separates_a_trained_draft_from_an_initialisation(trained, untrained, tiny_data):
    good = why_low_tau(trained, data_dir=tiny_data, n_prompts=2, max_new_tokens=24)
    assert good.agreement.trained and good.text is not None and good.text.tokens > 0
    assert list(good.table()["draft"]) == ["draft", "untrained draft"]
    assert good.agreement.draft_loss < good.agreement.untrained_loss
    assert not any("untrained draft:" in line and "initialisation" in line for line in good.verdict[1:])
    bad = why_low_tau(untrained, n_prompts=2, max_new_tokens=24)
    assert not bad.agreement.trained and any("initialisation" in line for line in bad.verdict)


def test_why_low_tau_names_k_beyond_the_trained_steps(trained, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(trained, out / "0")
    (out / "run.yaml").write_text(yaml.safe_dump({"train": {"loss": {"ttt_steps": 1}}}))
    report = why_low_tau(out, n_prompts=2, max_new_tokens=16)
    assert report.trained_steps == 1 and any(line.startswith("Served k=3 but trained for 1") for line in
                                             report.verdict)


# ----------------------------------------------------------------------------------------------- CLI
def test_cli_doctor_draft_exit_codes(trained, untrained, tmp_path, capsys):
    assert main(["doctor", "--draft", str(trained), "--no-measure"]) == 0
    assert main(["doctor", "--draft", str(untrained), "--long"]) == 1
    assert "no better than an untrained one" in capsys.readouterr().out
    assert main(["doctor", "--draft", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds no draft" in err
    with pytest.raises(NotADraftError, match="not a speculators-format draft"):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
        check_draft_folder(tmp_path)


def test_cli_doctor_draft_why_tau_prints_the_verdict(trained, capsys):
    assert main(["doctor", "--draft", str(trained), "--why-tau"]) == 0
    out = capsys.readouterr().out
    assert "untrained draft" in out and "of a possible 4" in out
    assert "plain speed (predicted; the draft pays above τ" in out  # what that acceptance buys when served
