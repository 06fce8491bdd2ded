"""The crash-isolated probe, run for real on this CPU (tiny verifier, worker subprocesses)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from eagle3kit import cli
from eagle3kit.doctor.probe import matrix as probe
from eagle3kit.doctor.probe.plots import plot_timings
from eagle3kit.doctor.probe.recommend import probe_row, recommend, recommendations
from eagle3kit.errors import UserError


@pytest.fixture(scope="module")
def matrix():
    if torch.cuda.is_available():
        pytest.skip("these expectations are for a CPU-only machine (the cuda-marked tests cover a GPU)")
    return probe.probe("tiny", "cpu", seq_len=128, ttt_steps=3, progress=False,
                       extra_cells=[probe.Cell("simple_flex_attention", "forward", 130)])


def _row(matrix, backend, mode, seq_len=128):
    row = probe_row(matrix, backend, mode, seq_len)
    assert row is not None, f"no {backend} / {mode} / {seq_len} row"
    return row


def test_eager_and_sdpa_train_with_equal_loss(matrix):
    for mode in probe.MODES:
        eager, sdpa = _row(matrix, "eager", mode), _row(matrix, "sdpa", mode)
        assert eager.status == "ok" and sdpa.status == "ok", matrix.to_string()
        assert sdpa.max_abs_dloss < 1e-5 and abs(sdpa.loss - eager.loss) < 1e-5
        assert sdpa.token_agreement == 1.0
        assert eager["mask"] == "float additive" and sdpa["mask"] == "bool dense"
        assert sdpa.seconds > 0
        assert eager.peak_bytes is None and sdpa.peak_bytes is None  # torch.cuda.max_memory_allocated: CUDA only


def test_flex_backward_on_cpu_is_an_error_row_and_we_live_on(matrix):
    row = _row(matrix, "simple_flex_attention", "forward+backward")
    assert row.status == "error" and "backward on CPU" in row.error
    fwd = _row(matrix, "simple_flex_attention", "forward")  # forward without grad works and matches eager
    assert fwd.status == "ok" and fwd["mask"] == "BlockMask" and fwd.max_abs_dloss < 1e-5
    assert os.getpid() > 0  # this process ran every cell above and is still here


def test_hf_flex_attention_never_passes_as_correct(matrix):
    for mode in probe.MODES:
        row = _row(matrix, "flex_attention", mode)
        assert row.status != "ok" or row.token_agreement < 1.0 or row.max_abs_dloss > 1e-5, row.to_dict()
        assert row.status in ("ok", "error", "crashed", "timeout")


def test_blockmask_length_error_row(matrix):
    row = _row(matrix, "simple_flex_attention", "forward", 130)
    assert row.status == "error" and "larger length" in row.error


def test_recommendation_and_chart_come_from_the_rows(matrix):
    # training: eagle3kit's block-sparse step where its row ran and matched by loss, else eager or sdpa
    assert recommend(matrix, training=True) in ("eager", "sdpa", "block_sparse_cpu")
    assert recommend(matrix, training=False) in ("eager", "sdpa", "simple_flex_attention")
    assert recommendations(matrix, "cpu") == {"cpu training": recommend(matrix, training=True),
                                              "cpu inference": recommend(matrix, training=False)}
    assert probe_row(matrix, "eager", "forward").seq_len == 128  # default: the matrix's first length
    assert probe_row(matrix, "no-such-backend", "forward") is None
    fig = plot_timings(matrix)
    assert len(fig.axes[0].patches) == len(matrix)
    failed = matrix[matrix.status != "ok"]
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert len(failed) and all(status in labels for status in failed.status)  # a failed cell shows its status


def test_a_hanging_cell_becomes_a_timeout_row():
    cells = [probe.Cell("eager", "forward+backward", 2048, 3)]
    results = probe.run_cells(cells, "tiny", "cpu", timeout_s=0.05, progress=False)
    assert results[0]["status"] == "timeout" and "killed" in results[0]["error"]


def test_cli_probe_prints_the_matrix(capsys):
    assert cli.main(["probe", "--verifier", "tiny", "--device", "cpu", "--backends", "eager", "sdpa",
                     "--modes", "forward", "--seq-len", "128"]) == 0
    out = capsys.readouterr().out
    assert "sdpa" in out and "token_agreement" in out and "recommended (training)" in out


def test_a_worker_that_cannot_start_gives_error_rows():
    cells = probe.matrix_cells(("eager", "sdpa"), ("forward",), seq_len=128)
    results = probe.run_cells(cells, "no-such-verifier", "cpu", progress=False)
    assert [r["status"] for r in results.values()] == ["error", "error"]
    assert all("before the first cell" in r["error"] and "no-such-verifier" in r["error"] for r in results.values())


def test_unknown_or_weightless_verifier_is_refused_early():
    with pytest.raises(UserError, match="config-only preset"):
        probe.probe("qwen3-8b", "cpu", progress=False)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")
def test_probe_on_cuda_trains_with_simple_flex_and_matches_eager():
    matrix = probe.probe("tiny", "cuda", backends=("eager", "sdpa", "simple_flex_attention"), seq_len=256,
                         ttt_steps=3, progress=False, timeout_s=300)
    for mode in probe.MODES:
        flex = _row(matrix, "simple_flex_attention", mode, 256)
        assert flex.status == "ok" and flex["mask"] == "BlockMask", matrix.to_string()
        assert flex.max_abs_dloss < 1e-3 and flex.token_agreement >= 0.99, matrix.to_string()
    train, forward = (_row(matrix, "sdpa", mode, 256).peak_bytes for mode in ("forward+backward", "forward"))
    assert train > forward > 0  # the step's own peak: gradients and saved activations only with backward
    assert recommend(matrix, training=True) in ("eager", "sdpa", "simple_flex_attention")


# ----------------------------------------------------------------------------------------------- cache
def test_cached_cells_are_read_back_and_a_changed_setting_runs_again(tmp_path):
    """Notebook 02's replay runs two of the matrix's cells first: with a cache folder the matrix reads them back (the
    crash included) and the rows it derives from them (Δ loss, token agreement) are those of a fresh run; a timeout
    is not kept, and another seed, repeat count or verifier file runs the cell again."""
    import shutil

    from eagle3kit.verifier import resolve

    cache = tmp_path / "cache"
    replay = [probe.Cell(b, "forward", 128, 3, 2) for b in ("eager", "flex_attention")]
    first = probe.run_cells(replay, "tiny", "cpu", progress=False, cache_dir=cache)
    assert not any(r.get("cached") for r in first.values()) and len(list(cache.glob("*.json"))) == 2
    matrix = probe.probe("tiny", "cpu", backends=("eager", "sdpa", "flex_attention"), modes=("forward",),
                         seq_len=128, repeats=2, progress=False, cache_dir=cache)
    fresh = probe.probe("tiny", "cpu", backends=("eager", "sdpa", "flex_attention"), modes=("forward",),
                        seq_len=128, repeats=2, progress=False)
    assert matrix.attrs["cached"] == 2 and fresh.attrs["cached"] == 0
    assert matrix.status.tolist() == fresh.status.tolist()
    assert matrix.loss.tolist()[:2] == fresh.loss.tolist()[:2]  # eager (read back) and sdpa (ran): same weights
    assert _row(matrix, "sdpa", "forward").token_agreement == 1.0
    assert _row(matrix, "eager", "forward").seconds == first[0]["seconds"]  # the replay's measurement

    again = probe.run_cells(replay, "tiny", "cpu", progress=False, cache_dir=cache)
    assert all(r.get("cached") for r in again.values())
    for changed in (dict(seed=1), dict(timeout_s=0.05)):
        rerun = probe.run_cells(replay[:1], "tiny", "cpu", progress=False, cache_dir=cache, **changed)
        assert not rerun[0].get("cached"), changed
    timed_out = probe.run_cells([probe.Cell("eager", "forward+backward", 2048, 3)], "tiny", "cpu", timeout_s=0.05,
                                progress=False, cache_dir=cache)
    assert timed_out[0]["status"] == "timeout"
    after = probe.run_cells([probe.Cell("eager", "forward+backward", 2048, 3)], "tiny", "cpu", timeout_s=0.05,
                            progress=False, cache_dir=cache)
    assert not after[0].get("cached")  # a timeout is measured again
    assert not probe.run_cells([probe.Cell("eager", "forward", 128, 3, 1)], "tiny", "cpu", progress=False,
                               cache_dir=cache)[0].get("cached")  # another repeat count

    broken = Path(shutil.copytree(resolve("tiny").path, tmp_path / "tiny-broken"))
    for weights in broken.glob("*.safetensors"):  # the worker cannot build its draft: no cell is measured
        weights.write_bytes(weights.read_bytes()[:64])
    for _ in range(2):
        failed = probe.run_cells(replay[:1], str(broken), "cpu", progress=False, cache_dir=cache)
        assert failed[0]["status"] == "error" and "before the first cell" in failed[0]["error"]
        assert not failed[0].get("cached")  # never kept: the second call starts a worker again

    copy = Path(shutil.copytree(resolve("tiny").path, tmp_path / "tiny-copy"))
    first_copy = probe.run_cells(replay[:1], str(copy), "cpu", progress=False, cache_dir=cache)
    assert not first_copy[0].get("cached")
    assert probe.run_cells(replay[:1], str(copy), "cpu", progress=False, cache_dir=cache)[0].get("cached")
    weights = next(copy.glob("*.safetensors"))
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # the weights rewritten
    assert not probe.run_cells(replay[:1], str(copy), "cpu", progress=False, cache_dir=cache)[0].get("cached")


def test_shown_drops_the_raw_loss_and_the_empty_columns():
    from eagle3kit.doctor.probe.matrix import shown

    frame = pd.DataFrame({"backend": ["eager", "sdpa"], "loss": [1.0, 1.0], "peak_bytes": [None, None],
                          "seconds": [0.1, None]})
    assert list(shown(frame).columns) == ["backend", "seconds"]


# ----------------------------------------------------------------------------------------------- zygote
def test_workers_are_forked_from_one_zygote_that_ends_when_idle(monkeypatch):
    """On a CPU the workers are forked from a zygote that imported speculators once: the next probe call finds the
    same one, and it ends once no call asked for a worker for ``IDLE_S`` seconds."""
    from eagle3kit.doctor.probe import zygote

    cells = [probe.Cell("eager", "forward", 64, 1)]
    zygotes = []
    for _ in range(2):
        results = probe.run_cells(cells, "tiny", "cpu", progress=False)
        assert results[0]["status"] == "ok"
        zygotes.append(zygote.running())
    assert zygotes[0] is not None and zygotes[0] == zygotes[1]
    monkeypatch.setattr(zygote, "IDLE_S", 0.2)
    zygote.release_later()
    deadline = time.monotonic() + 30
    while zygote.running() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert zygote.running() is None
    with pytest.raises(ProcessLookupError):
        os.kill(zygotes[0], 0)  # exited (reaped), its memory given back
