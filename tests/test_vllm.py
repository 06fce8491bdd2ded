"""The exported draft in real vLLM (CPU build, ``.venv-vllm``): it loads, is lossless, a trained one gets τ > 1, the
``vllm serve`` command answers a real OpenAI client and stops without leftovers; bad input gets a clear error.

The vLLM tests are marked ``vllm`` and ``slow`` and skipped when the vLLM environment is absent (``make vllm``).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from eagle3kit.cli import main
from eagle3kit import vllm_env
from eagle3kit.evaluate.vllm import serve
from conftest import SMOLLM2_DATA
from vllm_served import scrape_spec_metrics, served

try:
    VLLM_PYTHON = vllm_env.vllm_python()
    NO_VLLM = ""
except vllm_env.VllmError as e:
    VLLM_PYTHON, NO_VLLM = None, str(e)

needs_vllm = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.skipif(bool(NO_VLLM), reason=NO_VLLM)]
N_PROMPTS, NEW_TOKENS, K = 4, 32, 3
EPOCHS = 5  # of the trained draft's run: 11 packed batches an epoch


def vllm_test(fn):
    for mark in needs_vllm:
        fn = mark(fn)
    return fn


def chat_ids(verifier, texts: list[str]) -> list[list[int]]:
    from eagle3kit.verifier import load_tokenizer

    tok = load_tokenizer(verifier)
    return [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                        return_dict=True)["input_ids"]) for t in texts]


PROMPTS = ["What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis briefly.",
           "List three prime numbers."]


def make_untrained(verifier_name: str, out):
    """An untrained draft (full vocab) built by eagle3kit and saved with speculators' save_pretrained."""
    import torch

    from eagle3kit.draft.config import build_config
    from eagle3kit.draft.model import build_model, save_draft

    build = build_config(verifier=verifier_name, ttt_steps=K, device="cpu")
    torch.manual_seed(0)
    return save_draft(build_model(build).eval(), out)


@pytest.fixture(scope="module")
def untrained(smollm2, tmp_path_factory):
    return make_untrained("smollm2", tmp_path_factory.mktemp("vllm") / "untrained")


# ----------------------------------------------------------------------------------------------- in vLLM
@vllm_test
def test_trained_draft_gets_tau_above_one_in_vllm(smollm2, smollm2_data, tmp_path, capsys, monkeypatch):
    """A tiny-budget draft trained by speculators' own trainer (`eagle3kit rehearse`: SmolLM2, the shared
    ``smollm2_data``'s 24 conversations, 2048-token draft vocab, warm start, 5 epochs of 11 steps) on the YAML
    `eagle3kit launch` wrote: the doctor calls the checkpoint sound; vLLM accepts some of its tokens, its τ is close to
    eagle3kit's own decode loop on the same prompts, the output is unchanged. vLLM runs once, through `eagle3kit
    vllm-check` as a user types it (its --json gives the raw check to the assertions below). That TrainSession
    replays the trainer's run to the same weights (its bf16 export equal to speculators' checkpoint tensor for tensor)
    is tests/test_rehearsal.py's, on the tiny verifier: the same code, without SmolLM2's minute here."""
    import torch

    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import benchmarks
    from eagle3kit.evaluate import round_speed
    from eagle3kit.evaluate.export import reload
    from eagle3kit.evaluate.vllm import compare as vllm_compare
    from eagle3kit.evaluate.acceptance import chat_prompts, continuations, decode, simulate
    from eagle3kit.train.rehearsal.run import rehearse
    from eagle3kit.verifier import load_model, load_tokenizer

    data = smollm2_data  # its held-out conversations are the first N_PROMPTS prompts below
    assert SMOLLM2_DATA["held_out"] == N_PROMPTS
    assert main(["launch", "--data", data, "--out", tmp_path / "launch", "--gpus", 1, "--total-seq-len", 512,
                 "--lr", 2e-3, "--epochs", EPOCHS, "--warmup-steps", 0, "--warm-start-layer", -1, "--attn", "sdpa",
                 "--loss-implementation", "eager", "--hidden-states-dtype", "float32"]) == 0
    run = rehearse(tmp_path / "launch" / "run.yaml", tmp_path / "rehearsal", steps=None,
                   extra={"checkpoint_freq": EPOCHS}, progress=False)
    assert run.ok, run.log_tail()
    capsys.readouterr()
    assert main(["doctor", "--draft", run.checkpoint(), "--data", data, "--long"]) == 0
    assert "[ERROR]" not in (doctored := capsys.readouterr().out) and "[WARNING]" not in doctored, doctored
    draft_dir = run.checkpoint()
    tok = load_tokenizer(smollm2)
    mt_bench = benchmarks.load_set("mt-bench", N_PROMPTS)  # one prompt from each of the first four categories
    prompts = chat_prompts(tok, held_out_conversations(data), N_PROMPTS, 64)
    prompts += [torch.tensor([ids]) for ids in benchmarks.render(tok, mt_bench)]
    monkeypatch.setenv("COLUMNS", "400")  # one line per table row
    capsys.readouterr()
    code = main(["vllm-check", "--draft", draft_dir, "--data", data, "--bench", "held-out", "--bench", "mt-bench",
                 "--n-prompts", N_PROMPTS, "--max-prompt-tokens", 64, "--max-new-tokens", NEW_TOKENS, "--k", K,
                 "--json", tmp_path / "check.json"])
    out = capsys.readouterr().out
    print(out)
    n = len(prompts)
    assert code == 0 and f"{n}/{n}" in out and "acceptance at draft position 3" in out
    assert "(at most k + 1 = 4)" in out and "0.32.0" in out
    side = out[out.index("eagle3kit beside vLLM"):]  # eagle3kit's simulated τ for the same prompts and lengths
    assert "eagle3kit simulated" in side and "τ (tokens per verifier step)" in side
    assert "vllm serve" in out and "--speculative-config" in out
    raw = json.loads((tmp_path / "check.json").read_text())
    check = serve.VllmCheck(**raw["vllm"])
    assert check.tau > 1.0 and check.accepted > 0
    assert check.lossless == n
    # notebook 06's headline: the held-out set pooled (vLLM's aggregate counters), a named set as the lab counts it
    from eagle3kit.evaluate.summary import mean_over_prompts, vllm_headline, vllm_interval
    low, high = vllm_interval(check)
    assert low <= check.tau <= high
    alone, both = vllm_headline(check, 1.0), vllm_headline(check, 1.0, {"mt-bench": check})
    assert alone.count(f"τ {check.tau:.3f} [{low:.3f}, {high:.3f}]") == 1 and "\n" not in alone
    mean, m_low, m_high = mean_over_prompts(check)
    per_prompt = [1 + sum(j * c for j, c in enumerate(h)) / sum(h) for h in check.histograms if sum(h)]
    assert mean == pytest.approx(sum(per_prompt) / len(per_prompt)) and m_low <= mean <= m_high
    assert both.count(f"τ {check.tau:.3f} [{low:.3f}, {high:.3f}]") == 1
    assert f"τ {mean:.3f} [{m_low:.3f}, {m_high:.3f}] on mt-bench's {n} prompts" in both
    assert f"(all rounds pooled: {check.tau:.3f})" in both
    # both sets in one start of each engine: the worker's per-set counters (from vLLM's per-request acceptance) sum
    # to vLLM's own aggregate counters, and each set's table is made of that set's requests
    per_set = raw["vllm_sets"]
    assert list(per_set) == ["held-out", "mt-bench"] and all(c["drafts"] > 0 for c in per_set.values())
    assert [sum(c[f] for c in per_set.values()) for f in ("drafts", "accepted")] == [check.drafts, check.accepted]
    assert [sum(c["accepted_per_pos"][i] for c in per_set.values()) for i in range(K)] == check.accepted_per_pos
    for name, (start, end) in (("held-out", (0, N_PROMPTS)), ("mt-bench", (N_PROMPTS, n))):
        assert f"{name}: τ per category" in out and f"lossless in vLLM: {end - start}/{end - start}" in out
        records = raw["sets"][name]["records"]["vLLM"]
        assert [[r["rounds"], r["accepted"]] for r in records] == [
            [sum(h), sum(j * c for j, c in enumerate(h))] for h in check.histograms[start:end]]
        assert sum(r["rounds"] for r in records) == per_set[name]["drafts"]
        assert sum(r["accepted"] for r in records) == per_set[name]["accepted"]
    assert [r["category"] for r in raw["sets"]["mt-bench"]["records"]["vLLM"]] == [p.category for p in mt_bench]

    model, draft = load_model(smollm2), reload(draft_dir)
    conts = continuations(model, prompts, NEW_TOKENS, progress=False)
    sim = simulate(model, draft, prompts, conts, K, progress=False)
    loop = decode(model, draft, prompts, conts, K, progress=False, baseline=True)
    same = vllm_compare.same_as_greedy(check, conts)
    table = vllm_compare.comparison_table(check, sim, loop, conts)
    assert table.iloc[0].tolist() == [round(check.tau, 3), round(loop.tau, 3), round(sim.tau, 3)]
    print(table.to_string())
    print(f"vLLM check (speculators' trainer, {len(run.metrics())} steps): {check.summary()}; "
          f"eagle3kit tau sim {sim.tau:.3f}, decode loop {loop.tau:.3f}; "
          f"vLLM == eagle3kit greedy on {same}/{len(prompts)}")
    assert abs(check.tau - loop.tau) <= 0.05  # the target (measured: 1.059 vs 1.051)
    assert check.drafts > 0 and len(check.accepted_per_pos) == K and all(0 <= a <= 1 for a in check.acceptance_per_pos)
    assert check.tokens_per_s["draft"] > 0 and check.tokens_per_s["plain"] > 0 and check.vllm_version == "0.32.0"
    assert same >= len(prompts) // 2  # vLLM's greedy equals transformers' except at floating-point near ties

    # the step timer inside vLLM's worker: each decode round of the full batch ran k draft forwards and the verifier
    # over k + 1 tokens a sequence; the plain run's steps read one token a sequence and never drafted
    drafted, plain = round_speed.step_costs(check.steps["draft"], K), round_speed.step_costs(check.steps["plain"])
    assert drafted.batch == plain.batch == len(prompts) and drafted.draft_forwards == K
    assert drafted.tokens == len(prompts) * (K + 1) and plain.tokens == len(prompts) and plain.draft_forwards == 0
    assert 0 < drafted.verifier_s < drafted.step_s and 0 < drafted.draft_s and 0 < plain.verifier_s <= plain.step_s
    cpu = round_speed.cpu_prediction(check.steps, K, check.acceptance_per_pos, check.tokens_per_s, check.seconds)
    assert cpu.tau == pytest.approx(check.tau) and cpu.predicted > 0 and cpu.predicted_tokens_per_s > 0
    assert all(len(check.load[r]) == 2 for r in ("draft", "plain"))
    rows = vllm_compare.speed_rows(check, loop, NEW_TOKENS)
    assert list(rows["batch"]) == [len(prompts), 1, 1]  # vLLM beside vLLM (its batch, then batch 1), the decode loop
    assert check.alone["draft"]["prompts"] == check.alone["plain"]["prompts"] == serve.ALONE  # beside greedy alone
    assert all(check.alone[r]["tokens"] > 0 for r in ("draft", "plain"))
    print(cpu.table().to_string())
    print(rows.to_string())


@vllm_test
def test_a_draft_vllm_cannot_load_fails_the_check_without_waiting_for_the_other_engine(untrained, smollm2, tmp_path):
    """The two engines start together and wait for each other before generating: when the draft's engine dies (here
    its weights file is cut short), the check stops the other one and names the failure at once; it does not sit at
    the barrier until the timeout."""
    import shutil

    broken = Path(shutil.copytree(untrained, tmp_path / "broken"))
    weights = next(broken.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:4096])
    with pytest.raises(serve.VllmError, match="vLLM failed") as err:
        serve.check_draft(broken, smollm2.path, chat_ids(smollm2, PROMPTS[:1]), 8, K, timeout=600)
    assert "did not finish" not in str(err.value)


@vllm_test
def test_served_command_answers_an_openai_client_and_stops_clean(untrained, smollm2):
    import openai

    argv = serve.serve_command(untrained, smollm2.path, K, port=8000)
    assert argv[:3] == ["vllm", "serve", str(smollm2.path)]
    assert {"--enforce-eager", "--host"} <= set(argv) and argv[argv.index("--dtype") + 1] == "float32"
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {
        "method": "eagle3", "model": str(untrained.resolve()), "num_speculative_tokens": K}
    with served(untrained, smollm2.path, K, short=True) as url:  # served as the README serves it: `vllm serve DRAFT`
        children = psutil.Process().children(recursive=True)
        assert children
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none")
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(model=model, temperature=0, max_tokens=16,
                                               messages=[{"role": "user", "content": PROMPTS[0]}])
        assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
            metrics = scrape_spec_metrics(r.read().decode())
        port = int(url.rsplit(":", 1)[1])
    print(f"served: {metrics}")
    assert metrics["drafts"] > 0 and metrics["draft_tokens"] == K * metrics["drafts"]
    assert len(metrics["accepted_per_pos"]) == K and metrics["accepted"] == sum(metrics["accepted_per_pos"])
    time.sleep(0.5)
    left = [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [p.cmdline() for p in left]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


# ----------------------------------------------------------------------------------------------- bad input
def test_the_env_beside_the_python_env_is_found_from_any_working_dir(tmp_path, monkeypatch):
    """Notebooks run with their own folder as the working dir: the environment ``make vllm`` made beside ``.venv``
    must still be the one found (a move of this module once made it look in notebooks/)."""
    import sys

    from eagle3kit.vllm_env import VENV_VAR, vllm_env_dir

    monkeypatch.delenv(VENV_VAR, raising=False)
    monkeypatch.chdir(tmp_path)
    beside = Path(sys.prefix).parent / ".venv-vllm"
    assert vllm_env_dir() == (beside if beside.exists() else tmp_path / ".venv-vllm")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "elsewhere" / ".venv"))
    assert vllm_env_dir() == tmp_path / ".venv-vllm"
    (tmp_path / "elsewhere" / ".venv-vllm").mkdir(parents=True)
    assert vllm_env_dir() == tmp_path / "elsewhere" / ".venv-vllm"


def test_missing_vllm_env_names_the_command_that_makes_it(tmp_path, monkeypatch):
    monkeypatch.setenv(vllm_env.VENV_VAR, str(tmp_path))
    with pytest.raises(vllm_env.VllmNotInstalled, match="make vllm"):
        vllm_env.vllm_python()
    with pytest.raises(vllm_env.VllmError, match="make vllm"), served(tmp_path, tmp_path):
        pass


def test_draft_dir_without_config_json(tmp_path):
    with pytest.raises(serve.VllmInputError, match="no config.json"):
        serve.check_draft(tmp_path, None, [[1, 2, 3]])


def test_draft_for_another_verifier_and_head_dim_vllm_cpu_refuses(tiny_verifier, tmp_path):
    draft = make_untrained("tiny", tmp_path / "tiny-draft")
    with pytest.raises(serve.VllmInputError, match="head_dim=16"):
        serve.check_inputs(draft)
    other = tmp_path / "other-verifier"
    other.mkdir()
    cfg = json.loads((Path(tiny_verifier.path) / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "hidden_size": 576, "num_attention_heads": 9}))
    with pytest.raises(serve.VllmInputError, match="made for the verifier"):
        serve.check_draft(draft, other, [[1, 2, 3]])


def test_install_is_idempotent_once_marked(tmp_path):
    (tmp_path / vllm_env.MARKER).write_text("{}")
    t0 = time.perf_counter()
    assert vllm_env.install_vllm_env(tmp_path) == tmp_path
    assert time.perf_counter() - t0 < 1.0 and not (tmp_path / "bin").exists()


def test_each_sets_counters_are_summed_from_its_requests_histograms():
    """The worker's per-set counters (vLLM's per-request histograms: h[j] = rounds with j draft tokens accepted)."""
    from eagle3kit.evaluate.vllm import worker

    counters = worker.set_counters([[1, 2, 0, 1], [3, 0, 0, 0]], 3)
    assert counters == {"drafts": 7, "draft_tokens": 21, "accepted": 5, "accepted_per_pos": [3, 1, 1]}
    assert worker.set_counters([], 3) == {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": [0] * 3}
    assert list(worker.named_sets({"sets": {"b": [[1]], "a": [[2]]}})) == ["b", "a"]  # in the order given
    assert worker.named_sets({"prompts": [[1]]}) == {"all": [[1]]}


def test_an_empty_prompt_set_is_refused_before_vllm_starts(smollm2, tmp_path):
    from eagle3kit.draft.config import build_config, save_config

    draft = save_config(build_config(verifier="smollm2", ttt_steps=2, device="cpu"), tmp_path / "draft")
    with pytest.raises(serve.VllmInputError, match="non-empty"):
        serve.check_sets(draft, None, {"held-out": [[1, 2]], "mt-bench": []})
