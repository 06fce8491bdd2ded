"""A measured attention-backend matrix: each cell is a real draft step run in a worker subprocess with a time limit.

A segfault, an exception or a hang becomes a row (``crashed``, ``error``, ``timeout``) instead of a dead kernel. The
worker (:mod:`~eagle3kit.doctor.probe.worker`; on a CPU forked by the :mod:`~eagle3kit.doctor.probe.zygote`, which
imported speculators once) runs the cells it is given in order and reports each; when it dies or hangs, the cell in
flight gets the row and a fresh worker takes the remaining cells. Nothing here is written in advance:
every value comes from running speculators' ``Eagle3DraftModel`` on this machine. Reading the matrix:
:mod:`eagle3kit.doctor.probe.recommend` (recommendation, settings table) and :mod:`eagle3kit.doctor.probe.plots`
(timings).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.device import resolve_device
from eagle3kit.doctor.probe.cache import ProbeCache, key, setting
from eagle3kit.doctor.probe.zygote import Forked, fork_worker, release_later
from eagle3kit.errors import UserError
from eagle3kit.progress import tqdm
from eagle3kit.verifier import resolve

BACKENDS = ("eager", "sdpa", "simple_flex_attention", "flex_attention", BLOCK_SPARSE)
MODES = ("forward", "forward+backward")
COLUMNS = ["backend", "mode", "seq_len", "status", "error", "resolved", "mask", "seconds", "loss", "max_abs_dloss",
           "token_agreement", "peak_bytes", "spread"]
# peak_bytes: torch.cuda.max_memory_allocated of the step (CUDA only); spread: max - min seconds of the repeats


@dataclass(frozen=True)
class Cell:
    backend: str  # an attention implementation, or "unset" (leave _attn_implementation None)
    mode: str  # "forward" (no grad) | "forward+backward"
    seq_len: int = 256
    ttt_steps: int = 3
    repeats: int = 1  # steps timed; seconds is their median

    def spec(self) -> dict:
        return {"backend": self.backend, "grad": self.mode == "forward+backward", "seq_len": self.seq_len,
                "ttt_steps": self.ttt_steps, "repeats": self.repeats}


def matrix_cells(backends=BACKENDS, modes=MODES, seq_len: int = 256, ttt_steps: int = 3,
                 repeats: int = 1) -> list[Cell]:
    """Every backend x mode, eager first (it is the reference for Δ loss and token agreement)."""
    ordered = ["eager", *[b for b in backends if b != "eager"]]
    return [Cell(b, m, seq_len, ttt_steps, repeats) for b in ordered for m in modes]


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:  # a line cut by a crash
            break
    return events


def _tail(path: Path) -> str:
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()] if path.exists() else []
    return lines[-1][:200] if lines else ""


def run_cells(cells: list[Cell], verifier: str = "tiny", device: str = "cpu", seed: int = 0, timeout_s: float = 120,
              startup_timeout_s: float = 600, threads: int | None = None, isolate_each: bool = False,
              draft_vocab_size: int | None = None, progress: bool = True,
              cache_dir: str | os.PathLike | None = None) -> dict[int, dict]:
    """Run ``cells`` in worker subprocesses; return ``{cell index: result}`` (a result per cell, whatever happens).

    ``draft_vocab_size`` shrinks the draft's vocab (first N token ids) to make each step cheaper. ``cache_dir``: read
    back the cells measured there before with the same setting, run only the others and keep their results
    (:mod:`eagle3kit.doctor.probe.cache`: what the key holds); a read-back result has ``"cached": True``.
    """
    workdir = Path(tempfile.mkdtemp(prefix="eagle3kit-probe-"))
    spec = {"verifier": verifier, "device": device, "seed": seed, "weights": str(workdir / "weights.pt"),
            "threads": threads or min(2, os.cpu_count() or 1), "cells": [c.spec() for c in cells],
            "draft_vocab_size": draft_vocab_size, "build_ttt_steps": max(c.ttt_steps for c in cells)}
    cache, keys, results = None, [], {}
    if cache_dir is not None:
        cache = ProbeCache(cache_dir)
        shared = {**setting(resolve(verifier).path, spec), "timeout_s": timeout_s}
        keys = [key(c.spec(), shared) for c in cells]
        results = {i: {**hit, "cached": True} for i, k in enumerate(keys) if (hit := cache.get(k)) is not None}
    todo = [i for i in range(len(cells)) if i not in results]
    bar = tqdm(total=len(todo), desc="probe", disable=not progress or not todo)
    try:
        if todo:  # the worker is told every cell (its build takes the longest TTT) and runs only these
            ran = _run([cells[i] for i in todo], {**spec, "cells": [cells[i].spec() for i in todo]}, workdir,
                       timeout_s, startup_timeout_s, isolate_each, bar)
            for j, i in enumerate(todo):
                results[i] = ran[j]
                if cache is not None:
                    cache.put(keys[i], ran[j])
        return results
    finally:
        bar.close()
        shutil.rmtree(workdir, ignore_errors=True)
        release_later()  # the zygote waits for the next call a while, then gives its memory back


def _run(cells, spec, workdir: Path, timeout_s, startup_timeout_s, isolate_each, bar) -> dict[int, dict]:
    results: dict[int, dict] = {}
    remaining = list(range(len(cells)))
    launch = 0
    while remaining:
        launch += 1
        run = remaining[:1] if isolate_each else list(remaining)
        spec_path, events_path, log_path = (workdir / f"{n}-{launch}" for n in ("spec.json", "events.jsonl", "log"))
        spec_path.write_text(json.dumps({**spec, "run": run}))
        proc = _start(spec["device"], [str(spec_path), str(events_path)], log_path)
        try:
            outcome = _watch(proc, events_path, timeout_s, startup_timeout_s, results, bar, cells)
        except BaseException:  # Ctrl-C in the notebook or terminal: take the worker down with us
            _kill(proc)
            raise
        if outcome is not None:  # the worker died or hung: a row for the cell in flight, or for all if at startup
            index, row = outcome
            if index is None:  # no cell ran: the worker's failure, not a measurement of these cells (never cached)
                row["error"], row["measured"] = f"{row['error']}: {_tail(log_path)}", False
                for i in [r for r in run if r not in results]:
                    results[i] = dict(row)
                    bar.update(1)
            else:
                results[index] = row
                bar.update(1)
        remaining = [i for i in remaining if i not in results]
    return results


def _start(device: str, args: list[str], log_path: Path) -> subprocess.Popen | Forked:
    """A worker running ``worker.main(*args)``, output into ``log_path``, in a session of its own: on a Linux CPU
    forked by the zygote (no import of speculators), else (or if the zygote cannot be asked) a fresh interpreter."""
    if device == "cpu" and sys.platform == "linux" and (forked := fork_worker(args, log_path)) is not None:
        return forked
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "eagle3kit.doctor.probe.worker", *args],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _kill(proc: subprocess.Popen | Forked) -> None:
    """SIGKILL the worker's own process group (it runs in a session of its own) and wait for it."""
    if isinstance(proc, Forked):
        proc.kill()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _watch(proc, events_path: Path, timeout_s, startup_timeout_s, results, bar, cells):
    """Follow one worker; record finished cells; return (cell or None, row) if it died or hung, else None."""
    started, current, cell_t0, seen = time.time(), None, None, 0
    ready, info = False, {}
    while True:
        events = _read_events(events_path)
        for ev in events[seen:]:
            if ev["event"] == "ready":
                ready = True
            elif ev["event"] == "start":
                current, cell_t0, info = ev["cell"], time.time(), {}
            elif ev["event"] == "info":
                info = {k: v for k, v in ev.items() if k not in ("event", "cell")}
            elif ev["event"] == "done":
                results[ev["cell"]] = {k: v for k, v in ev.items() if k not in ("event", "cell")}
                bar.update(1)
                bar.set_postfix_str(f"{cells[ev['cell']].backend} {cells[ev['cell']].mode}: {ev['status']}")
                current = None
        seen = len(events)
        rc = proc.poll()
        if rc is not None:
            if current is not None:
                why = f"process died with {_signal_name(rc)}" if rc < 0 else f"process exited with code {rc}"
                return current, {**info, "status": "crashed", "error": why, "seconds": time.time() - cell_t0}
            if not ready:
                return None, {"status": "error", "error": f"worker failed before the first cell (exit {rc})"}
            return None if rc == 0 else (None, {"status": "error", "error": f"worker exited with code {rc}"})
        limit_hit = (current is not None and time.time() - cell_t0 > timeout_s) or (
            not ready and time.time() - started > startup_timeout_s)
        if limit_hit:
            _kill(proc)
            if current is None:
                return None, {"status": "timeout", "error": f"worker did not start within {startup_timeout_s:.0f}s"}
            return current, {**info, "status": "timeout", "error": f"no result within {timeout_s:.0f}s (killed)",
                             "seconds": time.time() - cell_t0}
        time.sleep(0.1)


def probe(verifier: str = "tiny", device: str = "auto", backends=BACKENDS, modes=MODES, seq_len: int = 256,
          ttt_steps: int = 3, seed: int = 0, timeout_s: float = 120, extra_cells: list[Cell] | None = None,
          repeats: int = 1, draft_vocab_size: int | None = None, isolate_each: bool = False,
          progress: bool = True, cache_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """The measured matrix: status, mask kind, seconds, loss, max |Δ loss| and draft-token agreement vs eager.

    ``extra_cells`` adds single cells (another sequence length, ``unset``) after the matrix. ``isolate_each`` starts
    a fresh process for every cell (slower; by default a process is restarted only after a crash or hang).
    ``repeats``: steps timed per cell (median); loss and tokens come from the first. ``draft_vocab_size``: a smaller
    draft vocab (first N ids) makes every step cheaper without touching attention. ``cache_dir``: cells measured
    there before with the same setting are read back (:func:`run_cells`); ``.attrs["cached"]`` counts them.
    """
    device = resolve_device(device)
    if not resolve(verifier).has_weights:  # fail early, in this process, with the verifier's own message
        raise UserError(f"verifier {verifier!r} is a config-only preset; the probe runs real steps: use 'tiny', "
                         "'smollm2' or a local HF directory.")
    cells = matrix_cells(backends, modes, seq_len, ttt_steps, repeats) + list(extra_cells or [])
    results = run_cells(cells, verifier, device, seed, timeout_s, isolate_each=isolate_each,
                        draft_vocab_size=draft_vocab_size, progress=progress, cache_dir=cache_dir)
    matrix = compare(cells, results)
    matrix.attrs["cached"] = sum(bool(r.get("cached")) for r in results.values())
    return matrix


def compare(cells: list[Cell], results: dict[int, dict]) -> pd.DataFrame:
    """One row per cell, with Δ loss and token agreement against the eager cell of the same mode and length."""
    reference = {(c.mode, c.seq_len, c.ttt_steps): results.get(i) for i, c in enumerate(cells) if c.backend == "eager"}
    rows = []
    for i, cell in enumerate(cells):
        res = results.get(i, {"status": "error", "error": "no result"})
        ref = reference.get((cell.mode, cell.seq_len, cell.ttt_steps))
        row = {"backend": cell.backend, "mode": cell.mode, "seq_len": cell.seq_len, "status": res["status"],
               "error": res.get("error", ""), "resolved": res.get("resolved", ""), "mask": res.get("mask", ""),
               "seconds": res.get("seconds"), "loss": res.get("loss"), "max_abs_dloss": None, "token_agreement": None,
               "peak_bytes": res.get("peak_bytes"), "spread": res.get("spread")}
        if res["status"] == "ok" and ref and ref.get("status") == "ok":
            row["max_abs_dloss"] = abs(res["loss"] - ref["loss"])
            if res.get("tokens") is None:  # eagle3kit's training step takes no draft argmax (teacher forcing)
                rows.append(row)
                continue
            pairs = [(a, b) for sa, sb in zip(res["tokens"], ref["tokens"], strict=True)
                     for a, b in zip(sa, sb, strict=True)]
            row["token_agreement"] = sum(a == b for a, b in pairs) / len(pairs)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def shown(matrix: pd.DataFrame, hide: tuple[str, ...] = ("loss",)) -> pd.DataFrame:
    """The probe's matrix as a notebook shows it: without ``hide`` (the raw loss; ``max_abs_dloss`` compares it with
    eager) and without the columns empty in every row (``peak_bytes`` off CUDA)."""
    kept = matrix.drop(columns=[c for c in hide if c in matrix.columns])
    return kept.loc[:, kept.notna().any(axis=0)]
