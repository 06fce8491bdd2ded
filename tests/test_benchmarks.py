"""Named benchmarks: the sets read from their asset packages, rendered with the verifier's chat template, scored per
category (mean over prompts, bootstrap interval, pooled) for a trained tiny draft through the real CLI, and the table
recomputed from the per-prompt records."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from matplotlib.figure import Figure

from eagle3kit.cli import main
from eagle3kit.evaluate import benchmarks, scores
from eagle3kit.evaluate.benchmarks import HELD_OUT, BenchPrompt
from eagle3kit.evaluate.scores import PromptScore
from eagle3kit.verifier import load_model, load_tokenizer

EXPECTED = {"mt-bench": (80, {"writing": 10, "roleplay": 10, "reasoning": 10, "math": 10, "coding": 10,
                              "extraction": 10, "stem": 10, "humanities": 10}),
            "mt-bench-2": (80, None), "humaneval": (164, {"code": 164}),
            "math": (270, {"Number-Theory": 80, "Inequality": 50, "Polynomial": 50, "Sequence": 50,
                           "Combinatorics": 40})}


@pytest.mark.parametrize("name", list(benchmarks.SETS))
def test_each_set_is_read_whole_from_its_package(name):
    prompts = benchmarks.load_set(name)
    total, counts = EXPECTED[name]
    assert len(prompts) == total and len({p.id for p in prompts}) == total
    if counts:
        assert {c: sum(p.category == c for p in prompts) for c in counts} == counts
    assert all(p.messages[-1]["role"] == "user" and p.messages[-1]["content"].strip() for p in prompts)
    assert benchmarks.SETS[name].source().is_file()


def test_a_short_run_takes_the_categories_in_turn():
    eight = benchmarks.load_set("mt-bench", 8)
    assert [p.category for p in eight] == list(EXPECTED["mt-bench"][1])
    assert len(benchmarks.load_set("math", 7)) == 7 and len(benchmarks.categories(benchmarks.load_set("math", 7))) == 5
    with pytest.raises(benchmarks.UnknownBenchmark, match="--data DIR"):
        benchmarks.load_set(HELD_OUT)


def test_prompts_go_through_the_verifier_chat_template(tiny_verifier):
    tok = load_tokenizer(tiny_verifier)
    code = benchmarks.load_set("humaneval", 1)[0]
    text = tok.decode(benchmarks.render(tok, [code])[0])
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert "```python\nfrom typing import List" in text and "def has_close_elements" in text
    first = benchmarks.load_set("mt-bench", 1)[0]
    assert first.messages[0]["content"] in tok.decode(benchmarks.render(tok, [first])[0])


def test_second_turns_are_asked_on_the_verifier_own_first_answer(tiny_verifier):
    tok, model = load_tokenizer(tiny_verifier), load_model(tiny_verifier)
    second = benchmarks.load_set("mt-bench-2", 2)
    with pytest.raises(ValueError, match="verifier model"):
        benchmarks.render(tok, second)
    answered = benchmarks.answer_first_turns(model, tok, second, max_new_tokens=6)
    for before, after in zip(second, answered, strict=True):
        assert [m["role"] for m in after.messages] == ["user", "assistant", "user"] and after.follow_up is None
        assert after.messages[2]["content"] == before.follow_up
        reply = tok(after.messages[1]["content"], add_special_tokens=False)["input_ids"]
        assert 0 < len(reply) <= 8  # six greedy tokens, re-tokenised from their text
    ids = benchmarks.render(tok, second, model, first_answer_tokens=6)
    assert ids == [benchmarks.template_ids(tok, p.messages) for p in answered]


def test_scores_table_is_the_mean_over_prompts_with_a_bootstrap_interval():
    records = [PromptScore("a", "x", 4, 4), PromptScore("b", "x", 2, 0), PromptScore("c", "y", 5, 5),
               PromptScore("d", "y", 0, 0)]  # d: no round, left out
    table = scores.summarise(records)
    assert list(table.index) == ["x", "y", scores.OVERALL]
    assert table.loc["x", "tau"] == pytest.approx((2.0 + 1.0) / 2)
    assert table.loc["x", "pooled"] == pytest.approx(1 + 4 / 6)
    assert table.loc["y", "prompts"] == 1 and table.loc["y", "unscored"] == 1 and np.isnan(table.loc["y", "low"])
    assert table.loc[scores.OVERALL, "tau"] == pytest.approx((2 + 1 + 2) / 3)
    low, high = scores.interval(np.array([1.0, 1.2, 1.4, 1.6, 2.0]))
    assert low < 1.44 < high and scores.interval(np.array([1.3] * 5)) == (1.3, 1.3)
    assert scores.interval(np.array([1.0, 2.0, 1.5]), seed=3) == scores.interval(np.array([1.0, 2.0, 1.5]), seed=3)


def test_vllm_histograms_become_records():
    prompts = [BenchPrompt("p", "c", ({"role": "user", "content": "x"},))]
    (r,) = scores.from_vllm(prompts, [[3, 1, 0, 2]])  # 6 rounds: 3 accepted none, 1 one, 2 all three
    assert (r.rounds, r.accepted) == (6, 7) and r.tau == pytest.approx(1 + 7 / 6)


def test_half_split_and_ordering_and_plot():
    rng = np.random.default_rng(0)
    records = [PromptScore(f"{c}{i}", c, 10, int(rng.integers(0, 20))) for c in ("writing", "roleplay", "coding",
                                                                                "math") for i in range(10)]
    spread = scores.half_split(records, splits=200)
    assert spread["prompts"] == 40 and 0 <= spread["median"] <= spread["p95"]
    table = scores.score_table({"simulated": records, "vLLM": records})
    assert "overlap, so no ordering is claimed" in scores.ordering(table, "simulated")  # the same noise everywhere
    assert scores.ordering(table.drop(index="math"), "vLLM") is None
    apart = [PromptScore(f"{c}{i}", c, 10, (18 if c in ("coding", "math") else 2) + i % 2)
             for c in ("writing", "roleplay", "coding", "math") for i in range(10)]  # code and math far above
    assert "the intervals separate, the published" in scores.ordering(scores.score_table({"s": apart}), "s")
    one = [PromptScore(c, c, 10, 5) for c in ("writing", "roleplay", "coding", "math")]  # one prompt: no interval
    assert "no ordering is claimed" in scores.ordering(scores.score_table({"s": one}), "s")
    fig = scores.plot_scores(table)
    assert isinstance(fig, Figure) and len(fig.axes[0].patches) == 2 * len(table)
    shown = scores.display_table(table)
    assert shown.columns.tolist() == ["prompts", "τ simulated [95% CI]", "pooled simulated", "τ vLLM [95% CI]",
                                      "pooled vLLM"]


@pytest.fixture(scope="module")
def trained_tiny_draft(tiny_data, tmp_path_factory):
    """A tiny draft trained a few steps on the tiny verifier's data, exported as speculators writes it."""
    from eagle3kit.train.session import TrainSession

    session = TrainSession(tiny_data, progress=False, total_seq_len=512, max_steps=4, lr=3e-3)
    session.run(4)
    return session.export(tmp_path_factory.mktemp("bench") / "draft")


@pytest.mark.parametrize("name", list(benchmarks.SETS))
def test_cli_scores_a_trained_draft_per_category_and_the_json_recomputes(name, trained_tiny_draft, tmp_path,
                                                                          capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    out = tmp_path / "scores.json"
    code = main(["evaluate", "--draft", str(trained_tiny_draft), "--bench", name, "--n-prompts", "5",
                 "--max-new-tokens", "6", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and f"{name}: τ per category" in text and "k = 3, temperature 0" in text
    raw = json.loads(out.read_text())
    assert raw["k"] == 3 and raw["temperature"] == 0 and raw["max_new_tokens"] == 6
    (records,) = scores.read_sets(out)[name].values()
    assert len(records) == 5 and [r.category for r in records] == [p.category for p in benchmarks.load_set(name, 5)]
    table = raw["sets"][name]["table"]
    for row in table:  # every number of the table from the records
        rs = [r for r in records if r.rounds and (row["category"] == scores.OVERALL or r.category == row["category"])]
        assert row["prompts"] == len(rs)
        assert row["draft tau"] == pytest.approx(np.mean([r.tau for r in rs]))
        assert row["draft pooled"] == pytest.approx(1 + sum(r.accepted for r in rs) / sum(r.rounds for r in rs))
        assert f"{row['draft tau']:.3f}" in text


def test_cli_held_out_set_and_refusals(trained_tiny_draft, tiny_data, capsys):
    assert main(["evaluate", "--draft", str(trained_tiny_draft), "--bench", HELD_OUT, "--data", str(tiny_data),
                 "--max-new-tokens", "4"]) == 0
    assert f"{HELD_OUT}: τ per category" in capsys.readouterr().out
    for argv, said in ((["--bench", "mt-bench", "--prompt", "hi"], "--prompt does nothing"),
                       (["--bench", HELD_OUT], "pass --data DIR"),
                       (["--bench", "mt-bench", "--data", str(tiny_data)], "--data does nothing")):
        assert main(["evaluate", "--draft", str(trained_tiny_draft), *argv]) == 2
        assert said in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--draft", str(trained_tiny_draft), "--bench", "gsm8k"])
    assert exc.value.code == 2


def test_doctor_why_tau_measures_on_a_named_set_per_category(trained_tiny_draft, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    code = main(["doctor", "--draft", str(trained_tiny_draft), "--why-tau", "--bench", "mt-bench"])
    out = capsys.readouterr().out
    assert code in (0, 1)  # 1: the doctor judged four steps of training too few to tell from an initialisation
    assert "mt-bench, τ per category:" in out and "On mt-bench (16 prompts, whole" in out
    assert all(c in out for c in EXPECTED["mt-bench"][1]) and "overall" in out
    assert main(["doctor", "--draft", str(trained_tiny_draft), "--bench", "mt-bench"]) == 2
    assert "add --why-tau" in capsys.readouterr().err


def test_vllm_alone_needs_vllm():
    """Notebook 06 may keep vLLM's per-request τ alone (bench_simulated=False); without vLLM nothing would score."""
    from eagle3kit.evaluate import summary

    with pytest.raises(ValueError, match="needs vLLM's per-request counters"):
        summary.score_named(None, None, None, benchmarks.load_set("mt-bench", 2), 8, 3, None, simulate=False)


def test_halves_of_a_set_with_one_prompt_a_category():
    """The ci preset scores one MT-bench prompt a category: the halves take the categories' leftovers together."""
    one_each = [scores.PromptScore(f"mt-bench/{i}", f"c{i}", 10, i) for i in range(8)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        split = scores.half_split(one_each)
        assert split["prompts"] == 8 and 0 < split["median"] <= split["p95"] <= 1.0
        assert np.isnan(scores.half_split(one_each[:1])["median"])  # one prompt: no halves, no warning
