"""Self-distillation data: the verifier's own greedy replies, batched, resumable, readable by build_dataset."""

from __future__ import annotations

import json

import pytest
import torch
from datasets import load_from_disk

from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.loader import held_out_conversations
from eagle3kit.data.regenerate import regenerate
from eagle3kit.evaluate.decode import greedy_generate
from eagle3kit.verifier import load_model, load_tokenizer


def test_replies_equal_plain_greedy_decoding(smollm2, tmp_path):
    """Batched, left-padded generation gives each prompt exactly the verifier's unbatched greedy reply."""
    out = tmp_path / "regen.jsonl"
    info = regenerate(smollm2, out, n_conversations=3, max_new_tokens=12, max_prompt_tokens=48, batch_size=3,
                      progress=False, engine="transformers")
    assert info.n_conversations + info.empty == 3 and info.generated_tokens > 0
    tok, model = load_tokenizer(smollm2), load_model(smollm2)
    records = conv.read_jsonl(out)
    assert len(records) == info.n_conversations
    for turns in records:
        assert [t["role"] for t in turns][-2:] == ["user", "assistant"]
        ids = tok.apply_chat_template(turns[:-1], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        assert len(tok(turns[-2]["content"], add_special_tokens=False)["input_ids"]) <= 48 + 2  # cut, re-tokenized
        want = greedy_generate(model, ids, 12, tok.eos_token_id)
        want = want[: want.index(tok.eos_token_id)] if tok.eos_token_id in want else want
        assert turns[-1]["content"] == tok.decode(want, skip_special_tokens=True)


def test_interrupted_run_resumes_to_the_same_file(smollm2, tmp_path):
    full = tmp_path / "full.jsonl"
    regenerate(smollm2, full, n_conversations=5, max_new_tokens=8, batch_size=2, progress=False, engine="transformers")
    # what an interrupted run leaves: the settings line, two finished records and a line cut mid-write
    first = tmp_path / "first.jsonl"
    regenerate(smollm2, first, n_conversations=5, max_new_tokens=8, batch_size=2, progress=False,
               engine="transformers")
    lines = first.read_text().splitlines()
    settings = json.loads(lines[0])["settings"]
    partial = tmp_path / "resumed.jsonl.partial"
    kept = [{"index": i, "messages": json.loads(lines[i])["messages"], "tokens": 8} for i in (0, 3)]
    partial.write_text("\n".join(json.dumps(x) for x in [{"settings": settings}, *kept]) + '\n{"index": 1, "mes')
    info = regenerate(smollm2, tmp_path / "resumed.jsonl", n_conversations=5, max_new_tokens=8, batch_size=2,
                      progress=False, engine="transformers")
    assert info.resumed == 2
    assert (tmp_path / "resumed.jsonl").read_text() == full.read_text()
    assert not partial.exists()
    again = regenerate(smollm2, tmp_path / "resumed.jsonl", n_conversations=5, max_new_tokens=8,
                       progress=False, engine="transformers")
    assert again.seconds == 0 and again.generated_tokens == 0  # already complete: nothing is generated


def test_partial_with_other_settings_is_started_over(tiny_verifier, tmp_path):
    out = tmp_path / "r.jsonl"
    (tmp_path / "r.jsonl.partial").write_text(json.dumps({"settings": {"max_new_tokens": 99}}) + "\n")
    info = regenerate(tiny_verifier, out, n_conversations=5, max_new_tokens=4, progress=False)
    assert info.resumed == 0 and len(conv.read_jsonl(out)) == info.n_conversations > 0


def test_build_dataset_trains_on_the_regenerated_replies(smollm2, tiny_verifier, tmp_path):
    src = tmp_path / "regen.jsonl"
    regenerate(smollm2, src, n_conversations=6, max_new_tokens=10, max_prompt_tokens=64, progress=False,
               engine="transformers")  # tiny
    # shares its tokenizer
    info = build_dataset(tiny_verifier, tmp_path / "data", n_conversations=4, seq_length=256, held_out=1,
                         source=src, progress=False)
    assert info.n_samples == 4
    tok = load_tokenizer(tiny_verifier)
    replies = {turns[-1]["content"] for turns in conv.read_jsonl(src)}
    held = [turns[-2]["content"] for turns in held_out_conversations(tmp_path / "data")]
    training = [tok.decode(r) for r in load_from_disk(str(tmp_path / "data"))["input_ids"]]
    assert held and not any(h in t for h in held for t in training)  # held-out prompts never trained on
    for row in load_from_disk(str(tmp_path / "data")).select(range(2)):
        ids, mask = torch.as_tensor(row["input_ids"]), torch.as_tensor(row["loss_mask"]).bool()
        text = tok.decode(ids[mask])
        assert any(r and text.startswith(r) for r in replies)  # the supervised text is a verifier reply


def test_prompt_turns_and_bad_input(tiny_verifier, tmp_path):
    turns = [{"role": "assistant", "content": "a0"}, {"role": "system", "content": "s"},
             {"role": "user", "content": "u"},
             {"role": "assistant", "content": "a"}, {"role": "user", "content": "v"}]
    assert conv.prompt_turns(turns) == turns[1:3]
    assert conv.prompt_turns([{"role": "user", "content": "  "}]) is None
    sharegpt = {"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "u"}]}
    assert conv.prompt_turns(sharegpt) == turns[1:3] and conv.prompt_turns("u") == turns[2:3]
    with pytest.raises(ValueError, match="n_conversations=0: use an integer >= 1"):
        regenerate(tiny_verifier, tmp_path / "x.jsonl", n_conversations=0)
    src = tmp_path / "one.jsonl"
    src.write_text(2 * (json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                 {"role": "assistant", "content": "yo"}]}) + "\n"))  # a duplicate
    with pytest.raises(conv.ConversationError, match="only 1 conversations with a distinct"):
        regenerate(tiny_verifier, tmp_path / "y.jsonl", n_conversations=3, source=src, progress=False)


def test_cli_regenerate(tiny_verifier, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["regenerate", "--verifier", "tiny", "--out", str(out), "--n-conversations", "5",
                 "--max-new-tokens", "4"]) == 0
    printed = capsys.readouterr().out
    assert '"n_conversations"' in printed and "eagle3kit data --source" in printed
    assert len(conv.read_jsonl(out)) >= 1
    assert '"engine": "transformers"' in printed  # auto: vLLM's CPU build does not serve the tiny verifier
    assert main(["regenerate", "--verifier", "tiny", "--out", str(out), "--engine", "vllm"]) == 2
    assert "engine='vllm' cannot write these replies" in capsys.readouterr().err


def test_auto_falls_back_to_transformers_and_says_why(tiny_verifier, smollm2, tmp_path, monkeypatch, capsys):
    from eagle3kit import vllm_env
    from eagle3kit.data.regenerate import choose_engine

    assert choose_engine("auto", tiny_verifier.path, "cpu")[0] == "transformers"  # vLLM CPU: no head_dim 16
    assert "head_dim 16" in choose_engine("auto", tiny_verifier.path, "cpu")[1]
    assert choose_engine("transformers", smollm2.path, "cpu") == ("transformers", None)
    monkeypatch.setenv(vllm_env.VENV_VAR, str(tmp_path / "none"))  # a machine without `make vllm`
    engine, why = choose_engine("auto", smollm2.path, "cpu")
    assert engine == "transformers" and "No finished vLLM environment" in why and "make vllm" in why
    with pytest.raises(ValueError, match="engine='vllm' cannot write these replies"):
        choose_engine("vllm", smollm2.path, "cpu")
    info = regenerate(tiny_verifier, tmp_path / "t.jsonl", n_conversations=2, max_new_tokens=3)
    assert info.engine == "transformers" and "transformers writes the replies (not vLLM" in capsys.readouterr().out


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_writes_the_verifier_replies_through_speculators_regenerate_responses(smollm2, tmp_path):
    """vLLM's CPU build serves SmolLM2 and speculators' own regenerate-responses asks it: the prompts are the chat
    template's (the first greedy tokens match transformers' float32 reply; vLLM computes in bf16 here, so a later
    token may part at a near tie), the file is the one build_dataset reads, a finished file is not redone."""
    from eagle3kit.data.regenerate_vllm import usable

    if why := usable(smollm2.path):
        pytest.skip(why)
    out = tmp_path / "regen.jsonl"
    info = regenerate(smollm2, out, n_conversations=6, max_new_tokens=12, max_prompt_tokens=48, progress=False,
                      engine="vllm")
    assert info.engine == "vllm" and info.start_seconds > 0 and info.generated_tokens > 0
    assert info.n_conversations + info.empty == 6
    tok, model = load_tokenizer(smollm2), load_model(smollm2)
    records = conv.read_jsonl(out)
    same_start = 0
    for turns in records:
        ids = tok.apply_chat_template(turns[:-1], add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True)["input_ids"]
        want = tok.decode(greedy_generate(model, ids, 3, tok.eos_token_id), skip_special_tokens=True)
        same_start += turns[-1]["content"].startswith(want.strip()[:8])
    assert same_start >= len(records) - 1
    assert not list(tmp_path.glob("*.partial*"))  # speculators' rows and error log cleaned up
    again = regenerate(smollm2, out, n_conversations=6, max_new_tokens=12, max_prompt_tokens=48, progress=False,
                       engine="vllm")
    assert again.seconds == 0 and again.resumed == info.n_conversations
