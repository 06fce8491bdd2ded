"""The verifier's replies written by vLLM's CPU build, driven the way speculators does it: ``vllm serve`` the
verifier, then speculators' own ``regenerate-responses`` sends every prompt to its chat endpoint, many at a time, and
writes prompt + completion token ids.

On this project's 2-core AVX512-BF16 machine, SmolLM2 writes its greedy replies here about 4x faster than
transformers' batched loop (``bench/regenerate.py`` measures both on the same prompts), after an engine start of
about 30 s: vLLM batches hundreds of sequences a step and computes bf16 natively. The server is stopped (its whole
process group) however the call ends; ``regenerate-responses --resume`` keeps the replies already written.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tqdm.auto import tqdm

from eagle3kit.device import native_dtype
from eagle3kit.processes import launch, log_tail, stop_group
from eagle3kit.vllm_env import CPU_HEAD_SIZES, VllmError, VllmNotInstalled, run_env, vllm_python

MAX_NUM_SEQS = 256  # sequences the engine decodes together (the CPU build's default is lower)
CONCURRENCY = 256  # requests regenerate-responses keeps in flight
START_TIMEOUT = 300.0  # seconds for `vllm serve` to answer


def usable(verifier_path: str | None) -> str | None:
    """None when vLLM's CPU build here can write this verifier's replies, else why not (one line)."""
    try:
        vllm_python()
    except VllmNotInstalled as exc:
        return str(exc)
    if not verifier_path or not (Path(verifier_path) / "config.json").exists():
        return "the verifier is not a local model directory"
    cfg = json.loads((Path(verifier_path) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return None if head in CPU_HEAD_SIZES else f"vLLM's CPU attention has no head_dim {head}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(verifier_path: str, log: Path, dtype: str | None = None) -> Iterator[str]:
    """``vllm serve`` the verifier (greedy-ready, ``dtype`` default: bf16 where this CPU computes it natively);
    yields its chat-completions URL once it answers, stops it on exit."""
    port = _free_port()
    argv = [str(vllm_python().parent / "vllm"), "serve", verifier_path, "--dtype", dtype or native_dtype("cpu"),
            "--enforce-eager", "--max-num-seqs", str(MAX_NUM_SEQS), "--host", "127.0.0.1", "--port", str(port)]
    proc = launch(argv, log, run_env())
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise VllmError(f"vllm serve exited with code {proc.returncode}; log tail:\n{log_tail(log)}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            if time.monotonic() > deadline:
                raise VllmError(f"vllm serve did not answer within {START_TIMEOUT:.0f}s; log tail:\n{log_tail(log)}")
            time.sleep(1.0)
        yield f"http://127.0.0.1:{port}/v1/chat/completions"
    finally:
        stop_group(proc, grace=5.0)


def _lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.exists() else 0


def replies(verifier_path: str, prompts: list[list[dict]], raw: Path, max_new_tokens: int,
            progress: bool = True) -> tuple[dict[int, list[int]], float, float]:
    """The completion token ids of each prompt (index -> ids, the end token included as vLLM returns it), written by
    vLLM through speculators' ``regenerate-responses`` into ``raw`` (resumed when it holds some already); and the
    seconds the engine took to start and to write them."""
    with tempfile.TemporaryDirectory(prefix="eagle3kit-regen-") as tmp:
        rows = Path(tmp) / "prompts.jsonl"
        rows.write_text("".join(json.dumps({"id": str(i), "messages": p}) + "\n" for i, p in enumerate(prompts)))
        t0 = time.perf_counter()
        with served(verifier_path, Path(tmp) / "vllm.log") as url:
            started = time.perf_counter() - t0
            argv = [sys.executable, "-m", "speculators", "regenerate-responses", "--endpoint", url, "--model",
                    verifier_path, "--dataset", str(rows), "--concurrency", str(CONCURRENCY), "--max-tokens",
                    str(max_new_tokens), "--sampling-params", json.dumps({"temperature": 0}), "--outfile", str(raw),
                    "--resume"]
            log = Path(tmp) / "regenerate.log"
            with log.open("w") as f:
                proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
            bar = tqdm(total=len(prompts), initial=_lines(raw), desc="regenerate (vLLM)", unit="conv",
                       disable=not progress)
            while proc.poll() is None:
                time.sleep(0.5)
                bar.update(_lines(raw) - bar.n)
            bar.update(_lines(raw) - bar.n)
            bar.close()
            if proc.returncode != 0:
                raise VllmError(f"speculators regenerate-responses exited with code {proc.returncode}; log tail:\n"
                                f"{log_tail(log)}")
            seconds = time.perf_counter() - t0 - started
    out: dict[int, list[int]] = {}
    for line in raw.read_text().splitlines():
        row = json.loads(line)
        ids, mask = row["input_ids"], row["loss_mask"]
        out[int(row["primary_id"])] = [t for t, m in zip(ids, mask, strict=True) if m]
    return out, started, seconds
