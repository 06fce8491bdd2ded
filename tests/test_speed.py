"""From τ to speed: the speedup arithmetic on hand-computed cases, the step records vLLM's worker writes turned into
step costs, the rule that tokens/s stand side by side only when measured the same way, and the GPU model (bytes,
FLOPs, overheads derived from a published vLLM sweep) in `eagle3kit plan`. No vLLM: the engine run that fills the
step records is checked in tests/test_vllm.py."""

from __future__ import annotations

import pytest

from eagle3kit.cli import main
from eagle3kit.evaluate import round_speed
from eagle3kit.evaluate.acceptance import DecodeRun
from eagle3kit.evaluate.vllm.compare import ALONE_ROW, DECODE_LOOP, speed_rows
from eagle3kit.evaluate.vllm.serve import VllmCheck
from eagle3kit.plan import serving_speed
from eagle3kit.plan.gpus import GPU
from eagle3kit.plan.shapes import VerifierShape
from eagle3kit.plan.published_speedups import published_points, vllm_20780
from eagle3kit.runner import CLOSING, NotebookResult, closing_lines, summary_table


# ----------------------------------------------------------------------------------------------- arithmetic
def test_speedup_arithmetic_by_hand():
    # a round: verifier over k + 1 tokens 12 ms + 3 draft steps of 2 ms + 2 ms bookkeeping = 20 ms for τ = 2 tokens;
    # a plain step 10 ms for 1 token: 2 x 10 / 20 = 1.0, and the break-even τ is 20 / 10 = 2
    assert round_speed.round_seconds(3, 0.012, 0.002, 0.002) == pytest.approx(0.020)
    assert round_speed.speedup(2.0, 0.010, 0.012, 0.002, 3, 0.002) == pytest.approx(1.0)
    assert round_speed.break_even_tau(0.010, 0.012, 0.002, 3, 0.002) == pytest.approx(2.0)
    assert round_speed.speedup(3.0, 0.010, 0.010, 0.001, 2) == pytest.approx(3 * 10 / 12)
    assert round_speed.tau_from_positions([0.8, 0.5, 0.2]) == pytest.approx(2.5)  # 1 + Σ cumulative acceptance


def steps(reqs: int, tokens: int, step: float, verifier: float, draft: float = 0.0, forwards: int = 0) -> dict:
    return {"reqs": reqs, "tokens": tokens, "step_s": step, "verifier_s": verifier, "draft_s": draft,
            "draft_forwards": forwards}


def test_step_costs_take_medians_over_full_batch_decode_steps():
    records = [steps(4, 400, 1.0, 0.9),  # prompt tokens: not a decode step
               steps(4, 4, 0.10, 0.08), steps(4, 4, 0.12, 0.09), steps(4, 4, 0.30, 0.10),
               steps(2, 2, 0.05, 0.04)]  # the tail, two sequences left: not the full batch
    c = round_speed.step_costs(records)
    assert (c.batch, c.tokens, c.n_steps) == (4, 4, 3)
    assert (c.step_s, c.verifier_s, c.draft_s) == (0.12, 0.09, 0.0)
    assert c.other_s == pytest.approx(0.03)
    drafted = round_speed.step_costs([steps(4, 16, 0.5, 0.3, 0.12, 3), steps(4, 400, 2.0, 1.8, 0.1, 3)], k=3)
    assert (drafted.tokens, drafted.n_steps, drafted.draft_step_s) == (16, 1, pytest.approx(0.04))
    with pytest.raises(ValueError, match="no decode steps"):
        round_speed.step_costs([steps(4, 400, 1.0, 0.9)])


def test_cpu_prediction_by_hand():
    plain = [steps(4, 400, 1.0, 1.0)] + [steps(4, 4, 0.10, 0.09)] * 10  # 10 decode steps: 1.0 s; 1 s of prompt
    draft = [steps(4, 16, 0.25, 0.15, 0.06, 3)] * 5  # verifier 150 ms, 3 draft steps of 20 ms, 40 ms other
    pred = round_speed.cpu_prediction({"plain": plain, "draft": draft}, 3, [0.5, 0.25, 0.25],
                                {"plain": 20.0, "draft": 16.0}, {"plain": 2.0, "draft": 2.5})
    assert pred.tau == pytest.approx(2.0)
    assert pred.predicted == pytest.approx(2.0 * 0.10 / 0.25)  # τ t_plain / (150 + 3 x 20 + 40 ms)
    assert pred.break_even == pytest.approx(2.5)
    assert pred.verify_ratio == pytest.approx(0.15 / 0.09)
    # 40 tokens in 2 s plain: 1 s of prompt + 1 s of decode steps / 0.8 = 2.25 s with the draft
    assert pred.predicted_tokens_per_s == pytest.approx(40 / 2.25)
    assert pred.measured == pytest.approx(0.8)
    why = pred.why(1.5, "a GPU", {"break-even τ": 1.02, "published": 1.34, "τ": 1.40})
    assert "above τ 2.50" in why and "a GPU (break-even τ 1.50)" in why
    # the bench's batch-1 row is its own draft's, at its own τ: never "the same draft" as the one checked
    assert "bench/speedup.py's draft, at τ 1.40, measured 1.34x plain speed there; break-even τ 1.02" in why
    assert "the same draft" not in why
    # a run that measured batch 1 itself says its own number, never the bench's row beside it
    own = pred.why(1.5, "a GPU", {"break-even τ": 1.02, "published": 1.34, "τ": 1.40}, measured_alone=(0.92, 4))
    assert "this run measured 0.92x plain speed (4 prompts, a first look with no interval)" in own
    assert "bench/speedup.py" not in own and "a GPU (break-even τ 1.50)" in own
    assert set(pred.table()["kind"]) == {"measured", "derived"}
    assert type(round_speed.plot_round(pred)).__name__ == "Figure"


# ----------------------------------------------------------------------------------------------- equal footing
def test_the_speed_table_refuses_tokens_per_s_measured_two_ways():
    vllm = round_speed.Measured(120.0, "vLLM 0.32 (CPU build)", 16, 16, 64)
    batched = round_speed.Measured(137.0, "transformers", 16, 16, 64)
    with pytest.raises(ValueError, match="not measured the same way"):
        round_speed.speed_table({"mixed": (round_speed.Measured(19.0, "transformers", 1, 4, 64), batched)})
    table = round_speed.speed_table({"vLLM": (vllm, round_speed.Measured(186.0, "vLLM 0.32 (CPU build)", 16, 16, 64))})
    assert table.loc[0, "speedup"] == pytest.approx(120 / 186, abs=1e-3)


def test_the_notebooks_speed_rows_pair_each_engine_with_itself():
    check = VllmCheck(3, 10, 4, [3, 1, 0], [[1]] * 16, [[1]] * 16, {"draft": 8.0, "plain": 5.0},
                      {"draft": 123.0, "plain": 186.0}, "0.32.0")
    loop = DecodeRun(tau=1.3, rounds=40, tokens=60, lossless=4, prompts=4, seconds=3.0, plain_seconds=1.5)
    table = speed_rows(check, loop, 64)
    assert list(table["measurement"]) == ["vLLM", "decode loop"]
    assert list(table["batch"]) == [16, 1] and table.loc[1, "engine"] == DECODE_LOOP
    assert list(table["tokens/s without it"]) == [186.0, 40.0]  # the loop beside plain greedy one at a time
    no_baseline = DecodeRun(1.3, 40, 60, 4, 4, 3.0)
    assert list(speed_rows(None, no_baseline, 64)["measurement"]) == []  # never beside another kind
    # the first prompts again one at a time, on the same warm engines: a batch-1 row beside the batch's
    check.alone = {"draft": {"prompts": 4, "tokens": 256, "seconds": 4.0}, "plain": {"prompts": 4, "tokens": 256,
                                                                                  "seconds": 3.2}}
    table = speed_rows(check, loop, 64)
    assert list(table["measurement"]) == ["vLLM", ALONE_ROW, "decode loop"] and list(table["batch"]) == [16, 1, 1]
    assert table.loc[1, "tokens/s with the draft"] == 64.0 and table.loc[1, "speedup"] == 0.8
    assert check.summary()["tokens_per_s_alone_draft"] == 64.0
    check.alone = {"draft": check.alone["draft"]}  # one run's timing alone: no row (never beside another kind)
    assert ALONE_ROW not in list(speed_rows(check, loop, 64)["measurement"]) and check.tokens_per_s_alone is None


def test_a_decode_loop_on_fewer_prompts_than_the_set_is_a_check_not_a_tau_or_a_speed():
    """Notebook 06 runs the decode loop on one of 16 held-out prompts: its τ and speed stay out of the tables that
    set engines side by side (only its lossless count is shown); on every prompt they are in."""
    from eagle3kit.evaluate.acceptance import Acceptance, summary_table
    from eagle3kit.evaluate.vllm.compare import comparison_table

    check = VllmCheck(3, 10, 4, [3, 1, 0], [[1]] * 16, [[1]] * 16, {"draft": 8.0, "plain": 5.0},
                      {"draft": 123.0, "plain": 186.0}, "0.32.0")
    one, every = (DecodeRun(3.0, 4, 12, n, n, 1.0, 0.5) for n in (1, 16))
    assert list(speed_rows(check, one, 64, prompts=16)["measurement"]) == ["vLLM"]
    assert list(speed_rows(check, every, 64, prompts=16)["measurement"]) == ["vLLM", "decode loop"]
    sim = Acceptance(3, [1, 0, 2], [1, 0], 5)
    conts = [[1, 2]] * 16
    assert "eagle3kit decode loop" not in comparison_table(check, sim, one, conts).columns
    assert "eagle3kit decode loop" in comparison_table(check, sim, every, conts).columns
    partial = summary_table({"trained": sim}, {"trained": one}, prompts=16)
    assert "tau_decode" not in partial.columns and partial.loc[0, "lossless"] == "1/1"
    assert summary_table({"trained": sim}, {"trained": every}, prompts=16).loc[0, "tau_decode"] == 3.0


# ----------------------------------------------------------------------------------------------- the GPU model
def test_a_forward_pass_by_hand():
    gpu = GPU("test", 80, 100, "hand-made", bandwidth_tbs=1.0)
    v = VerifierShape(hidden_size=1000, vocab_size=10, num_layers=10, params=10**9, active_params=10**9, q_dim=1000,
                      kv_per_token=100)
    hw = serving_speed.Hardware(gpu, tp=1, u_bw=0.5, u_flops=0.5)
    # weights 2e9 bytes + KV 2 x 2 seqs x 100 tokens x 10 layers x 100 = 4e5 bytes at 0.5 TB/s = 4.0008 ms; FLOPs
    # 2e9 x 2 tokens + 4 x 10 x 1000 x 100 x 2 = 4.008e9 at 50 TFLOPS = 0.08 ms: memory-bound, + 1 ms overhead
    assert serving_speed.verifier_seconds(v, hw, 2, 1, 100, 0.001) == pytest.approx(0.0050008)
    # 2 x 1000 tokens a sequence: FLOPs 4e12 + 8e9 = 80.16 ms at 50 TFLOPS: compute-bound
    assert serving_speed.verifier_seconds(v, hw, 2, 1000, 100, 0.0) == pytest.approx(0.08016)
    split = serving_speed.Hardware(gpu, tp=2, u_bw=0.5)  # tensor parallel over 2 GPUs: each reads half
    assert serving_speed.verifier_seconds(v, split, 2, 1, 100, 0.0) == pytest.approx(0.0020004)


def test_overheads_derived_from_the_published_vllm_sweep_reproduce_it():
    """The verifier, draft and round overheads come from vllm issue 20780 alone; with them the model gives back each
    of its six (τ, speedup) points, and SGLang's single-GPU point (another engine, its own plain step) within 20%."""
    o = serving_speed.vllm_overheads()
    assert 0 < o.draft_s < o.verifier_s < 2e-3 and 0 < o.round_s < 2e-3 and "20780" in o.source
    checks = serving_speed.speed_checks()
    assert len(checks) == len(published_points()) and len(vllm_20780()) == 6
    assert (abs(checks["ratio"].iloc[:6] - 1) < 0.05).all()
    assert checks.set_index("point").loc["SGLang, Llama-3.1-8B, tree, steps 8", "within 20%"]


def test_plan_predicts_the_speedup_with_labelled_numbers(capsys):
    p = serving_speed.predict("llama-3.1-8b", "H100-80GB", 1, 3, acceptance=[0.8, 0.6, 0.4])
    assert p.tau == pytest.approx(2.8) and p.verify_s == pytest.approx(p.plain_s, rel=0.01)  # memory-bound at batch 1
    assert p.speedup == pytest.approx(2.8 * p.plain_s / (p.verify_s + 3 * p.draft_s + p.overheads.round_s))
    assert 1 < p.break_even < p.tau < 4 and p.speedup < p.best
    big = serving_speed.predict("llama-3.1-8b", "H100-80GB", 256, 3, 2.8)
    assert big.verify_s > 1.5 * big.plain_s and big.speedup < p.speedup  # compute-bound: 4 tokens a sequence cost more
    assert main(["plan", "--verifier", "llama-3.1-8b", "--samples", "10", "--tau", "2.8", "--serve-k", "3"]) == 0
    out = capsys.readouterr().out
    assert "expected speedup at τ 2.80" in out and "break-even τ at k=3" in out and "20780" in out


def test_the_run_summary_ends_with_the_notebooks_closing_lines():
    results = [NotebookResult("05_x.ipynb", "ok", 1.0, summary={"tau": 1.0}),
               NotebookResult("06_x.ipynb", "ok", 1.0, summary={"k": 3, CLOSING: ["measured here", "predicted there"]})]
    assert closing_lines(results) == ["measured here", "predicted there"]
    assert list(summary_table(results)["headline"]) == ["tau=1.0", "k=3"]  # the lines close the summary, once
