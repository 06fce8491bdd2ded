"""Warm start: the draft begins as a copy of a verifier decoder layer, in eagle3kit and in speculators' trainer."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from eagle3kit.draft.config import build_config
from eagle3kit.data.vocab import build_for_data
from eagle3kit.draft.warm_start import resolve_layer, warm_start
from eagle3kit.train import launch
from eagle3kit.train.session import TrainSession, TrainSettings
from eagle3kit.verifier import load_model

from conftest import TINY_DATA_SEQ as SEQ
from conftest import TINY_DATA_VOCAB as VOCAB


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", draft_vocab_size=VOCAB, device="cpu")


def _draft(build, data):
    torch.manual_seed(0)
    return build_for_data(build, data)


@pytest.mark.parametrize("layer", [-1, 3])
def test_draft_layer_is_the_verifier_layer(build, tiny_data, layer):
    hidden = build.verifier.text_config.hidden_size
    model = _draft(build, tiny_data)
    embed_half = model.layers[0].self_attn.q_proj.weight[:, :hidden].clone()
    index = warm_start(model, build, layer)
    n = build.verifier.text_config.num_hidden_layers
    assert index == (n - 1 if layer == -1 else layer)
    v = load_model(build.verifier).model
    src, d = v.layers[index], model.layers[0]
    for name in ("q_proj", "k_proj", "v_proj"):
        assert torch.equal(getattr(d.self_attn, name).weight[:, hidden:], getattr(src.self_attn, name).weight)
    assert torch.equal(d.self_attn.q_proj.weight[:, :hidden], embed_half)  # the token half keeps its random init
    assert torch.equal(d.self_attn.o_proj.weight, src.self_attn.o_proj.weight)
    for name in ("gate_proj", "up_proj", "down_proj"):
        assert torch.equal(getattr(d.mlp, name).weight, getattr(src.mlp, name).weight)
    assert torch.equal(d.hidden_norm.weight, src.input_layernorm.weight)
    assert torch.equal(d.post_attention_layernorm.weight, src.post_attention_layernorm.weight)
    assert torch.equal(model.norm.weight, v.norm.weight)
    # fc passes the last aux layer through unchanged
    aux = torch.randn(1, 5, 3 * hidden)
    assert torch.allclose(model.fc(aux), aux[..., -hidden:])


def test_layer_out_of_range_is_refused(build, tiny_data):
    assert resolve_layer(-1, 8) == 7 and resolve_layer(0, 8) == 0
    with pytest.raises(ValueError, match="warm_start_layer=8: the verifier has 8 decoder layers"):
        warm_start(_draft(build, tiny_data), build, 8)


def test_session_starts_warm_and_resumes(build, tiny_data, tmp_path):
    s = TrainSession(tiny_data, build, total_seq_len=SEQ, max_steps=6, warm_start_layer=-1, progress=False)
    v = load_model(build.verifier).model
    assert torch.equal(s.model.layers[0].mlp.up_proj.weight, v.layers[-1].mlp.up_proj.weight)
    cold = TrainSession(tiny_data, build, total_seq_len=SEQ, max_steps=6, progress=False)
    assert not torch.equal(cold.model.layers[0].mlp.up_proj.weight, v.layers[-1].mlp.up_proj.weight)
    s.run(2)
    s.save(tmp_path / "ckpt")
    resumed = TrainSession.resume(tmp_path / "ckpt", progress=False)
    assert resumed.settings.warm_start_layer == -1 and resumed.global_step == 2
    for a, b in zip(resumed.model.parameters(), s.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_speculators_trainer_starts_from_the_same_weights(build, tiny_data, tmp_path):
    """The launch YAML points speculators' ``from_pretrained`` at the warm-started draft; its dry run loads it."""
    settings = TrainSettings(total_seq_len=SEQ, warm_start_layer=-1).resolved("cpu")
    plan = launch.write_plan(build, settings, tiny_data, tmp_path, n_gpus=2)
    assert plan.config.draft.from_pretrained == str((tmp_path / "warm_start").resolve())
    saved = launch.dry_run(plan, tmp_path / "dry")
    table = launch.compare_configs(launch.eagle3kit_config_json(build, tiny_data),
                                   json.loads((saved / "config.json").read_text()))
    assert table["equal"].all(), table[~table["equal"]].to_string()
    theirs = load_file(str(next(saved.glob("*.safetensors"))))
    model = _draft(build, tiny_data)
    warm_start(model, build, -1)
    ours = model.state_dict()
    hidden = build.verifier.text_config.hidden_size
    checked = [k for k in theirs if k.startswith(("layers.", "fc.", "norm."))]
    assert len(checked) >= 10
    for k in checked:  # the dry run saves in hidden_states_dtype (bf16)
        a, b = theirs[k], ours[k].to(theirs[k].dtype)
        if k.startswith("layers.0.self_attn.") and k.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            a, b = a[:, hidden:], b[:, hidden:]  # the token half is random in both, with different seeds
        assert torch.equal(a, b), k
