"""Shared fixtures: real verifiers (tiny random Llama, SmolLM2 converted from its GGUF) and a small thread count.

Under pytest-xdist (``make test`` runs ``-n 2``) the cores are shared out between the workers, for torch here and,
through ``OMP_NUM_THREADS``, for the processes the tests start (trainers, notebook kernels): two workers that each
spin two threads on two cores are slower than one.

``--dist loadfile`` hands a worker whole files; :data:`LONGEST_FIRST` puts the longest files at the head of the queue
(xdist's own reordering, by the number of tests in a file, is turned off), so the two longest start at once on the two
workers and the short files fill in around them instead of one long file running alone at the end. Fixtures that two
files need (:func:`smollm2_data`) are made once per run, in the folder both workers' temporary folders sit in, under a
file lock."""

from __future__ import annotations

import os

# Tests never download: a hub id fails at once instead of after network retries.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
THREADS = max(1, min(2, os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from filelock import FileLock  # noqa: E402

from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.data.directory import DataDir  # noqa: E402
from eagle3kit.doctor.checks.versions import fused_loss_compiles  # noqa: E402
from eagle3kit.verifier import resolve  # noqa: E402

torch.set_num_threads(THREADS)

# the longest files (pytest --durations, summed per file), longest first; the rest follow in collection order
LONGEST_FIRST = ("test_vllm.py", "test_notebooks.py", "test_rehearsal.py", "test_data.py", "test_regenerate.py",
                 "test_refusals.py", "test_verifier.py", "test_readme.py", "test_resume.py", "test_probe.py")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order pytest_collection_modifyitems set
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


def shared_dir(tmp_path_factory) -> Path:
    """The folder of this run that every xdist worker sees (each worker's own base folder sits in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


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


SMOLLM2_DATA = {"n_conversations": 24, "seq_length": 256, "held_out": 4, "draft_vocab_size": 2048, "dtype": "float32"}


@pytest.fixture(scope="session")
def smollm2_data(smollm2, tmp_path_factory) -> Path:
    """24 ShareGPT conversations through SmolLM2 (4 more held out), cut to 256 tokens, float32 hidden states, a
    2048-token draft vocab: made once per run for the vLLM-trained draft and the forward-parity checks (read only)."""
    out = shared_dir(tmp_path_factory) / "eagle3kit-smollm2-data"
    with FileLock(f"{out}.lock"):
        if not (out.exists() and DataDir(out).complete):
            build_dataset(smollm2, out, progress=False, **SMOLLM2_DATA)
    return out
