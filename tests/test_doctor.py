"""Each doctor check against the faulty situation built for real (tiny verifier, speculators' own model)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from speculators.losses import resolve_loss_config
from safetensors.torch import load_file, save_file
from speculators.models.eagle3 import Eagle3DraftModel

from conftest import NEEDS_FUSED_LOSS_UNDER_COMPILE
from eagle3kit import cli
from eagle3kit.data.dataset import build_dataset
from eagle3kit.doctor.checks.run import check, check_data_dir
from eagle3kit.doctor.checks.facts import attention_facts
from eagle3kit.doctor.findings import format_findings, has_errors, to_frame
from eagle3kit.doctor.probe.worker import make_batch
from eagle3kit.draft.config import build_config, resolve_aux_layer_ids
from eagle3kit.draft.model import build_model

EAGER = resolve_loss_config("kl_div", "eager")
CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="shows what happens without CUDA")
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", device="cpu")  # auto on CPU + training: sdpa


@pytest.fixture(scope="module")
def model(build):
    return build_model(build)


def _checks(findings, severity="error"):
    return {f.check for f in findings if f.severity == severity}


def _batch(build, seq_len=128):
    tl = build.config.transformer_layer_config
    return make_batch(seq_len, len(build.aux_layer_ids), tl.hidden_size, tl.vocab_size, seed=0, device="cpu")


def _model_with(build, impl, **cfg_changes):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = impl
    for key, value in cfg_changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    m = Eagle3DraftModel(config)
    m.load_state_dict(build_model(build).state_dict())
    return m


def test_clean_config_and_model_have_no_errors(build, model):
    batch = _batch(build)
    for subject in (build, build.config, model):
        findings = check(subject, batch=batch, device="cpu", loss="eager")
        assert not has_errors(findings), format_findings(findings)
    found = check(model, batch=batch, device="cpu", loss="eager")
    assert [f.check for f in found] == ["serving"], format_findings(found)  # tiny's head_dim 16: vLLM CPU only
    tokens, loss, _ = model(**batch, ttt_steps=3, loss_config=EAGER)  # and the clean setup really trains
    loss.backward()


@pytest.mark.catalogue("vllm-cpu-head-dim")
def test_a_head_size_vllms_cpu_build_cannot_serve_is_a_warning(build):
    found = [f for f in check(build.config, device="cpu", loss="eager") if f.check == "serving"]
    assert [(f.severity, f.what) for f in found] == [
        ("warning", "vLLM's CPU build cannot serve head_dim=16; GPU vLLM can")]
    assert found[0].why.startswith("the draft's and the verifier's head_dim is 16") and "GPU" in found[0].fix
    llama = build_config(verifier="llama-3.1-8b", device="cpu").config  # head_dim 128: vLLM's CPU build serves it
    assert not [f for f in check(llama, device="cpu", loss="eager") if f.check == "serving"]
    llama.transformer_layer_config.head_dim = 48  # the draft alone
    found = [f for f in check(llama, device="cpu", loss="eager") if f.check == "serving"]
    assert [f.why.split(";")[0] for f in found] == ["the draft's head_dim is 48"]


def test_findings_render_as_table_and_text(build):
    findings = check(build.config, device="cpu", loss=None)
    df = to_frame(findings)
    assert list(df.columns) == ["severity", "check", "what", "why", "fix"]
    assert df.severity.iloc[0] == "error"  # errors first
    assert "[ERROR]" in format_findings(findings) and "fix:" in format_findings(findings)


@pytest.mark.catalogue("attn-unset")
def test_unset_attention_warns_and_resolves_to_simple_flex(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = None
    findings = check(config, device="cpu", training=False, loss="eager", seq_len=256)
    assert "attn_unset" in _checks(findings, "warning")
    assert config.transformer_layer_config._attn_implementation is None  # the doctor did not mutate it
    assert Eagle3DraftModel(copy.deepcopy(config))._attn_impl == "simple_flex_attention"
    assert "attn_unset" not in _checks(check(build.config, device="cpu", loss="eager"), "warning")  # set: silent


def test_unknown_attention_is_an_error(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = "no_such_attention"
    assert "attn_unknown" in _checks(check(config, device="cpu", loss="eager"))


def test_seed_bug_blockmask_into_sdpa_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    m.config.transformer_layer_config._attn_implementation = "sdpa"  # switched after building: mask stays BlockMask
    findings = check(m, device="cpu", training=False, loss="eager")
    assert "mask_mismatch" in _checks(findings)
    with pytest.raises(TypeError, match="not BlockMask"), torch.no_grad():
        m(**_batch(build), ttt_steps=1, loss_config=EAGER)


@pytest.mark.catalogue("hf-flex-on-speculators-09")
def test_reverse_bug_dense_mask_into_hf_flex_is_found(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = "flex_attention"
    facts = attention_facts(config)
    assert facts["mask"] == "bool dense" and facts["backend"] == "flex_attention"
    assert "mask_mismatch" in _checks(check(config, device="cpu", training=False, loss="eager"))
    assert "mask_mismatch" not in _checks(check(build.config, device="cpu", training=False, loss="eager"))
    # running it crashes the process on CPU: tests/test_probe.py shows that through the subprocess probe


@pytest.mark.catalogue("flex-backward-cpu")
def test_flex_backward_on_cpu_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    assert "flex_backward_cpu" in _checks(check(m, device="cpu", training=True, loss="eager"))
    assert "flex_backward_cpu" not in _checks(check(m, device="cpu", training=False, loss="eager"))
    with pytest.raises(NotImplementedError, match="backward on CPU"):  # raised as soon as q/k/v need grads
        _tokens, loss, _ = m(**_batch(build), ttt_steps=1, loss_config=EAGER)
        loss.backward()


@pytest.mark.catalogue("block-size-128")
def test_blockmask_length_not_multiple_of_128_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    bad, good = _batch(build, 130), _batch(build, 128)
    assert "block_size" in _checks(check(m, batch=bad, device="cpu", training=False, loss="eager"))
    assert "block_size" not in _checks(check(m, batch=good, device="cpu", training=False, loss="eager"))
    assert "block_size" not in _checks(check(m, batch=bad, device="cpu", training=False, loss="eager",
                                                    ttt_steps=1))
    with torch.no_grad():
        m(**good, ttt_steps=2, loss_config=EAGER)
        with pytest.raises(RuntimeError, match="block_mask was created for a larger length"):
            m(**bad, ttt_steps=2, loss_config=EAGER)


@pytest.mark.catalogue("fused-loss-cpu")
@CPU_ONLY
def test_fused_loss_without_cuda_is_found_and_really_fails(build, model):
    for loss in (None, "fused", resolve_loss_config("kl_div", "fused")):
        assert "fused_loss" in _checks(check(model, device="cpu", loss=loss))
    assert "fused_loss" not in _checks(check(model, device="cpu", loss=EAGER))
    with pytest.raises(RuntimeError, match="active drivers"), torch.no_grad():
        model(**_batch(build), ttt_steps=1)  # loss_config=None: speculators' fused Triton default


@pytest.mark.catalogue("verifier-weights-nan")
def test_verifier_weights_never_loaded(build, model):
    m = Eagle3DraftModel(copy.deepcopy(build.config))  # no load_verifier_weights()
    findings = check(m, device="cpu", loss="eager")
    assert any(f.check == "weights" and "embed_tokens" in f.what for f in findings if f.severity == "error")
    assert "model.load_verifier_weights()" in {f.fix for f in findings}
    assert not [f for f in check(model, device="cpu", loss="eager") if f.check == "weights"]  # loaded: silent


def test_hidden_size_and_aux_ids_against_the_verifier(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config.hidden_size = 32
    config.eagle_aux_hidden_state_layer_ids = [2, 4, 8]  # the tiny verifier has 8 layers: 0..7
    errors = [f for f in check(config, device="cpu", loss="eager") if f.severity == "error"]
    assert any(f.check == "shape" and "hidden_size 32" in f.what for f in errors)
    aux = [f for f in errors if f.check == "aux_ids"]
    assert len(aux) == 1 and "[8]" in aux[0].what
    default = resolve_aux_layer_ids(build.verifier)  # speculators' own default, [2, L // 2, L - 3]
    assert default == [2, 4, 5] and aux[0].fix == f"config.eagle_aux_hidden_state_layer_ids = {default}"
    config.eagle_aux_hidden_state_layer_ids = [2, 2, 5]
    repeated = [f for f in check(config, device="cpu", loss="eager") if f.check == "aux_ids"]
    assert [f.severity for f in repeated] == ["warning"] and repeated[0].fix.endswith(str(default))


def test_t2d_d2t_consistency(build):
    vocab, draft = build.config.transformer_layer_config.vocab_size, 1000
    b = build_config(verifier="tiny", device="cpu", draft_vocab_size=draft)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft] = True
    good = build_model(b, t2d=t2d, d2t=torch.zeros(draft, dtype=torch.long))
    assert "vocab" not in _checks(check(good, device="cpu", loss="eager"))
    shifted = build_model(b, t2d=t2d, d2t=torch.ones(draft, dtype=torch.long))  # speculators accepts it
    assert "vocab" in _checks(check(shifted, device="cpu", loss="eager"))
    unloaded = Eagle3DraftModel(copy.deepcopy(b.config))  # t2d all zeros
    assert "vocab" in _checks(check(unloaded, device="cpu", loss="eager"))


def test_batch_dtype_and_width(build, model):
    batch = _batch(build)
    bf16 = {**batch, "hidden_states": batch["hidden_states"].to(torch.bfloat16)}
    assert "batch" in _checks(check(model, batch=bf16, device="cpu", loss="eager"), "warning")  # normed first
    raw = build_model(build_config(verifier="tiny", device="cpu", norm_before_fc=False))  # bf16 goes into fc
    assert "batch" in _checks(check(raw, batch=bf16, device="cpu", loss="eager"))
    with pytest.raises(RuntimeError), torch.no_grad():
        raw(**bf16, ttt_steps=1, loss_config=EAGER)
    hidden = build.config.transformer_layer_config.hidden_size
    narrow = {**batch, "hidden_states": batch["hidden_states"][..., :-hidden]}
    findings = check(model, batch=narrow, device="cpu", loss="eager")
    assert any(f.check == "batch" and "hidden_states" in f.what for f in findings if f.severity == "error")


def test_never_raises_on_broken_input(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config.num_attention_heads = 0  # speculators' own code cannot build this
    findings = check(config, device="cpu", loss="eager")
    assert "attention" in _checks(findings) and "could not run" in format_findings(findings)
    assert _checks(check("not a config", device="cpu")) == {"subject"}


@CPU_ONLY
def test_cuda_device_without_cuda_is_an_error(build):
    assert "device" in _checks(check(build, device="cuda", loss="eager"))


def test_data_dir_check_on_a_real_directory(tmp_path, tiny_verifier):
    missing = check_data_dir(tmp_path / "missing", "tiny")
    assert [f.check for f in missing] == ["data_dir"] and missing[0].severity == "error"
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                                    {"role": "assistant", "content": f"It is {2 * i}. " * 4}]}) + "\n"
                           for i in range(3)))
    out = tmp_path / "data"
    build_dataset(tiny_verifier, out, source=src, n_conversations=3, seq_length=64, held_out=0,
                       progress=False, batch_size=3)
    ok = check_data_dir(out, "tiny")
    assert {f.severity for f in ok} == {"info"} and "pre-norm" in ok[0].what  # and what is supervised: all info
    for path in (out / "hidden_states").glob("hs_*.safetensors"):  # a wrong last state in every file
        tensors = load_file(str(path))
        tensors["hidden_states"][:, -1] = torch.randn_like(tensors["hidden_states"][:, -1])
        save_file(tensors, str(path))
    bad = check_data_dir(out, "tiny")
    assert [f.severity for f in bad if f.severity != "info"] == ["error"]
    one = out / "hidden_states" / "hs_1.safetensors"  # an inf in one file: named, with the command that remakes it
    tensors = load_file(str(one))
    tensors["hidden_states"][0, 0, 0] = float("inf")
    save_file(tensors, str(one))
    named = check_data_dir(out, "tiny")
    assert [(f.severity, f.what) for f in named] == [("error", f"hidden-state file {one} is unusable")]
    assert "non-finite" in named[0].why and named[0].fix.startswith(f"eagle3kit data --out {out}")


def test_cli_doctor_exit_code(capsys):
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu"]) == 0
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--model", "--loss", "eager"]) == 0
    out = capsys.readouterr().out  # the tiny verifier's only finding: a head size vLLM's CPU build lacks
    assert "vLLM's CPU build cannot serve head_dim=16" in out and "[ERROR]" not in out
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--attn", "unset"]) == 1
    assert "simple_flex_attention with gradients on cpu" in capsys.readouterr().out  # flex_backward_cpu
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--attn", "flex_attention",
                     "--no-training", "--long"]) == 1
    assert "[ERROR] the draft builds a bool dense mask" in capsys.readouterr().out


@pytest.mark.cuda
@NEEDS_CUDA
@NEEDS_FUSED_LOSS_UNDER_COMPILE
def test_doctor_on_cuda_recommends_simple_flex_and_its_training_step_runs():
    build = build_config(verifier="tiny", device="cuda")  # auto on CUDA + training
    assert build.attention.implementation == "simple_flex_attention"
    unset = copy.deepcopy(build.config)
    unset.transformer_layer_config._attn_implementation = None
    warning = [f for f in check(unset, device="cuda", loss=None, seq_len=256) if f.check == "attn_unset"]
    assert warning and '"simple_flex_attention"' in warning[0].fix
    model = build_model(build)
    batch = _batch(build, 256)
    batch = {k: v.to("cuda") for k, v in batch.items()}
    findings = check(model, batch=batch, device="cuda", loss=None)  # None: speculators' fused Triton loss
    assert not has_errors(findings), format_findings(findings)
    assert not {"flex_backward_cpu", "fused_loss", "device"} & {f.check for f in findings}
    _tokens, loss, _ = model(**batch, ttt_steps=3)  # what the doctor passed really trains on the GPU
    loss.backward()
    assert torch.isfinite(loss) and model.fc.weight.grad is not None
