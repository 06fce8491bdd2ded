"""Notebook 01's pieces: the auto attention rule per device, the verifier weights' check, one random forward."""

from __future__ import annotations

import torch
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.draft.config import build_config, resolve_attention
from eagle3kit.draft.model import build_model, forward_random
from eagle3kit.draft.explain import attention_choices, verifier_weights_loaded
from eagle3kit.plan import compare_plans, plan_run
from eagle3kit.plan.gpu_plan import HEADLINE_ROWS


def test_attention_choices_are_the_auto_rule_on_each_device():
    table = attention_choices()
    assert len(table) == 4 and set(table.device) == {"cpu", "cuda"}
    for row in table.itertuples():
        assert row.implementation == resolve_attention("auto", row.device, row.training).implementation
    assert table.set_index(["device", "training"]).loc[("cpu", True), "implementation"] == "sdpa"


def test_a_draft_without_its_verifier_weights_is_caught_and_one_forward_gives_each_ttt_steps_tokens():
    build = build_config(verifier="tiny", ttt_steps=2, device="cpu")
    assert not verifier_weights_loaded(Eagle3DraftModel(build.config))  # speculators' NaN placeholders stay
    torch.manual_seed(0)
    draft = build_model(build).eval()
    assert verifier_weights_loaded(draft)
    tokens, seconds = forward_random(draft, build, 16)
    assert len(tokens) == 2 and all(t.shape == (1, 16) for t in tokens) and seconds > 0


def test_compare_plans_sets_verifiers_side_by_side_with_their_kind():
    plans = [plan_run(name, samples=1000) for name in ("llama-3.1-8b", "qwen3-8b")]
    table = compare_plans(plans)
    assert list(table.columns) == ["kind", "llama-3.1-8b", "qwen3-8b"]
    first = plans[0].table().set_index("item")
    assert table["llama-3.1-8b"].equals(first["value"]) and table["kind"].equals(first["kind"])
    assert table.loc["fits", "qwen3-8b"] == plans[1].table().set_index("item").loc["fits", "value"]
    head = compare_plans(plans, headline=True)  # notebook 01's first table: the rows a first read needs, by section
    items = head.index.get_level_values("item")
    assert head.droplevel("section").equals(table.loc[items]) and len(head) == len(HEADLINE_ROWS) < len(table)
    assert {"fits", "largest total_seq_len that fits"} <= set(items)
    assert any(item.startswith("break-even") for item in items)
    assert head.loc[("GPU memory / rank", "fits")].equals(table.loc["fits"])
    assert "disk" in head.index.get_level_values("section")
