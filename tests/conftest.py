"""Shared fixtures: real verifiers (tiny random Llama, SmolLM2 converted from its GGUF) and a small thread count.

Under pytest-xdist (``make test`` runs ``-n 2``) the cores are shared out between the workers, for torch here and,
through ``OMP_NUM_THREADS``, for the processes the tests start (trainers, notebook kernels): two workers that each
spin two threads on two cores are slower than one."""

from __future__ import annotations

import os

# Tests never download: a hub id fails at once instead of after network retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
THREADS = max(1, min(2, os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

import pytest  # noqa: E402
import torch  # noqa: E402

from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.doctor.checks.versions import fused_loss_compiles  # noqa: E402
from eagle3kit.verifier import resolve  # noqa: E402

torch.set_num_threads(THREADS)


@pytest.fixture(scope="session")
def tiny_verifier():
    """The tiny random Llama verifier (a real HF directory with SmolLM2's tokenizer)."""
    return resolve("tiny")


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct verifier (converted once per machine, then cached)."""
    return resolve("smollm2")


TINY_DATA_SEQ = 256
TINY_DATA_VOCAB = 512


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """A real (tiny) training-data directory: 12 ShareGPT conversations through the tiny verifier."""
    out = tmp_path_factory.getbasetemp() / "eagle3kit-train-tiny-data"
    build_dataset("tiny", out, n_conversations=12, seq_length=TINY_DATA_SEQ, held_out=2,
                  draft_vocab_size=TINY_DATA_VOCAB, progress=False)
    return out


NEEDS_FUSED_LOSS_UNDER_COMPILE = pytest.mark.skipif(  # the doctor's rule (eagle3kit.doctor.checks.versions), as a skip
    not fused_loss_compiles(),
    reason=f"speculators' fused loss under torch.compile fails on CUDA with torch {torch.__version__} < 2.12 "
           "(pytorch issue 177600); the eager loss trains there")
