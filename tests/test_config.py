"""Draft config building on real verifiers: both draft archs, the auto attention rule, the explanation table."""

from __future__ import annotations

import pytest
import torch

from eagle3kit.draft import config as dc
from eagle3kit.draft.model import build_model
from eagle3kit.draft import explain
from eagle3kit.errors import UserError


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_build_both_archs_and_run_forward(tiny_verifier, arch):
    build = dc.build_config(verifier="tiny", draft_arch=arch, ttt_steps=2)
    tl = build.config.transformer_layer_config
    assert tl.model_type == arch and tl.hidden_size == tiny_verifier.config.hidden_size
    assert build.aux_layer_ids == [2, 4, 5]  # speculators' default [2, L//2, L-3] for L=8
    model = build_model(build)
    assert not torch.isnan(model.embed_tokens.weight).any() and not torch.isnan(model.lm_head.weight).any()
    hidden = torch.randn(1, 32, 3 * tl.hidden_size)
    ids = torch.randint(0, tl.vocab_size, (1, 32))
    with torch.no_grad():
        tokens = model(hidden_states=hidden, input_ids=ids, document_ids=torch.zeros(1, 32, dtype=torch.long),
                       ttt_steps=2)
    assert len(tokens) == 2 and tokens[0].shape == (1, 32)


def test_verifier_weights_are_the_verifiers(tiny_verifier):
    from safetensors.torch import load_file

    build = dc.build_config(verifier="tiny")
    model = build_model(build)
    weights = load_file(next(__import__("pathlib").Path(tiny_verifier.path).glob("*.safetensors")))
    assert torch.equal(model.embed_tokens.weight, weights["model.embed_tokens.weight"])
    assert torch.equal(model.verifier_norm.weight, weights["model.norm.weight"])


def test_auto_attention_rule():
    assert dc.resolve_attention("auto", "cuda", True).implementation == "simple_flex_attention"
    assert dc.resolve_attention("auto", "cpu", True).implementation == "sdpa"
    assert "backward" in dc.resolve_attention("auto", "cpu", True).reason
    assert dc.resolve_attention("auto", "cpu", False).implementation == "sdpa"
    assert dc.resolve_attention("eager", "cpu", True).source == "user"
    with pytest.raises(UserError, match="not registered.*`--attn sdpa`"):
        dc.resolve_attention("flash_attention_9", "cpu", True)


def test_registered_includes_speculators_flex():
    names = dc.registered_attention_implementations()
    assert {"eager", "sdpa", "flex_attention", "simple_flex_attention"} <= set(names)


def test_auto_attention_lands_in_the_model():
    build = dc.build_config(verifier="tiny", device="cpu")
    model = build_model(build)
    assert model._attn_impl == "sdpa"
    explicit = build_model(dc.build_config(verifier="tiny", attn_implementation="eager"))
    assert explicit._attn_impl == "eager"


def test_explanation_table_explains_every_field():
    build = dc.build_config(verifier="tiny", ttt_steps=4, num_layers=2)
    model = build_model(build)
    table = explain.explain(build, model)
    assert set(explain._MEANING) <= set(table["field"])
    by = table.set_index("field")
    assert by.loc["ttt_steps", "value"] == "4" and by.loc["ttt_steps", "source"] == "user"
    assert by.loc["num_hidden_layers", "source"] == "user"
    assert by.loc["norm_before_fc", "source"] == "speculators CLI default"
    assert by.loc["_attn_implementation", "source"].startswith("auto rule")
    counts = explain.parameter_counts(model)
    assert by.loc["params (trainable)", "value"] == f"{counts['trainable']:,}"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(n.startswith(("fc.", "layers.", "norm.", "input_norm.")) for n in trainable), trainable
    assert "_attn_implementation" in table.to_string()  # renders in a terminal
    assert "<table" in table.to_html()  # and in a notebook
    other = dc.build_config(verifier="tiny", ttt_steps=3, num_layers=2)
    changed = explain.differences(explain.explain(other, build_model(other)), table, "ttt 4")
    assert list(changed["field"]) == ["ttt_steps"] and list(changed.iloc[0][["value", "ttt 4"]]) == ["3", "4"]
    first_read = explain.headline(table)  # the rows a first read needs, every one of them in the full table
    assert list(first_read["field"]) == [f for f in table["field"] if f in explain.HEADLINE_FIELDS]
    assert set(first_read["field"]) == set(explain.HEADLINE_FIELDS) and len(first_read) < len(table) / 2


def test_presets_build_on_meta_with_counts():
    build = dc.build_config(verifier="kimi-k2.5")
    model = build_model(build)
    assert next(model.parameters()).device.type == "meta"
    tl = build.config.transformer_layer_config
    assert tl.hidden_size == 7168 and tl.vocab_size == 163840 and tl.intermediate_size == 18432
    assert build.aux_layer_ids == [2, 30, 58]
    counts = explain.parameter_counts(model)
    assert counts["frozen"] >= 3 * 163840 * 7168  # embedding + lm_head + verifier_lm_head
    parts = explain.frozen_parts(model)  # notebook 01: what the frozen count adds up
    assert parts["parameter"].tolist()[:3] == ["embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight"]
    assert parts.iloc[-1]["params"] == f"{counts['frozen']:,}"
    # the plan's Kimi draft keeps 32000 of the vocabulary's rows in its heads: its frozen count, from this draft
    from eagle3kit.plan import plan_run
    from eagle3kit.plan.gpu_plan import DEFAULT_DRAFT_VOCAB

    planned = plan_run("kimi-k2.5").dshape
    assert explain.frozen_at(model, DEFAULT_DRAFT_VOCAB) == planned.frozen_embedding + planned.frozen_heads
    assert explain.frozen_at(model, tl.vocab_size) == counts["frozen"]
    gib = explain.memory_footprint(model).set_index("item").loc["total", "GiB"]
    assert gib > 10


def test_bad_settings_are_one_sentence():
    with pytest.raises(UserError, match="aux_layer_ids"):
        dc.build_config(verifier="tiny", aux_layer_ids=[2, 2, 40])
    with pytest.raises(UserError, match="draft_arch.*`--draft-arch llama`"):
        dc.build_config(verifier="tiny", draft_arch="mistral")
    with pytest.raises(TypeError, match="Unknown draft setting"):
        dc.build_config(verifier="tiny", hidden=3)
    build = dc.build_config(verifier="tiny", draft_vocab_size=1000)
    with pytest.raises(ValueError, match="needs t2d/d2t"):
        build_model(build)


def test_draft_vocab_with_mapping():
    build = dc.build_config(verifier="tiny", draft_vocab_size=1000)
    vocab = build.config.transformer_layer_config.vocab_size
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:1000] = True
    d2t = torch.zeros(1000, dtype=torch.long)  # target id = i + d2t[i]
    model = build_model(build, t2d=t2d, d2t=d2t)
    assert model.lm_head.weight.shape == (1000, build.config.transformer_layer_config.hidden_size)
