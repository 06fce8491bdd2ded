"""Each doctor check against the faulty situation built for real (tiny verifier, speculators' own model)."""

from __future__ import annotations

import copy

import pytest
import torch
from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.doctor import checks as doctor
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model
from eagle3kit.doctor.probe_worker import make_batch

EAGER = resolve_loss_config("kl_div", "eager")


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
        findings = doctor.check(subject, batch=batch, device="cpu", loss="eager")
        assert not doctor.has_errors(findings), doctor.format_findings(findings)
    assert doctor.check(model, batch=batch, device="cpu", loss="eager") == []
    tokens, loss, _ = model(**batch, ttt_steps=3, loss_config=EAGER)  # and the clean setup really trains
    loss.backward()


def test_findings_render_as_table_and_text(build):
    findings = doctor.check(build.config, device="cpu", loss=None)
    df = doctor.to_frame(findings)
    assert list(df.columns) == ["severity", "check", "what", "why", "fix"]
    assert df.severity.iloc[0] == "error"  # errors first
    assert "[ERROR]" in doctor.format_findings(findings) and "fix:" in doctor.format_findings(findings)


def test_unset_attention_warns_and_resolves_to_simple_flex(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = None
    findings = doctor.check(config, device="cpu", training=False, loss="eager", seq_len=256)
    assert "attn_unset" in _checks(findings, "warning")
    assert config.transformer_layer_config._attn_implementation is None  # the doctor did not mutate it
    assert Eagle3DraftModel(copy.deepcopy(config))._attn_impl == "simple_flex_attention"


def test_unknown_attention_is_an_error(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = "no_such_attention"
    assert "attn_unknown" in _checks(doctor.check(config, device="cpu", loss="eager"))


def test_seed_bug_blockmask_into_sdpa_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    m.config.transformer_layer_config._attn_implementation = "sdpa"  # switched after building: mask stays BlockMask
    findings = doctor.check(m, device="cpu", training=False, loss="eager")
    assert "mask_mismatch" in _checks(findings)
    with pytest.raises(TypeError, match="not BlockMask"), torch.no_grad():
        m(**_batch(build), ttt_steps=1, loss_config=EAGER)


def test_reverse_bug_dense_mask_into_hf_flex_is_found(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = "flex_attention"
    facts = doctor.attention_facts(config)
    assert facts["mask"] == "bool dense" and facts["backend"] == "flex_attention"
    assert "mask_mismatch" in _checks(doctor.check(config, device="cpu", training=False, loss="eager"))
    # running it crashes the process on CPU: tests/test_probe.py shows that through the subprocess probe


def test_flex_backward_on_cpu_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    assert "flex_backward_cpu" in _checks(doctor.check(m, device="cpu", training=True, loss="eager"))
    assert "flex_backward_cpu" not in _checks(doctor.check(m, device="cpu", training=False, loss="eager"))
    with pytest.raises(NotImplementedError, match="backward on CPU"):  # raised as soon as q/k/v need grads
        _tokens, loss, _ = m(**_batch(build), ttt_steps=1, loss_config=EAGER)
        loss.backward()


def test_blockmask_length_not_multiple_of_128_is_found_and_really_fails(build):
    m = _model_with(build, "simple_flex_attention")
    bad, good = _batch(build, 130), _batch(build, 128)
    assert "block_size" in _checks(doctor.check(m, batch=bad, device="cpu", training=False, loss="eager"))
    assert "block_size" not in _checks(doctor.check(m, batch=good, device="cpu", training=False, loss="eager"))
    assert "block_size" not in _checks(doctor.check(m, batch=bad, device="cpu", training=False, loss="eager",
                                                    ttt_steps=1))
    with torch.no_grad():
        m(**good, ttt_steps=2, loss_config=EAGER)
        with pytest.raises(RuntimeError, match="block_mask was created for a larger length"):
            m(**bad, ttt_steps=2, loss_config=EAGER)


def test_fused_loss_without_cuda_is_found_and_really_fails(build, model):
    assert not torch.cuda.is_available()
    for loss in (None, "fused", resolve_loss_config("kl_div", "fused")):
        assert "fused_loss" in _checks(doctor.check(model, device="cpu", loss=loss))
    assert "fused_loss" not in _checks(doctor.check(model, device="cpu", loss=EAGER))
    with pytest.raises(RuntimeError, match="active drivers"), torch.no_grad():
        model(**_batch(build), ttt_steps=1)  # loss_config=None: speculators' fused Triton default


def test_verifier_weights_never_loaded(build):
    m = Eagle3DraftModel(copy.deepcopy(build.config))  # no load_verifier_weights()
    findings = doctor.check(m, device="cpu", loss="eager")
    assert any(f.check == "weights" and "embed_tokens" in f.what for f in findings if f.severity == "error")
    assert "model.load_verifier_weights()" in {f.fix for f in findings}


def test_hidden_size_and_aux_ids_against_the_verifier(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config.hidden_size = 32
    config.eagle_aux_hidden_state_layer_ids = [2, 4, 8]  # the tiny verifier has 8 layers: 0..7
    errors = [f for f in doctor.check(config, device="cpu", loss="eager") if f.severity == "error"]
    assert any(f.check == "shape" and "hidden_size 32" in f.what for f in errors)
    assert any(f.check == "aux_ids" and "[8]" in f.what for f in errors)


def test_t2d_d2t_consistency(build):
    vocab, draft = build.config.transformer_layer_config.vocab_size, 1000
    b = build_config(verifier="tiny", device="cpu", draft_vocab_size=draft)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:draft] = True
    good = build_model(b, t2d=t2d, d2t=torch.zeros(draft, dtype=torch.long))
    assert "vocab" not in _checks(doctor.check(good, device="cpu", loss="eager"))
    shifted = build_model(b, t2d=t2d, d2t=torch.ones(draft, dtype=torch.long))  # speculators accepts it
    assert "vocab" in _checks(doctor.check(shifted, device="cpu", loss="eager"))
    unloaded = Eagle3DraftModel(copy.deepcopy(b.config))  # t2d all zeros
    assert "vocab" in _checks(doctor.check(unloaded, device="cpu", loss="eager"))


def test_batch_dtype_and_width(build, model):
    batch = _batch(build)
    bf16 = {**batch, "hidden_states": batch["hidden_states"].to(torch.bfloat16)}
    assert "batch" in _checks(doctor.check(model, batch=bf16, device="cpu", loss="eager"), "warning")  # normed first
    raw = build_model(build_config(verifier="tiny", device="cpu", norm_before_fc=False))  # bf16 goes into fc
    assert "batch" in _checks(doctor.check(raw, batch=bf16, device="cpu", loss="eager"))
    with pytest.raises(RuntimeError), torch.no_grad():
        raw(**bf16, ttt_steps=1, loss_config=EAGER)
    hidden = build.config.transformer_layer_config.hidden_size
    narrow = {**batch, "hidden_states": batch["hidden_states"][..., :-hidden]}
    findings = doctor.check(model, batch=narrow, device="cpu", loss="eager")
    assert any(f.check == "batch" and "hidden_states" in f.what for f in findings if f.severity == "error")


def test_never_raises_on_broken_input(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config.num_attention_heads = 0  # speculators' own code cannot build this
    findings = doctor.check(config, device="cuda", loss="eager")
    assert doctor.has_errors(findings)
    assert "device" in _checks(findings)
    assert _checks(doctor.check("not a config")) == {"subject"}


def test_data_dir_check_on_a_real_directory(tmp_path, tiny_verifier):
    import json

    from safetensors.torch import load_file, save_file

    from eagle3kit.data.dataset import build_dataset
    missing = doctor.check_data_dir(tmp_path / "missing", "tiny")
    assert [f.check for f in missing] == ["data_dir"] and missing[0].severity == "error"
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                                                    {"role": "assistant", "content": f"It is {2 * i}. " * 4}]}) + "\n"
                           for i in range(3)))
    out = tmp_path / "data"
    build_dataset(tiny_verifier, out, source=src, n_conversations=3, seq_length=64, held_out=0,
                       progress=False, batch_size=3)
    ok = doctor.check_data_dir(out, "tiny")
    assert [f.severity for f in ok] == ["info"] and "pre-norm" in ok[0].what
    for path in (out / "hidden_states").glob("hs_*.safetensors"):  # a wrong last state in every file
        tensors = load_file(str(path))
        tensors["hidden_states"][:, -1] = torch.randn_like(tensors["hidden_states"][:, -1])
        save_file(tensors, str(path))
    bad = doctor.check_data_dir(out, "tiny")
    assert [f.severity for f in bad] == ["error"]


def test_cli_doctor_exit_code(capsys):
    from eagle3kit import cli
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu"]) == 0
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--model", "--loss", "eager"]) == 0
    assert "no findings" in capsys.readouterr().out
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--attn", "unset"]) == 1
    assert "flex_backward_cpu" in capsys.readouterr().out
    assert cli.main(["doctor", "--verifier", "tiny", "--device", "cpu", "--attn", "flex_attention",
                     "--no-training", "--long"]) == 1
    assert "[ERROR] the draft builds a bool dense mask" in capsys.readouterr().out
