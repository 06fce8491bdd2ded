"""`eagle3kit plan`: the published points reproduced by the pure formulas, the plan table, CLI and figure."""

from __future__ import annotations

import matplotlib.figure
import pytest

from eagle3kit.cli import main
from eagle3kit.errors import UserError
from eagle3kit.plan import gpu_plan, plan_figure, plan_run, published_checks
from eagle3kit.plan.gpus import resolve_gpu
from eagle3kit.plan.memory import loss_bytes
from eagle3kit.plan.published_costs import EAGLE_BYTES, TOLERANCE, eagle_bytes


def test_published_points_are_reproduced():
    checks = published_checks()
    assert len(checks) == 4
    for check in checks:
        assert check.within, (check.name, check.ratio)


def test_published_check_can_fail():
    """A token count far from the assumed one misses EAGLE's 740 GB: the tolerance is not vacuous."""
    assert abs(eagle_bytes(2048) / EAGLE_BYTES - 1) > TOLERANCE


def test_fused_loss_is_a_tenth_of_eager_at_pr951_size():
    eager, fused = (loss_bytes(8192, 151936, impl, 2, with_inputs=False) for impl in ("eager", "fused"))
    assert eager == 10 * fused


def test_plan_for_each_preset_has_every_part():
    for verifier in ("llama-3.1-8b", "qwen3-8b", "kimi-k2.5"):
        p = plan_run(verifier, samples=1000, tokens_per_sample=512)
        table = p.table()
        assert set(table["kind"]) <= {"counted", "derived", "assumed", "counted (data directory)"}
        assert p.memory_total > 0 and p.largest_seq_len > 0 and p.train_seconds > 0 and p.data_seconds > 0
        assert any("activations per TTT step" in item for item in table["item"])
        assert p.commands[-1].startswith("torchrun ")
    kimi = plan_run("kimi-k2.5", samples=1000, tokens_per_sample=512)
    assert kimi.vshape.active_params < kimi.vshape.params / 10  # a MoE: 8 of 384 experts per token


def test_a_verifier_that_needs_many_gpus_is_served_on_them_and_not_said_to_fit_one():
    kimi, llama = (plan_run(v, samples=1000, tokens_per_sample=512) for v in ("kimi-k2.5", "llama-3.1-8b"))
    assert kimi.verifier_holders > 1 and kimi.speed.tp == gpu_plan.tensor_parallel(kimi.verifier_holders)
    assert kimi.speed.tp & (kimi.speed.tp - 1) == 0 and kimi.speed.tp >= kimi.verifier_holders  # a real TP degree
    assert [gpu_plan.tensor_parallel(n) for n in (1, 2, 3, 8, 29)] == [1, 2, 4, 8, 32]
    assert llama.verifier_holders == 1 and llama.speed.tp == 1
    served, data = "GPUs the verifier is served on (split tensor parallel)", "data generation (`eagle3kit data`"
    for p in (kimi, llama):
        rows = p.table().set_index("item")["value"]
        assert rows[served] == f"{p.speed.tp} x H100-80GB"
        on_one = next(v for item, v in rows.items() if item.startswith(data))
        assert ("not on one device" in on_one) == (p is kimi)
    assert plan_run("kimi-k2.5", samples=1000, serve_gpus=32).speed.tp == 32


def test_plan_reads_token_stats_from_a_data_directory(tiny_data):
    from eagle3kit.plan.disk import data_token_stats

    p = plan_run("tiny", samples=100, data=str(tiny_data), draft_vocab_size=None, total_seq_len=256)
    assert p.stats.mean_tokens == pytest.approx(data_token_stats(tiny_data).mean_tokens, rel=0.01)
    assert p.stats_kind.startswith("counted")


def test_eager_loss_lowers_the_longest_sequence():
    fused = plan_run("qwen3-8b", samples=10, draft_vocab_size=None)
    eager = plan_run("qwen3-8b", samples=10, draft_vocab_size=None, loss_implementation="eager")
    assert eager.largest_seq_len < fused.largest_seq_len
    assert eager.memory_total > fused.memory_total


def test_problems_fire_on_an_oversized_plan_and_stay_silent_on_a_fitting_one():
    assert plan_run("llama-3.1-8b", samples=1000).problems(free_disk=1e15) == []
    big = plan_run("kimi-k2.5", samples=50000, total_seq_len=131072, loss_implementation="eager", gpu="A100-40GB")
    problems = big.problems(free_disk=1e9)
    assert len(problems) == 3  # GPU memory, the verifier's weights, the disk
    assert "total_seq_len <=" in problems[0] and "verifier" in problems[1] and "disk" in problems[2]


def test_plan_mistakes_are_one_sentence():
    with pytest.raises(UserError, match="Unknown GPU"):
        resolve_gpu("H1000")
    with pytest.raises(UserError, match="loss_implementation"):
        plan_run("tiny", loss_implementation="triton")


def test_plan_cli_prints_the_table(capsys):
    assert main(["plan", "--verifier", "llama-3.1-8b", "--samples", "50000", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    for text in ("hidden states per token", "optimizer state", "largest total_seq_len", "torchrun", "Assumptions"):
        assert text in out
    assert main(["plan", "--verifier", "kimi-k2.5", "--samples", "10", "--total-seq-len", "131072",
                 "--loss-implementation", "eager", "--draft-vocab-size", "none", "--gpu", "A100-40GB"]) == 1


def test_plan_reads_at_80_columns_with_rows_under_section_headings(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["plan", "--verifier", "llama-3.1-8b", "--samples", "50000", "--tokens-per-sample", "2048",
                 "--gpu", "H100-80GB", "--gpus", "8"]) == 0
    table, rest = capsys.readouterr().out.split("\nCommands for this run:\n")
    commands, assumptions = rest.split("\nAssumptions:\n")
    assert not [line for line in table.splitlines() + assumptions.splitlines() if len(line) > 80]
    assert [line for line in table.splitlines() if line and not line.startswith(" ")] == [
        "data", "disk", "params", "GPU memory / rank", "data generation", "time", "serving (vLLM)"]
    assert all(line.startswith("  ") for block in table.split("\n\n")[1:] for line in block.splitlines()[1:])
    assert all(line.startswith("  eagle3kit ") or line.startswith("  torchrun ") for line in commands.splitlines())


def test_plan_figure():
    plans = [plan_run(v, samples=1000) for v in ("llama-3.1-8b", "qwen3-8b")]
    fig = plan_figure(plans)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 2


def test_data_generation_is_planned_on_the_one_device_eagle3kit_data_uses():
    """Data time does not shrink with --gpus (training's does); a verifier one GPU cannot hold is named; the default
    packed length is speculators' own."""
    from speculators.train.config import TrainConfig

    one, eight = (plan_run("llama-3.1-8b", samples=1000, gpus=n) for n in (1, 8))
    assert one.data_seconds == eight.data_seconds and eight.train_seconds < one.train_seconds
    assert any("one device" in item for item in eight.table()["item"]) and eight.problems(free_disk=1e15) == []
    assert eight.step.total_seq_len == TrainConfig().flatten()["total_seq_len"]
    big = plan_run("kimi-k2.5", samples=10, gpus=8)
    assert any("`eagle3kit data` runs it on one device" in p for p in big.problems(free_disk=1e15))


def test_the_break_even_row_shows_its_arithmetic_and_the_arithmetic_gives_it():
    """A reader can re-derive the break-even τ from the plan's own rows: the row states the sum and its result."""
    import re

    from eagle3kit.plan import serving_speed

    plan = serving_speed.predict("llama-3.1-8b", "H100-80GB", 1, 3, acceptance=[0.4, 0.17, 0.08])
    value = plan.table().set_index("item").filter(like="break-even", axis=0)["value"].iloc[0]
    number = r"([\d.]+)"
    pattern = rf"\({number} \+ (\d) x {number} \+ {number}\) / {number} = {number}"
    v, k, d, r, p, said = re.fullmatch(pattern, value).groups()
    assert abs((float(v) + int(k) * float(d) + float(r)) / float(p) - float(said)) < 0.01
    assert float(said) == round(plan.break_even, 2)
