"""Run an EAGLE-3 draft in vLLM (CPU build) and the verifier alone on the same token-id prompts; write JSON.

Standalone on purpose: it runs with the vLLM environment's python, which has no eagle3kit, and imports only vllm and
the standard library::

    .venv-vllm/bin/python worker.py spec.json out.json

``spec.json``: ``verifier`` (HF directory), ``draft`` (exported draft directory), ``k``, ``prompts`` (lists of token
ids) or ``sets`` (named lists of them, generated together as one batch, in order), ``max_new_tokens``; optional
``runs`` (default ``["draft", "plain"]``), ``kv_cache_gb`` (2), ``dtype`` ("float32"), ``max_model_len``,
``max_num_seqs`` (vLLM's default: all at once), ``step_times`` (true). Each run builds its own ``vllm.LLM`` in a fresh
child process (vLLM does not hand its memory back reliably within one process); the children start their engines
together and then generate one at a time, so the tokens/s of each run are measured
alone. ``out.json``: ``{"vllm_version", "runs":
{"draft": {...}, "plain": {...}}}`` with, per run, the generated token ids per prompt, seconds, tokens/s, (with the
draft) vLLM's spec-decode counters, the 1-minute load average before and after, and, per engine step of the timed
generation, what :class:`StepTimer` measured; with the draft, each prompt's histogram of rounds by accepted draft
tokens (vLLM's per-request speculative-decoding metrics) and, per set, its counters summed from them
(:func:`set_counters`); ``engine_in_process`` (true): the engine core runs in the run's own process.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def read_counters(metrics: list[Any]) -> dict[str, Any]:
    """The spec-decode counters from ``llm.get_metrics()``, summed over engines."""
    out: dict[str, Any] = {name: 0 for name in COUNTERS.values()}
    per_pos: list[int] = []
    for m in metrics:
        if m.name in COUNTERS:
            out[COUNTERS[m.name]] += int(m.value)
        elif m.name == PER_POS:
            values = [int(v) for v in m.values]
            per_pos = [a + b for a, b in zip(per_pos, values, strict=False)] + values[len(per_pos):]
    out["accepted_per_pos"] = per_pos
    return out


def set_counters(histograms: list[list[int]], k: int) -> dict[str, Any]:
    """The spec-decode counters of some prompts, summed from their per-request histograms (``h[j]``: rounds with j
    draft tokens accepted): the counts vLLM's aggregate counters sum over every prompt."""
    drafts = sum(sum(h) for h in histograms)
    return {"drafts": drafts, "draft_tokens": k * drafts,
            "accepted": sum(j * n for h in histograms for j, n in enumerate(h)),
            "accepted_per_pos": [sum(n for h in histograms for j, n in enumerate(h) if j > i) for i in range(k)]}


def named_sets(spec: dict[str, Any]) -> dict[str, list[list[int]]]:
    """The spec's prompt sets in order (``prompts`` alone: one set named ``all``)."""
    return dict(spec["sets"]) if spec.get("sets") else {"all": spec["prompts"]}


class StepTimer:
    """Mixed into vLLM's worker (``worker_extension_cls="worker.StepTimer"``; called by name through
    ``collective_rpc``): the wall time of each engine step of the model runner, and of its two parts, the verifier
    (its forward and logits) and the drafter (``propose_draft_token_ids``: its k forwards, logits and input
    preparation). A CPU runs them synchronously, so wall time is their cost."""

    def install_step_timer(self) -> None:
        runner = self.model_runner
        steps: list[dict[str, Any]] = []
        runner.eagle3kit_steps = steps

        def wrap(owner, name: str, key: str | None, start: bool = False) -> None:
            inner = getattr(owner, name)

            def timed(*args, **kwargs):
                if start:  # execute_model opens a step: requests and tokens scheduled
                    out = args[0] if args else kwargs.get("scheduler_output")
                    steps.append({"reqs": len(out.num_scheduled_tokens), "tokens": out.total_num_scheduled_tokens,
                                  "step_s": 0.0, "verifier_s": 0.0, "draft_s": 0.0, "draft_forwards": 0})
                t0 = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    if steps:
                        seconds = time.perf_counter() - t0
                        if key:
                            steps[-1][key] += seconds
                        if name in ("execute_model", "sample_tokens"):
                            steps[-1]["step_s"] += seconds

            setattr(owner, name, timed)

        wrap(runner, "execute_model", None, start=True)
        wrap(runner, "sample_tokens", None)
        wrap(runner, "_model_forward", "verifier_s")
        wrap(runner.model, "compute_logits", "verifier_s")
        drafter = getattr(runner, "drafter", None)
        if drafter is not None:
            wrap(runner, "propose_draft_token_ids", "draft_s")

            def count(_module, _inputs) -> None:
                if steps:
                    steps[-1]["draft_forwards"] += 1

            drafter.model.register_forward_pre_hook(count)

    def step_times(self) -> list[dict[str, Any]]:
        return [s for s in self.model_runner.eagle3kit_steps if s["tokens"]]


def _take_turn(spec: dict[str, Any], run: str, timeout_s: float = 900.0):
    """Wait until every run's engine is built (``spec["sync_dir"]``), then take the lock that this process holds until
    it exits: one run's timed generation never shares the CPU with another's start, generation or shutdown. Returns
    the lock's file (keep it open), or None without ``sync_dir``."""
    if not spec.get("sync_dir"):
        return None
    sync = Path(spec["sync_dir"])
    (sync / f"{run}.ready").touch()
    deadline = time.monotonic() + timeout_s
    while not all((sync / f"{r}.ready").exists() for r in spec.get("runs", ["draft", "plain"])):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    lock = open(sync / "generate.lock", "w")  # noqa: SIM115 (closed when the process exits)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def run_one(spec: dict[str, Any], run: str) -> dict[str, Any]:
    """Build one ``vllm.LLM`` (with the draft when ``run == "draft"``), generate greedily, time it."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(spec.get("kv_cache_gb", 2)))
    if spec.get("engine_in_process", True):  # no engine-core process: one python fewer to start and import vllm in
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kwargs: dict[str, Any] = {"dtype": spec.get("dtype", "float32"), "enforce_eager": True,
                              "distributed_executor_backend": "uni",
                              "disable_log_stats": False, "seed": 0}
    for key in ("max_model_len", "max_num_seqs"):
        if spec.get(key):
            kwargs[key] = int(spec[key])
    timed = spec.get("step_times", True)
    if timed:  # this file's StepTimer, imported by vLLM's engine process (it inherits this script's sys.path)
        kwargs["worker_extension_cls"] = f"{Path(__file__).stem}.StepTimer"
    if run == "draft":  # per-request metrics: each prompt's rounds by accepted draft tokens (its own τ)
        kwargs["speculative_config"] = {"method": "eagle3", "model": spec["draft"],
                                        "num_speculative_tokens": int(spec["k"])}
        kwargs["per_request_spec_decode_metrics"] = "summary"
    t0 = time.perf_counter()
    llm = LLM(model=spec["verifier"], **kwargs)
    load_s = time.perf_counter() - t0
    params = SamplingParams(temperature=0.0, max_tokens=int(spec["max_new_tokens"]), ignore_eos=False)
    sets = named_sets(spec)
    prompts = [TokensPrompt(prompt_token_ids=list(p)) for group in sets.values() for p in group]
    if timed:
        llm.collective_rpc("install_step_timer")
    turn = _take_turn(spec, run)  # noqa: F841 (held while this process lives)
    load, t0 = os.getloadavg()[0], time.perf_counter()
    results = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    outputs = [list(r.outputs[0].token_ids) for r in results]
    generated = sum(len(o) for o in outputs)
    record: dict[str, Any] = {"outputs": outputs, "seconds": seconds, "load_seconds": load_s,
                              "generated_tokens": generated, "tokens_per_s": generated / seconds if seconds else 0.0,
                              "vllm_version": vllm.__version__, "load": [load, os.getloadavg()[0]]}
    if run == "draft":
        record["counters"] = read_counters(llm.get_metrics())
        record["histograms"] = [list(getattr(r.outputs[0].spec_decode_metrics, "histogram", None) or [])
                                for r in results]
    record["sets"], start = {}, 0
    for name, group in sets.items():  # each set's slice of the one batch
        end = start + len(group)
        record["sets"][name] = {"start": start, "end": end}
        if run == "draft":
            record["sets"][name]["counters"] = set_counters(record["histograms"][start:end], int(spec["k"]))
        start = end
    if timed:
        record["steps"] = llm.collective_rpc("step_times")[0]
    alone = prompts[:int(spec.get("alone", 0))]
    if alone:  # a few prompts one at a time, after the batch (its counters and step times are read above)
        t0 = time.perf_counter()
        done = [llm.generate([p], params, use_tqdm=False)[0] for p in alone]
        record["alone"] = {"prompts": len(alone), "tokens": sum(len(r.outputs[0].token_ids) for r in done),
                           "seconds": time.perf_counter() - t0}
    return record


def main(argv: list[str]) -> int:
    """``spec.json out.json`` runs every run in a child; ``--one RUN spec.json out.json`` runs one here."""
    if argv[:1] == ["--one"]:
        run, spec_path, out_path = argv[1:4]
        record = run_one(json.loads(Path(spec_path).read_text()), run)
        Path(out_path).write_text(json.dumps(record))
        return 0
    if len(argv) != 2:
        print("usage: worker.py spec.json out.json", file=sys.stderr)
        return 2
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text())
    runs: dict[str, Any] = {}
    names = spec.get("runs", ["draft", "plain"])
    parts = {run: out_path.with_name(f"{out_path.stem}.{run}.json") for run in names}
    # the engines start together: most of a CPU engine's ~45 s start is single-threaded Python (imports, the
    # engine-core process), so two overlap on 2 cores (one after the other: ~105 s of the check's ~130)
    sync = out_path.with_name(f"{out_path.stem}.sync")
    sync.mkdir(exist_ok=True)
    synced = out_path.with_name(f"{out_path.stem}.spec.json")
    synced.write_text(json.dumps({**spec, "sync_dir": str(sync)}))
    procs = {run: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--one", run, str(synced),
                                    str(part)]) for run, part in parts.items()}
    while any(proc.poll() is None for proc in procs.values()):
        failed = [(run, proc.returncode) for run, proc in procs.items() if proc.returncode not in (None, 0)]
        if failed:  # the other run would wait for it at the barrier: stop it too
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
            print(f"worker.py: the {failed[0][0]!r} run exited with code {failed[0][1]}", file=sys.stderr)
            return failed[0][1]
        time.sleep(0.5)
    for run, proc in procs.items():
        if proc.returncode != 0:
            print(f"worker.py: the {run!r} run exited with code {proc.returncode}", file=sys.stderr)
            return proc.returncode
    for run, part in parts.items():
        runs[run] = json.loads(part.read_text())
        part.unlink()
    version = next(iter(runs.values()))["vllm_version"] if runs else None
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(json.dumps({"vllm_version": version, "runs": runs}))
    tmp.replace(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
