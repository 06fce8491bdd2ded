"""The verifier's replies written by vLLM's CPU build, by either of two routes into the same rows file:

- offline (engine ``"vllm"``): :mod:`eagle3kit.data.regenerate_worker` builds a ``vllm.LLM`` in the vLLM environment
  and decodes every prompt together, no server and no HTTP in between;
- served (engine ``"vllm-served"``): ``vllm serve`` the verifier, then speculators' own ``regenerate-responses`` sends
  every prompt to its chat endpoint, many at a time (the route speculators documents).

Both ask the engine for the same thing (vLLM renders the chat template, the model's generation defaults under
:data:`SAMPLING`, up to ``max_new_tokens``; dtype :func:`eagle3kit.device.native_dtype`, :data:`MAX_NUM_SEQS`
sequences at once, :func:`eagle3kit.vllm_env.run_env`) and write speculators' rows (``primary_id``, ``input_ids`` =
prompt + completion, ``loss_mask``), resuming a rows file that holds some already. ``bench/regeneration_engines.py``
measures both against transformers on the same prompts; on another 2-core host of this kind, 96 demo prompts: offline
389 tokens/s (engine start 25 s), served 205 (start 38 s). The engine's process group is stopped however a call ends.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from eagle3kit.device import native_dtype
from eagle3kit.processes import launch, log_tail, stop_group
from eagle3kit.progress import tqdm
from eagle3kit.vllm_env import CPU_HEAD_SIZES, VllmError, VllmNotInstalled, run_env, vllm_python

MAX_NUM_SEQS = 256  # sequences the engine decodes together (the CPU build's default is lower)
CONCURRENCY = 256  # requests regenerate-responses keeps in flight
START_TIMEOUT = 300.0  # seconds for `vllm serve` to answer
SAMPLING = {"temperature": 0}  # the request's sampling parameters on both routes: greedy
WORKER = Path(__file__).with_name("regenerate_worker.py")


@dataclass
class VllmRun:
    ids: dict[int, list[int]]  # prompt key -> completion ids (the end token included, as vLLM returns it)
    resumed: set[int]  # prompts whose row the rows file held before the call
    start_seconds: float  # the engine's start (served: until the server answered); 0 when nothing was left to do
    seconds: float  # writing the replies, after the start


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


def errors_file(rows: Path) -> Path:
    """Where a route logs the prompts it could not answer (speculators' ``<stem>.errors<suffix>``)."""
    return rows.with_name(f"{rows.stem}.errors{rows.suffix or '.jsonl'}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(verifier_path: str, log: Path, dtype: str | None = None) -> Iterator[str]:
    """``vllm serve`` the verifier (``dtype`` default: bf16 where this CPU computes it natively); yields its
    chat-completions URL once it answers, stops it on exit."""
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


def complete_rows(rows: Path) -> list[dict]:
    """The rows in ``rows``; a line an interruption cut is removed from the file, so that appending continues it."""
    if not rows.is_file():
        return []
    text = rows.read_text(encoding="utf-8")
    kept, lines = [], text.splitlines()
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            kept.append(json.loads(line))
    if len(kept) < len(lines) or (text and not text.endswith("\n")):
        rows.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")
    return kept


def replies(verifier_path: str, prompts: dict[int, list[dict]], rows: Path, max_new_tokens: int, served: bool = False,
            progress: bool = True, dtype: str | None = None) -> VllmRun:
    """Each prompt's greedy completion (key -> turns in, key -> ids out), written by vLLM offline or ``served`` into
    ``rows`` as speculators' rows with ``primary_id`` = the key; the prompts whose row ``rows`` already holds are
    kept, and with none left no engine starts."""
    done = {str(r.get("primary_id")) for r in complete_rows(rows)}
    resumed = {i for i in prompts if str(i) in done}
    start = seconds = 0.0
    if len(resumed) < len(prompts):
        with tempfile.TemporaryDirectory(prefix="eagle3kit-regen-") as tmp:
            dataset = Path(tmp) / "prompts.jsonl"
            dataset.write_text("".join(json.dumps({"id": str(i), "messages": p}) + "\n" for i, p in prompts.items()))
            bar = tqdm(total=len(prompts), initial=len(resumed), desc=f"regenerate ({'served ' * served}vLLM)",
                       unit="conv", disable=not progress)
            route = _ask_server if served else _offline
            start, seconds = route(verifier_path, dataset, rows, max_new_tokens, dtype or native_dtype("cpu"),
                                   Path(tmp), bar)
            bar.close()
    ids: dict[int, list[int]] = {}
    for row in complete_rows(rows):
        if int(row["primary_id"]) in prompts:
            ids[int(row["primary_id"])] = [t for t, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
    return VllmRun(ids, resumed, start, seconds)


def _follow(proc: Popen, rows: Path, bar: tqdm, what: str, log: Path, ready: Path | None = None,
            done: Path | None = None) -> tuple[float, float]:
    """Wait until ``proc`` exits or ``done`` appears (the caller then stops its group: an engine's shutdown takes
    seconds), the bar following the rows written; (seconds until ``ready`` appeared, until the end), from this call.
    A failed exit is a :class:`VllmError` quoting ``log``."""
    t0, ready_at = time.perf_counter(), None
    while True:
        exited, now = proc.poll() is not None, time.perf_counter() - t0
        if ready_at is None and ready is not None and ready.exists():
            ready_at = now
        bar.update(_lines(rows) - bar.n)
        if done is not None and done.exists():
            break
        if exited:
            if proc.returncode != 0:
                raise VllmError(f"{what} exited with code {proc.returncode}; log tail:\n{log_tail(log)}")
            break
        time.sleep(0.5)
    return (now if ready_at is None else ready_at), now


def _lines(path: Path) -> int:
    return sum(1 for _ in path.open()) if path.exists() else 0


def _offline(path: str, dataset: Path, rows: Path, max_new_tokens: int, dtype: str, tmp: Path, bar: tqdm
             ) -> tuple[float, float]:
    """The replies by :mod:`eagle3kit.data.regenerate_worker`; (seconds until its engine was built, after it)."""
    ready, done = tmp / "ready", tmp / "done"
    spec = {"model": path, "dtype": dtype, "max_num_seqs": MAX_NUM_SEQS, "max_tokens": max_new_tokens,
            "sampling_params": SAMPLING, "dataset": str(dataset), "outfile": str(rows.resolve()), "ready": str(ready),
            "done": str(done)}
    (tmp / "spec.json").write_text(json.dumps(spec))
    log = tmp / "worker.log"
    proc = launch([str(vllm_python()), str(WORKER), str(tmp / "spec.json")], log, run_env())
    try:
        started, finished = _follow(proc, rows, bar, "vLLM's offline engine (regenerate_worker.py)", log, ready, done)
    finally:
        stop_group(proc, grace=5.0)
    return started, finished - started


def _ask_server(path: str, dataset: Path, rows: Path, max_new_tokens: int, dtype: str, tmp: Path, bar: tqdm
                ) -> tuple[float, float]:
    """The replies by speculators' ``regenerate-responses`` asking ``vllm serve``; (seconds until the server
    answered, after it)."""
    t0 = time.perf_counter()
    with served(path, tmp / "vllm.log", dtype) as url:
        started = time.perf_counter() - t0
        argv = [sys.executable, "-m", "speculators", "regenerate-responses", "--endpoint", url, "--model", path,
                "--dataset", str(dataset), "--concurrency", str(CONCURRENCY), "--max-tokens", str(max_new_tokens),
                "--sampling-params", json.dumps(SAMPLING), "--outfile", str(rows), "--resume"]
        log = tmp / "regenerate.log"
        proc = launch(argv, log)
        try:
            _follow(proc, rows, bar, "speculators regenerate-responses", log)
        finally:
            stop_group(proc, grace=5.0)
        return started, time.perf_counter() - t0 - started
