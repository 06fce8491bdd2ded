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
from eagle3kit.data.regenerate import distinct_prompts, regenerate
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
    lines = full.read_text().splitlines()
    settings = json.loads(lines[0])["settings"]
    partial = tmp_path / "resumed.jsonl.partial"
    kept = [{"index": i, "messages": json.loads(lines[i])["messages"], "tokens": 8} for i in (0, 3)]
    partial.write_text("\n".join(json.dumps(x) for x in [{"settings": settings}, *kept]) + '\n{"index": 1, "mes')
    info = regenerate(smollm2, tmp_path / "resumed.jsonl", n_conversations=5, max_new_tokens=8, batch_size=2,
                      progress=False, engine="transformers")
    assert info.resumed == 2 and "; 2 taken over from an interrupted run" in info.line()
    assert (tmp_path / "resumed.jsonl").read_text() == full.read_text()
    assert not partial.exists()
    again = regenerate(smollm2, tmp_path / "resumed.jsonl", n_conversations=5, max_new_tokens=8,
                       progress=False, engine="transformers")
    assert again.seconds == 0 and again.generated_tokens == 0  # already complete: nothing is generated
    assert again.line().startswith("transformers wrote 0 reply tokens for 5 prompts in 0 s")


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


def test_the_held_out_conversations_of_regenerated_data_do_not_depend_on_how_many_replies_were_written(
        tiny_verifier, tmp_path):
    """A regenerated file is already a seeded sample whose first rows do not depend on its size: build_dataset keeps
    its order, so the held-out conversations (taken first) are the same for 8 and 12 replies. The same rows as a
    plain JSONL (no regeneration settings) are shuffled by size, and there they differ."""
    from eagle3kit.data.regenerate import in_seeded_order

    held = {}
    for n in (8, 12):
        src = tmp_path / f"regen-{n}.jsonl"
        regenerate(tiny_verifier, src, n_conversations=n, max_new_tokens=8, progress=False)
        plain = tmp_path / f"plain-{n}.jsonl"
        conv.write_jsonl(plain, conv.read_jsonl(src))
        assert in_seeded_order(src) and not in_seeded_order(plain) and not in_seeded_order(None)
        for kind, source in (("regenerated", src), ("plain", plain)):
            out = tmp_path / f"data-{kind}-{n}"
            build_dataset(tiny_verifier, out, n_conversations=n - 6, seq_length=512, held_out=2, source=source,
                          progress=False)
            held[kind, n] = [t[0]["content"] for t in held_out_conversations(out)]
    assert held["regenerated", 8] == held["regenerated", 12] == [
        t[0]["content"] for t in conv.read_jsonl(tmp_path / "regen-8.jsonl")[:2]]
    assert held["plain", 8] != held["plain", 12]


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
    for engine in ("vllm", "vllm-served"):
        assert main(["regenerate", "--verifier", "tiny", "--out", str(out), "--engine", engine]) == 2
        assert f"engine={engine!r} cannot write these replies" in capsys.readouterr().err


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


VLLM_N, VLLM_TOKENS, VLLM_PROMPT_TOKENS = 8, 12, 48
KEPT = ("1", "5")  # the rows an interrupted offline run had finished


def _rows(path) -> dict[str, dict]:
    return {r["primary_id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def vllm_rows(smollm2, tmp_path_factory):
    """The same prompts answered by vLLM's CPU build both ways, one engine start each: served (speculators' own
    regenerate-responses asking `vllm serve`), then offline (regenerate_worker.py), resuming what an interrupted
    run left: two finished rows (the served route's) and a line cut mid-write. float32 on both, so that the
    comparison holds on any CPU (in bf16 a different batching may part two routes at a near tie)."""
    from eagle3kit.data.regenerate_vllm import replies, usable

    if why := usable(smollm2.path):
        pytest.skip(why)
    tok = load_tokenizer(smollm2)
    prompts = {i: turns for i, (turns, _) in enumerate(distinct_prompts(tok, None, 0, VLLM_N, VLLM_PROMPT_TOKENS))}
    d = tmp_path_factory.mktemp("vllm-rows")
    served = replies(smollm2.path, prompts, d / "served.jsonl", VLLM_TOKENS, served=True, progress=False,
                     dtype="float32")
    kept = _rows(d / "served.jsonl")
    (d / "offline.jsonl").write_text("".join(json.dumps(kept[k]) + "\n" for k in KEPT) + '{"id": "2_gen0", "prim')
    offline = replies(smollm2.path, prompts, d / "offline.jsonl", VLLM_TOKENS, progress=False, dtype="float32")
    return {"served": (served, d / "served.jsonl"), "offline": (offline, d / "offline.jsonl"), "prompts": prompts}


@pytest.mark.vllm
@pytest.mark.slow
def test_offline_vllm_writes_the_served_routes_rows_token_for_token(vllm_rows):
    """vLLM offline writes, for the prompts it answered, exactly the rows speculators' regenerate-responses writes
    from a vLLM server: the same prompt and completion ids, loss mask, text and keys (only the endpoint differs)."""
    (served, served_path), (offline, offline_path) = vllm_rows["served"], vllm_rows["offline"]
    assert served.start_seconds > 0 and offline.start_seconds > 0 and not served.resumed
    assert set(served.ids) == set(offline.ids) == set(vllm_rows["prompts"])
    a, b = _rows(served_path), _rows(offline_path)
    answered = [k for k in b if k not in KEPT]
    assert len(answered) == VLLM_N - len(KEPT)
    for k in answered:
        want, got = a[k], b[k]
        assert got["input_ids"] == want["input_ids"] and got["loss_mask"] == want["loss_mask"]
        assert sum(got["loss_mask"]) > 0 and got["text"] == want["text"] and got["id"] == want["id"] == f"{k}_gen0"
        assert got.keys() == want.keys() and got["metadata"].keys() == want["metadata"].keys()
        assert got["metadata"]["usage"].keys() == want["metadata"]["usage"].keys()
        assert got["metadata"]["finish_reason"] == want["metadata"]["finish_reason"]
        assert got["metadata"]["endpoint"] == "vllm.LLM (offline)" != want["metadata"]["endpoint"]
    assert served.ids == offline.ids


@pytest.mark.vllm
@pytest.mark.slow
def test_offline_vllm_resumes_an_interrupted_rows_file(vllm_rows):
    """The rows an interrupted run finished are kept as they were (not asked again), the cut line is dropped, each
    prompt ends with exactly one row."""
    offline, path = vllm_rows["offline"]
    lines = path.read_text().splitlines()
    assert offline.resumed == {int(k) for k in KEPT}
    assert lines[: len(KEPT)] == [json.dumps(_rows(vllm_rows["served"][1])[k]) for k in KEPT]
    ids = [json.loads(line)["primary_id"] for line in lines]
    assert sorted(ids) == sorted(map(str, vllm_rows["prompts"]))


@pytest.mark.vllm
@pytest.mark.slow
def test_regenerate_reads_either_vllm_route_into_the_same_file(vllm_rows, smollm2, tmp_path):
    """`regenerate` with engine "vllm" (offline, what auto picks) or "vllm-served", resuming the rows each route
    wrote (no engine starts: every prompt has its row): the same file, whose replies are the decoded completions
    and start like transformers' float32 greedy replies; the rows are cleaned up, a finished file is not redone."""
    from eagle3kit.data.regenerate import choose_engine, vllm_rows as rows_of

    assert choose_engine("auto", smollm2.path, "cpu") == ("vllm", None)
    kwargs = {"n_conversations": VLLM_N, "max_new_tokens": VLLM_TOKENS, "max_prompt_tokens": VLLM_PROMPT_TOKENS,
              "progress": False}
    ref = regenerate(smollm2, tmp_path / "ref.jsonl", engine="transformers", **kwargs)
    settings = json.loads((tmp_path / "ref.jsonl").read_text().splitlines()[0])["settings"]
    tok = load_tokenizer(smollm2)
    files = {}
    for engine, (run, path) in (("vllm", vllm_rows["offline"]), ("vllm-served", vllm_rows["served"])):
        out = tmp_path / f"{engine}.jsonl"
        (tmp_path / f"{engine}.jsonl.partial").write_text(json.dumps({"settings": {**settings, "engine": engine}}))
        rows_of(out).write_text(path.read_text())
        info = regenerate(smollm2, out, engine=engine, **kwargs)
        assert info.engine == engine and info.start_seconds == 0 and info.resumed == VLLM_N
        assert not list(tmp_path.glob(f"{engine}.jsonl.partial*"))
        files[engine] = [turns for turns in conv.read_jsonl(out)]
        want = [tok.decode([t for t in run.ids[i] if t != tok.eos_token_id], skip_special_tokens=True)
                for i in sorted(run.ids)]
        assert [turns[-1]["content"] for turns in files[engine]] == [w for w in want if w.strip()]
        again = regenerate(smollm2, out, engine=engine, **kwargs)
        assert again.seconds == 0 and again.generated_tokens == 0
    assert files["vllm"] == files["vllm-served"] and len(files["vllm"]) == ref.n_conversations
    same_start = sum(a[-1]["content"][:8] == b[-1]["content"][:8]
                     for a, b in zip(files["vllm"], conv.read_jsonl(tmp_path / "ref.jsonl"), strict=True))
    assert same_start >= VLLM_N - 1  # vLLM and transformers, both float32: the same greedy start
