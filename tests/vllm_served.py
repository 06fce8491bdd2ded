"""Test-only vLLM helpers: serve an exported draft with ``vllm serve`` and read its spec-decode counters; run vLLM's
render server (``vllm launch render``) for speculators' ``prepare-data``.

The library checks a draft with :func:`eagle3kit.evaluate.vllm.serve.check_draft`; only tests/test_vllm.py starts an
OpenAI-compatible server and tests/test_mask_agreement.py a render server, so this lives with the tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from eagle3kit.evaluate.export import serve_line
from eagle3kit.vllm_env import VllmError, vllm_python
from eagle3kit.evaluate.vllm.serve import SERVE_ENV, serve_command
from eagle3kit.processes import launch, log_tail, stop_group


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(draft_dir: str | os.PathLike, verifier_dir: str | os.PathLike | None = None, k: int | None = None,
           timeout: float = 600.0, venv: str | os.PathLike | None = None,
           log_path: str | os.PathLike | None = None, short: bool = False) -> Iterator[str]:
    """Run :func:`serve_command` on a free port of 127.0.0.1 until ``/health`` answers; yield the base URL.
    ``short``: as ``vllm serve DRAFT`` (:func:`~eagle3kit.evaluate.export.serve_line`, the README's line: vLLM reads
    the verifier and k from the draft's config) with the same CPU options.

    On exit the server's whole process group is stopped (SIGTERM, then SIGKILL); its log is kept only at
    ``log_path`` (a failure to start quotes the log's tail in the error).
    """
    python = vllm_python(venv)
    port = _free_port("127.0.0.1")
    argv = serve_command(draft_dir, verifier_dir, k, port)
    if short:  # the verifier and the --speculative-config pair give way to the draft alone
        argv = shlex.split(serve_line(draft_dir)) + argv[argv.index("--speculative-config") + 2:]
    argv[0] = str(python.parent / "vllm")
    with _running(argv, port, timeout, log_path) as url:
        yield url


@contextlib.contextmanager
def rendered(model_dir: str | os.PathLike, timeout: float = 300.0, venv: str | os.PathLike | None = None,
             log_path: str | os.PathLike | None = None, serve: bool = False) -> Iterator[str]:
    """``vllm launch render MODEL``: vLLM's GPU-less render server (tokenizer and chat template, no weights), the
    endpoint ``speculators prepare-data --render-endpoint`` renders conversations with; yield its base URL.
    ``serve``: the full engine with its render endpoints instead (``vllm serve MODEL --enable-scale-out``)."""
    python = vllm_python(venv)
    port = _free_port("127.0.0.1")
    how = ["serve", str(model_dir), "--enable-scale-out", "--dtype", "float32", "--enforce-eager"] if serve else [
        "launch", "render", str(model_dir)]
    argv = [str(python.parent / "vllm"), *how, "--host", "127.0.0.1", "--port", str(port)]
    with _running(argv, port, timeout, log_path) as url:
        yield url


@contextlib.contextmanager
def _running(argv: list[str], port: int, timeout: float, log_path: str | os.PathLike | None) -> Iterator[str]:
    """Start ``argv`` until ``/health`` answers on ``port``; stop its process group on exit."""
    url = f"http://127.0.0.1:{port}"
    what = "vllm " + (" ".join(argv[1:3]) if argv[1] == "launch" else argv[1])  # "vllm serve", "vllm launch render"
    log = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="eagle3kit-serve-")) / "server.log"
    proc = launch(argv, log, SERVE_ENV)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise VllmError(f"{what} exited with code {proc.returncode}; log tail:\n{log_tail(log)}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                raise VllmError(f"{what} did not answer /health within {timeout:.0f}s; log tail:\n{log_tail(log)}")
            time.sleep(0.5)
        yield url
    finally:
        stop_group(proc)
        if log_path is None:
            shutil.rmtree(log.parent, ignore_errors=True)


_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')


def scrape_spec_metrics(metrics_text: str) -> dict[str, object]:
    """Spec-decode counters from a Prometheus ``/metrics`` text (summed over engines and models)."""
    names = {f"vllm:spec_decode_num_{n}": key for n, key in (("drafts", "drafts"), ("draft_tokens", "draft_tokens"),
                                                            ("accepted_tokens", "accepted"))}
    out: dict[str, object] = dict.fromkeys(names.values(), 0)
    per_pos: dict[int, int] = {}
    for line in metrics_text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#"):
            continue
        name = m["name"].removesuffix("_total")
        if name in names:
            out[names[name]] += int(float(m["value"]))
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            pos = int(re.search(r'position="(\d+)"', m["labels"] or "")[1])
            per_pos[pos] = per_pos.get(pos, 0) + int(float(m["value"]))
    out["accepted_per_pos"] = [per_pos[i] for i in sorted(per_pos)]
    return out

