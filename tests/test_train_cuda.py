"""What only a GPU shows (``pytest -m cuda``; skipped without CUDA): speculators' ``simple_flex_attention`` training
with the fused (Triton; torch >= 2.12) and eager loss, for both of its optimizers, and a CUDA session that trains
like the exact CPU one."""

from __future__ import annotations

import math

import pytest
import torch

from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.session import TrainSession

from conftest import NEEDS_FUSED_LOSS_UNDER_COMPILE
from conftest import TINY_DATA_SEQ as SEQ
from conftest import TINY_DATA_VOCAB as VOCAB

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")]


def session(data, device: str, **settings) -> TrainSession:
    spec = DraftSpec(verifier="tiny", draft_vocab_size=VOCAB, device=device)
    return TrainSession(data, spec, progress=False, total_seq_len=SEQ, warmup_steps=0, **settings)


@pytest.mark.parametrize("loss", [pytest.param("fused", marks=NEEDS_FUSED_LOSS_UNDER_COMPILE), "eager"])
@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_flex_attention_trains_on_cuda(tiny_data, optimizer, loss):
    s = session(tiny_data, "cuda", lr=2e-3, optimizer=optimizer, loss_implementation=loss)
    assert s.build.attention.implementation == "simple_flex_attention"
    assert s.settings.loss_implementation == loss and s.settings.hidden_states_dtype == "bfloat16"
    before = s.model.fc.weight.detach().clone()
    records = s.run(4)
    assert len(records) == 4 and all(math.isfinite(r[f"loss_{k}"]) for r in records for k in range(s.ttt_steps))
    assert not torch.equal(before, s.model.fc.weight)


@pytest.mark.parametrize("loss", [pytest.param("fused", marks=NEEDS_FUSED_LOSS_UNDER_COMPILE), "eager"])
def test_cuda_session_equals_the_cpu_session_within_tolerance(tiny_data, loss):
    """float32 batches on both; CUDA runs speculators' GPU path (flex attention, the fused or eager loss), the CPU
    its exact path (sdpa, eager loss). Same seed, same initial draft, same batches: losses and weights agree."""
    cpu = session(tiny_data, "cpu", lr=1e-3, hidden_states_dtype="float32")
    gpu = session(tiny_data, "cuda", lr=1e-3, hidden_states_dtype="float32", loss_implementation=loss)
    assert gpu.build.attention.implementation == "simple_flex_attention" and gpu.settings.loss_implementation == loss
    start = {n: p.detach().cpu() for n, p in gpu.model.named_parameters()}
    assert all(torch.equal(start[n], p) for n, p in cpu.model.named_parameters())
    a, b = cpu.run(3), gpu.run(3)
    for ra, rb in zip(a, b, strict=True):
        for k in range(cpu.ttt_steps):
            assert rb[f"loss_{k}"] == pytest.approx(ra[f"loss_{k}"], rel=2e-3, abs=1e-4)
    # The two runs moved the weights the same way (AdamW's first steps are about lr * sign(grad), so a few
    # near-zero gradients may flip: compare the whole update, not the worst element).
    gpu_params = {n: p.detach().cpu() for n, p in gpu.model.named_parameters()}
    moved_cpu = torch.cat([(p.detach() - start[n]).flatten() for n, p in cpu.model.named_parameters()])
    moved_gpu = torch.cat([(gpu_params[n] - start[n]).flatten() for n, _ in cpu.model.named_parameters()])
    assert moved_cpu.norm() > 0 and (moved_gpu - moved_cpu).norm() <= 0.05 * moved_cpu.norm()
