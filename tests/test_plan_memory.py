"""The per-part GPU memory prediction against a measured CPU training step of speculators' draft.

Measured: one real step (`PlainLoop` on the tiny data's packed batch, float32, sdpa, eager kl_div loss, AdamW),
its peak from torch.profiler's memory profile; weights, gradients, AdamW moments and the batch counted from their
tensors. Predicted: :func:`eagle3kit.plan.memory.memory_parts` for the same draft and settings.
"""

from __future__ import annotations

import pytest

from eagle3kit.draft.config import build_config
from eagle3kit.train.measured_memory import measure_loss_peak, measure_training_step
from eagle3kit.plan.memory import CPU_FP32, StepSettings, loss_bytes, memory_parts
from eagle3kit.plan.shapes import draft_shape

from conftest import TINY_DATA_VOCAB

TOLERANCE = 0.15
STEP_PARTS = ("activations (all TTT steps)", "logits + loss (eager)")


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", draft_vocab_size=TINY_DATA_VOCAB, device="cpu")


@pytest.mark.parametrize("total_seq_len", [256, 512, 1024])
def test_memory_parts_match_a_measured_training_step(build, tiny_data, total_seq_len):
    measured = measure_training_step(build, tiny_data, total_seq_len)
    parts = memory_parts(draft_shape(build), StepSettings(total_seq_len=total_seq_len, loss_implementation="eager",
                                                          attention=build.attention.implementation,
                                                          precision=CPU_FP32))
    weights = sum(parts[k] for k in ("draft weights (trainable)", "frozen embedding",
                                     "frozen lm_head + verifier lm_head rows"))
    assert weights == measured.weights
    assert parts["gradients"] == measured.gradients
    assert parts["optimizer state"] == pytest.approx(measured.optimizer_state, rel=0.01)  # + AdamW's step counters
    assert parts["batch (hidden states in)"] <= measured.batch <= 1.1 * parts["batch (hidden states in)"]
    step = sum(parts[k] for k in STEP_PARTS)
    assert step == pytest.approx(measured.step_peak, rel=TOLERANCE)
    assert sum(parts.values()) == pytest.approx(measured.total, rel=TOLERANCE)


def test_memory_check_can_fail(build, tiny_data):
    """Leaving the loss out of the prediction misses the measured step: the comparison is not vacuous."""
    measured = measure_training_step(build, tiny_data, 512)
    parts = memory_parts(draft_shape(build), StepSettings(total_seq_len=512, loss_implementation="eager",
                                                          attention="sdpa", precision=CPU_FP32))
    assert parts["activations (all TTT steps)"] < (1 - TOLERANCE) * measured.step_peak


@pytest.mark.parametrize("tokens,vocab", [(256, 4096), (512, 8192)])
def test_eager_loss_alone_matches_its_measured_peak(tokens, vocab):
    """speculators' eager kl_div, forward + backward, beyond its inputs: 20 bytes per entry, as PR 951 measured."""
    assert loss_bytes(tokens, vocab, "eager", 4, with_inputs=False) == pytest.approx(
        measure_loss_peak(tokens, vocab), rel=TOLERANCE)
