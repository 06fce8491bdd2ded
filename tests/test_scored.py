"""What notebook 06 keeps for 07 reads back as it was written: prompts, ids, continuations, records, vLLM's counts."""

from __future__ import annotations

from eagle3kit.evaluate.benchmarks import load_set
from eagle3kit.evaluate.scored import ScoredSet, from_check, read_scored, write_scored
from eagle3kit.evaluate.scores import PromptScore


def test_a_scored_run_reads_back_as_written(tmp_path):
    prompts = load_set("mt-bench", 2)
    sets = [ScoredSet("mt-bench", prompts, [[1, 2, 3], [4, 5]], [[7, 8], [9]], "vLLM (float32, without the draft)",
                      [PromptScore(p.id, p.category, 3, 2) for p in prompts], [[1, 2], [0, 1]], [[7, 8], [9]]),
            ScoredSet("held-out", prompts[:1], [[1]], [[2, 3]], "transformers (float32)")]
    write_scored(tmp_path / "scored.json", sets, k=3, steps=56)
    back, about = read_scored(tmp_path / "scored.json")
    assert about == {"k": 3, "steps": 56}
    assert list(back) == ["mt-bench", "held-out"]
    assert back["mt-bench"] == sets[0] and back["held-out"] == sets[1]
    assert back["mt-bench"].vllm == ([[1, 2], [0, 1]], [[7, 8], [9]]) and back["held-out"].vllm is None
    assert from_check(None) == {}


def test_the_pooled_tau_has_an_interval_from_resampling_its_prompts():
    """vLLM's aggregate τ pools every round; its interval resamples the prompts: it holds the pooled τ, widens when
    the prompts disagree, and is undefined for one prompt."""
    from eagle3kit.evaluate.scores import pooled_interval

    rounds, accepted = [50, 40, 60, 45], [10, 30, 12, 20]
    pooled = 1 + sum(accepted) / sum(rounds)
    low, high = pooled_interval(rounds, accepted)
    assert low < pooled < high
    same = pooled_interval([50] * 4, [20] * 4)
    assert same[0] == same[1] == 1.4  # prompts that agree: no spread
    assert all(x != x for x in pooled_interval([50], [20]))  # nan: one prompt has no interval
