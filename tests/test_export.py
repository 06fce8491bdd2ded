"""Export in speculators' format with d2t/t2d, reload through SpeculatorModel.from_pretrained, vLLM commands."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution

from eagle3kit.draft.config import build_config, save_config
from eagle3kit.draft.model import build_model, save_draft
from eagle3kit.evaluate import export
from eagle3kit.evaluate.vllm import serve
from eagle3kit.evaluate.decode import speculative_generate
from eagle3kit.verifier import load_model, load_tokenizer


@pytest.fixture(scope="module")
def draft_with_vocab():
    build = build_config(verifier="tiny", draft_vocab_size=300, ttt_steps=2)
    freq = {t: 1000 - i for i, t in enumerate(range(500, 900))}
    d2t, t2d = build_vocab_mappings_from_distribution(freq, 300, build.verifier.text_config.vocab_size)
    torch.manual_seed(0)
    draft = build_model(build, t2d=t2d, d2t=d2t).eval()
    with torch.no_grad():
        draft.fc.weight.normal_()  # not the initial weights, so that a reload that re-initialises would show
    return draft


def test_export_writes_speculators_format_with_the_vocab_mapping(draft_with_vocab, tmp_path):
    out = save_draft(draft_with_vocab, tmp_path / "draft")
    names = set(export.files(out)["file"])
    assert {"config.json", "model.safetensors"} <= names
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["draft_vocab_size"] == 300
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert {"d2t", "t2d", "fc.weight", "lm_head.weight"} <= keys
        assert torch.equal(f.get_tensor("d2t"), draft_with_vocab.d2t)
    assert "verifier_lm_head.weight" not in keys  # loaded from the verifier on reload


def test_reload_through_speculators_gives_the_same_tensors_and_tokens(draft_with_vocab, tmp_path, tiny_verifier):
    out = save_draft(draft_with_vocab, tmp_path / "draft")
    check = export.reload_check(draft_with_vocab, out)
    assert check["ok"].all(), check[~check["ok"]]
    assert {"d2t", "t2d", "fc.weight"} <= set(check["tensor"])
    reloaded = export.reload(out)
    assert type(reloaded).__name__ == "Eagle3DraftModel" and reloaded._attn_impl == "sdpa"  # noqa: SLF001
    model, tok = load_model(tiny_verifier), load_tokenizer(tiny_verifier)
    prompt = tok("The quick brown fox", return_tensors="pt")["input_ids"]
    a = speculative_generate(model, draft_with_vocab, prompt, 8, k=2)
    b = speculative_generate(model, reloaded, prompt, 8, k=2)
    assert a.tokens == b.tokens and a.accepted == b.accepted


def test_bfloat16_export(draft_with_vocab, tmp_path):
    out = save_draft(draft_with_vocab, tmp_path / "bf16", dtype="bfloat16")
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.get_tensor("fc.weight").dtype == torch.bfloat16
    assert draft_with_vocab.fc.weight.dtype == torch.float32  # the original is untouched


def test_a_bfloat16_export_reloads_in_float32_and_decodes(draft_with_vocab, tmp_path, tiny_verifier):
    """speculators' checkpointer saves bf16: evaluation reloads it in the verifier's float32."""
    out = save_draft(draft_with_vocab, tmp_path / "bf16", dtype="bfloat16")
    assert export.reload(out, dtype=torch.bfloat16).fc.weight.dtype == torch.bfloat16  # as saved
    reloaded = export.reload(out)
    assert reloaded.fc.weight.dtype == torch.float32
    assert torch.equal(reloaded.fc.weight, draft_with_vocab.fc.weight.to(torch.bfloat16).float())
    model, tok = load_model(tiny_verifier), load_tokenizer(tiny_verifier)
    prompt = tok("The quick brown fox", return_tensors="pt")["input_ids"]
    assert speculative_generate(model, reloaded, prompt, 8, k=2).rounds > 0  # a bf16 draft raised a dtype error


def test_vllm_commands(smollm2, tmp_path):
    """``long`` is :func:`serve.serve_command` (the one home of the vLLM command), for a draft of SmolLM2, whose head
    size vLLM's CPU build serves; a real draft config, saved by speculators' save_pretrained."""
    out = save_config(build_config(verifier="smollm2", ttt_steps=2, device="cpu"), tmp_path / "my draft")
    cmds = export.vllm_commands(out)
    assert shlex.split(cmds["short"]) == ["vllm", "serve", str(out.resolve())]
    words = shlex.split(cmds["long"])
    env, args = words[:len(serve.SERVE_ENV)], words[len(serve.SERVE_ENV):]
    assert env == [f"{k}={v}" for k, v in serve.SERVE_ENV.items()] and args == serve.serve_command(out)
    assert args[:3] == ["vllm", "serve", str(Path(smollm2.path).resolve())]
    spec = json.loads(args[args.index("--speculative-config") + 1])
    assert spec == {"method": "eagle3", "model": str(out.resolve()), "num_speculative_tokens": 2}
    long = shlex.split(export.vllm_commands(out, k=5)["long"])
    assert json.loads(long[long.index("--speculative-config") + 1])["num_speculative_tokens"] == 5


def test_vllm_commands_say_what_vllm_cpu_cannot_serve(draft_with_vocab, tmp_path):
    out = save_draft(draft_with_vocab, tmp_path / "tiny")
    with pytest.raises(serve.VllmInputError, match="head_dim=16"):
        export.vllm_commands(out)
    with pytest.raises(serve.VllmInputError, match="no config.json"):
        export.vllm_commands(tmp_path / "nothing")


def test_reload_of_a_missing_export_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="export the draft"):
        export.reload(tmp_path / "nothing")
