"""Everything eagle3kit says about the GPU run, checked in one command (runs on a CPU as far as a CPU allows).

    python bench/gpu.py --out DIR [--budget-s 480] [--steps 8]     # the run (docs/benchmarks.md)
    python bench/gpu.py --prepare                                    # here, once: .gpu/ for the device's carry

Stages, each guarded (a failure is a row, the next stage runs) and each with its share of ``--budget-s``:

handoff   ``eagle3kit data`` (tiny verifier, 80 conversations of <= 384 tokens), ``eagle3kit launch --gpus 1``
          (+ ``speculators train --dry-run``, on the CPU), ``--steps`` steps of speculators' own trainer in one
          process (:func:`eagle3kit.train.rehearsal.run.rehearse`: its per-step records read back), the same steps of
          ``TrainSession`` with the settings and draft speculators resolved, the loss per TTT step side by side,
          both drafts exported (bf16, as speculators' checkpointer saves) and τ of both on the same held-out prompts.
          On a CPU the rehearsal presents the CPU as the accelerator and trains sdpa, eager loss, float32.
matrix    the backend matrix (``eagle3kit probe``): eager / sdpa / simple_flex_attention, forward and
          forward+backward at 2k, 8k, 32k tokens (CPU: 256, 512), ``torch.cuda.max_memory_allocated`` of each
          forward+backward step beside what :mod:`eagle3kit.plan.memory` predicts for the same step (fp32, eager loss,
          no optimizer state: the probe steps no optimizer).
cpu_memory (CPU only) the planner beside :func:`eagle3kit.train.measured_memory.measure_training_step` on the
          hand-off data.
tests     ``pytest -m cuda`` (junit XML; on a CPU every test is skipped).

Tolerance of the loss comparison: |speculators - eagle3kit| <= 1e-3 + 2e-2 x |speculators| per step and TTT step.
Both trainers run the same compiled forward in bf16 autocast on the same weights and batches; what differs is
process-level: Triton autotuning may pick other kernels (another reduction order: ~2^-8 relative, bf16's epsilon,
per op), flex attention's backward accumulates with atomics (not bit-reproducible), and AdamW's first updates are
~lr x sign(grad), so a near-zero gradient of other sign moves a weight by 2 x lr. Over a few steps at lr 1e-3 that
stays well inside 2%; a real mismatch (other batches, another init, Muon vs AdamW, another schedule) moves the loss by
far more at step 2 already. τ of the two exports: equal within one accepted token in 100 (bf16 weights that differ
by rounding may flip a near-tie draft token).
Writes into --out (the device returns at most 8 files): gpu.json, gpu.md, trainer.log, speculators.log, pytest-cuda.xml,
pytest.log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
CARRY = ROOT / ".gpu"  # what the device run needs from here: wheels, the tiny verifier, a ShareGPT slice
WHEELS = ("speculators==0.9.0", "hs-connectors==0.9.0", "datasets==5.1.0", "dill==0.4.1", "multiprocess==0.70.19",
          "loguru==0.7.3", "pydantic==2.14.4", "pydantic-core==2.50.5", "pydantic-settings==2.16.3",
          "python-dotenv==1.2.4", "annotated-types==0.8.0", "typing-inspection==0.4.5",
          # speculators.train.data imports openai: it and what it needs that the image lacks
          "openai==3.63.0", "httpx2==2.17.0", "httpcore2==2.17.0", "truststore==0.10.5", "jiter==0.19.0",
          "sniffio==1.3.1")  # absent from the device image (KINDS.md's package list), as this venv pins them
SHARES = {"handoff": 0.4, "matrix": 0.3, "tests": 0.3}  # of --budget-s; the last stage takes what is left
RTOL, ATOL = 2e-2, 1e-3
SEQ, DATA_SEQ, VOCAB = 1024, 384, 512
PY = sys.executable


def prepare() -> None:
    """Fill .gpu/: the wheels the device image lacks, the tiny verifier (EAGLE3KIT_CACHE layout), a ShareGPT slice."""
    import shutil

    from eagle3kit.data.conversations import write_sharegpt_slice
    from eagle3kit.verifier import make_tiny

    (CARRY / "whl").mkdir(parents=True, exist_ok=True)
    subprocess.run([PY, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                    "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform",
                    "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(CARRY / "whl"),
                    *WHEELS], check=True)
    tiny = make_tiny()
    target = CARRY / "cache" / "verifiers" / tiny.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(tiny, target)
    write_sharegpt_slice(CARRY / "sharegpt.json", 400)
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    print(f"{CARRY}: {size / 2**20:.1f} MiB (the device's tree limit is 64 MiB)")


# ----------------------------------------------------------------------------------------------- helpers
def run(cmd: list[str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
    """A subprocess with a time limit; its output appended to ``log`` (or returned)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), check=False,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"})
    if log is not None:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{proc.stdout[-20000:]}\n{proc.stderr[-20000:]}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exit {proc.returncode}: {tail}")
    return proc


def records(df: pd.DataFrame) -> list[dict]:
    return json.loads(df.to_json(orient="records"))


def machine() -> dict:
    versions = {}
    for name in ("torch", "triton", "transformers", "speculators", "datasets", "pyarrow", "pydantic"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"python": platform.python_version(), "gpu": gpu, "cpus": os.cpu_count(), **versions}


# ----------------------------------------------------------------------------------------------- stages
def handoff(result: dict, out: Path, work: Path, steps: int, loss: str, deadline: float, cuda: bool) -> None:
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.export import reload
    from eagle3kit.train import handoff as ho
    from eagle3kit.train.launch import validate_yaml
    from eagle3kit.train.rehearsal import compare
    from eagle3kit.train.rehearsal.run import rehearse
    from eagle3kit.verifier import load_model, load_tokenizer

    log = out / "trainer.log"
    data, launch = work / "data", work / "launch"
    t0 = time.perf_counter()
    run([PY, "-m", "eagle3kit.cli", "data", "--verifier", "tiny", "--out", str(data), "--n-conversations", "80",
         "--seq-length", str(DATA_SEQ), "--draft-vocab-size", str(VOCAB), "--held-out", "8"],
        deadline - time.time(), log)
    result["data_seconds"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    run([PY, "-m", "eagle3kit.cli", "launch", "--data", str(data), "--out", str(launch), "--gpus", "1",
         "--total-seq-len", str(SEQ), "--max-steps", str(steps), "--epochs", "1", "--warmup-steps", "0",
         "--loss-implementation", loss, "--seed", "0", "--dry-run"], deadline - time.time(), log)
    result["launch_and_dry_run"] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1),
                                    "yaml": (launch / "run.yaml").read_text()}
    t0 = time.perf_counter()
    rehearsal = rehearse(launch / "run.yaml", work / "rehearsal", steps=steps, timeout=max(60, deadline - time.time()),
                         progress=False)  # speculators' own trainer; on a CPU with the CPU presented (sdpa, float32)
    shutil.copy(rehearsal.log, log.with_name("speculators.log"))
    result["speculators"] = {"ok": rehearsal.ok, "seconds": round(time.perf_counter() - t0, 1),
                             "command": " ".join(rehearsal.command), "overrides": rehearsal.overrides,
                             **({} if rehearsal.ok else {"error": rehearsal.log_tail()[-1500:]})}
    t0 = time.perf_counter()
    session = compare.session_for(rehearsal, device="cuda" if cuda else "cpu")
    result["initial_weights"] = ho.initial_weights(session.model, launch / "dry_run" / "model.safetensors")
    n = min(steps, len(session.batches))
    session.run(n)
    ours = session.history_frame()
    result["session"] = {"ok": True, "seconds": round(time.perf_counter() - t0, 1), "steps": n,
                         "attention": session.build.attention.implementation,
                         "loss_implementation": session.settings.loss_implementation,
                         "dtype": session.settings.hidden_states_dtype,
                         "loss_per_ttt_step": records(ho.per_ttt_step(ours, session.ttt_steps))}
    theirs = rehearsal.metrics()
    if len(theirs):
        table = ho.side_by_side(theirs, ours, session.ttt_steps, RTOL, ATOL)
        result["side_by_side"] = {"rtol": RTOL, "atol": ATOL, "all_within": bool(table["within"].all()),
                                  "max_abs_diff": float(table["abs_diff"].max()), "rows": records(table)}
        print(table.to_string(), flush=True)

    drafts = {"eagle3kit TrainSession": session.export(work / "export_session", dtype="bfloat16")}
    if result["speculators"]["ok"]:
        drafts["speculators train"] = rehearsal.checkpoint()
    verifier = validate_yaml(launch / "run.yaml").verifier.verifier_name_or_path
    tok = load_tokenizer(verifier)
    prompts = ev.chat_prompts(tok, held_out_conversations(data), 8, 128)
    table, _sim, _real = ev.compare(load_model(verifier), tok, {k: reload(p) for k, p in drafts.items()}, prompts,
                                    32, session.ttt_steps, run_decode=True, progress=False)
    result["tau"] = records(table)
    print(table.to_string(), flush=True)


def matrix(result: dict, sizes: list[int], vocab: int, deadline: float, cuda: bool) -> None:
    from eagle3kit.doctor.probe.matrix import MODES, Cell, compare, run_cells
    from eagle3kit.draft.config import build_config
    from eagle3kit.plan.memory import CPU_FP32, StepSettings, memory_parts
    from eagle3kit.plan.shapes import draft_shape

    backends = ("eager", "sdpa", "simple_flex_attention")
    parts, skipped = [], []
    for i, size in enumerate(sizes):  # smallest first; one worker per size; what the budget leaves out is said
        left = deadline - time.time()
        if left < 30:
            skipped.append(size)
            continue
        cells = [Cell(b, m, size, 3) for b in backends for m in MODES]
        per_cell = min(120.0, max(45.0, left / (len(sizes) - i) / len(cells) * 3))  # compiles take the first cells
        parts.append(compare(cells, run_cells(cells, "tiny", "cuda" if cuda else "cpu", timeout_s=per_cell,
                                              draft_vocab_size=vocab, progress=False)))
    if skipped:
        result["skipped_sizes"] = f"skipped: the budget ran out before {skipped}"
    table = pd.concat(parts, ignore_index=True)
    shape = draft_shape(build_config(verifier="tiny", ttt_steps=3, draft_vocab_size=vocab, device="cpu"))
    predicted = []
    for _, row in table.iterrows():
        if row["mode"] != "forward+backward":
            predicted.append(None)  # the planner accounts for training steps, not no-grad forwards
            continue
        parts = memory_parts(shape, StepSettings(int(row["seq_len"]), "eager", "adamw", row["backend"], CPU_FP32))
        predicted.append(sum(v for k, v in parts.items() if k != "optimizer state"))
    table["predicted_bytes"] = predicted
    table["predicted/measured"] = [p / m if p and m and m == m else None
                                   for p, m in zip(table["predicted_bytes"], table["peak_bytes"], strict=True)]
    print(table.drop(columns=["error"]).to_string(), flush=True)
    result.update(draft_vocab_size=vocab, rows=records(table))


def cpu_memory(result: dict, data: Path, sizes: list[int]) -> None:
    from eagle3kit.draft.config import build_config
    from eagle3kit.plan.memory import CPU_FP32, StepSettings, total_bytes
    from eagle3kit.plan.shapes import draft_shape
    from eagle3kit.train.measured_memory import measure_training_step

    build = build_config(verifier="tiny", draft_vocab_size=VOCAB, attn_implementation="sdpa", device="cpu")
    shape = draft_shape(build)
    rows = result["rows"] = []
    for t in sizes:
        measured = measure_training_step(build, data, t).total
        predicted = total_bytes(shape, StepSettings(t, "eager", "adamw", "sdpa", CPU_FP32))
        rows.append({"total_seq_len": t, "measured_bytes": measured, "predicted_bytes": predicted,
                     "predicted/measured": round(predicted / measured, 3)})
    print(pd.DataFrame(rows).to_string(), flush=True)


def tests(counts: dict, out: Path, deadline: float) -> None:
    xml = out / "pytest-cuda.xml"
    # modules that import what the device image lacks (papermill, nbformat, ...) hold no cuda test: collect the rest
    cmd = [PY, "-m", "pytest", "-m", "cuda", "-q", "-rA", "-p", "no:cacheprovider", "--continue-on-collection-errors",
           f"--junitxml={xml}", "tests"]
    with open(out / "pytest.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=max(1.0, deadline - time.time() - 30))  # 30 s left for Ctrl-C
        except subprocess.TimeoutExpired:  # Ctrl-C: pytest stops and still writes its junit report
            proc.send_signal(signal.SIGINT)
            try:
                rc = f"interrupted at the deadline (exit {proc.wait(timeout=30)})"
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed at the deadline"
    counts["exit"] = rc
    if xml.exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        counts.update({k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")})
        counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        counts["not_passed"] = [{"test": f"{c.get('classname')}::{c.get('name')}", "outcome": child.tag,
                                 "message": (child.get("message") or "")[:300]}
                                for c in suite.iter("testcase") for child in c
                                if child.tag in ("failure", "error", "skipped")]


# ----------------------------------------------------------------------------------------------- report
def stage_lines(name: str, stage: dict) -> list[str]:
    """The Markdown of one stage's results (what it got to before a failure, if one stopped it)."""
    from eagle3kit.tables import markdown_table

    lines = []
    if name == "handoff" and "session" in stage:
        s = stage["session"]
        w = stage["initial_weights"]
        lines += [f"Initial draft: TrainSession's seeded weights vs `speculators train --dry-run`'s ({w['tensors']} "
                  f"tensors, cast to {w['dtype']}): equal {w['equal']}, max |diff| {w['max_abs_diff']:.3g}", "",
                  "speculators train: " + (f"ran ({stage['speculators']['seconds']} s; flags over the YAML: "
                                           f"{stage['speculators']['overrides']})" if stage['speculators']['ok']
                                           else stage['speculators'].get('error', '')[:300]),
                  "", f"Loss per TTT step, {s['steps']} steps; TrainSession: {s['attention']}, "
                      f"{s['loss_implementation']} loss, {s['dtype']}"
                  + (f"; within {RTOL:g} rel + {ATOL:g} abs: {stage['side_by_side']['all_within']}"
                     if "side_by_side" in stage else ""), "",
                  markdown_table(pd.DataFrame(stage.get("side_by_side", {}).get("rows") or s["loss_per_ttt_step"]))]
    if name == "handoff" and "tau" in stage:
        lines += ["", "τ on the same held-out prompts:", "", markdown_table(pd.DataFrame(stage["tau"]))]
    if name == "matrix" and "rows" in stage:
        df = pd.DataFrame(stage["rows"]).drop(columns=["resolved", "tokens"], errors="ignore")
        df["error"] = df["error"].str.slice(0, 60)
        lines += [f"draft vocab {stage['draft_vocab_size']}, fp32, eager loss; predicted: eagle3kit.plan.memory "
                  "(no optimizer state)" + (f"; {stage['skipped_sizes']}" if "skipped_sizes" in stage else ""), "",
                  markdown_table(df)]
    if name == "cpu_memory" and "rows" in stage:
        lines += ["TrainSession-sized step (PlainLoop, sdpa, eager loss, AdamW) measured by "
                  "eagle3kit.train.measured_memory",
                  "", markdown_table(pd.DataFrame(stage["rows"]))]
    if name == "tests" and "tests" in stage:
        lines += [f"pytest -m cuda: {stage['passed']} passed, {stage['skipped']} skipped, {stage['failures']} failed, "
                  f"{stage['errors']} errors"]
        if stage["not_passed"]:
            lines += ["", markdown_table(pd.DataFrame(stage["not_passed"]))]
    return lines


def markdown(report: dict) -> str:
    lines = [f"# bench/gpu.py — {report['machine'].get('gpu') or 'CPU only'}", "",
             "```", json.dumps(report["machine"]), "```"]
    for name, stage in report["stages"].items():
        lines += ["", f"## {name} ({stage.get('seconds', '?')} s)", ""]
        if "error" in stage:
            lines += [f"**failed**: {stage['error'][-800:]}", ""]
        lines += stage_lines(name, stage)
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for gpu.json, gpu.md and the logs")
    p.add_argument("--budget-s", type=float, default=480, help="the whole run's seconds (stages share it)")
    p.add_argument("--steps", type=int, default=16, help="training steps of each trainer (at most one epoch)")
    p.add_argument("--loss", default="eager", choices=["eager", "fused"],
                   help="loss implementation of both trainers (fused needs torch >= 2.12 under compile)")
    p.add_argument("--stages", nargs="+", default=["handoff", "matrix", "cpu_memory", "tests"])
    p.add_argument("--prepare", action="store_true", help="fill .gpu/ (wheels, tiny verifier, ShareGPT slice)")
    args = p.parse_args()
    if args.prepare:
        prepare()
        return 0
    if args.out is None:
        p.error("--out DIR is required")
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    start = time.time()
    end = start + args.budget_s
    report: dict = {"machine": machine(), "budget_s": args.budget_s, "stages": {}}
    work = Path(tempfile.mkdtemp(prefix="eagle3kit-gpu-"))
    for name in args.stages:
        if name == "cpu_memory" and cuda:
            continue  # on a GPU the matrix's peaks are the check; the CPU measurement is bench/plan.py's
        left = end - time.time()
        # its share of the budget; the last stage takes whatever is left
        deadline = end if name == args.stages[-1] else time.time() + min(left, SHARES.get(name, 0.2) * args.budget_s)
        t0 = time.perf_counter()
        print(f"== {name} ({deadline - time.time():.0f} s)", flush=True)
        stage: dict = {}  # filled as the stage goes: a failure keeps what came before it
        try:
            if left < 10:
                raise TimeoutError(f"skipped: the budget of {args.budget_s:.0f} s is spent")
            if name == "handoff":
                handoff(stage, args.out, work, args.steps, args.loss, deadline, cuda)
            elif name == "matrix":
                matrix(stage, [2048, 8192, 32768] if cuda else [256, 512], 4096, deadline, cuda)
            elif name == "cpu_memory":
                cpu_memory(stage, work / "data", [DATA_SEQ + 128, SEQ])
            elif name == "tests":
                tests(stage, args.out, deadline)
            else:
                raise ValueError(f"unknown stage {name!r}")
        except Exception as exc:  # noqa: BLE001 - one failing stage must not stop the others
            traceback.print_exc()
            stage["error"] = f"{type(exc).__name__}: {exc}"
        stage["seconds"] = round(time.perf_counter() - t0, 1)
        report["stages"][name] = stage
        (args.out / "gpu.json").write_text(json.dumps(report, indent=1, default=str))  # after every stage
    report["seconds"] = round(time.time() - start, 1)
    (args.out / "gpu.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "gpu.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
