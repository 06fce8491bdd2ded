"""What τ live while training costs: the share of the training minutes that ``TrainSession.track_tau`` (the stepper's
and ``eagle3kit train --eval-every``'s measurement) adds at its default frequency, in one run.

    .venv/bin/python bench/live_tau.py [--data DIR] [--steps 56] [--every 10] [--threads 2] [--export DIR]

The demo's recipe (SmolLM2, 1024-token packs, draft vocab 2048, warm start from the last layer, hidden states in bf16
where the CPU has it) trains ``--steps`` steps with τ measured every ``--every``; the steps and the measurements are
timed in the same run. Without ``--data`` a data directory of 48 ShareGPT conversations is built once (cached). Writes
bench/results/live_tau.md / .json: the one-time setup (the verifier's replies), the first measurement (it also reads
the verifier's hidden states), the later ones (draft forwards only), and their share of the training time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.atomic import write_text  # noqa: E402
from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.train import live_tau  # noqa: E402
from eagle3kit.train.session import TrainSession  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path.home() / ".cache" / "eagle3kit" / "bench-live-tau-data"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, metavar="DIR")
    ap.add_argument("--steps", type=int, default=56, help="steps trained (the demo's 28 + 28)")
    ap.add_argument("--every", type=int, default=live_tau.EVERY)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--export", default=None, metavar="DIR", help="also export the draft trained (speculators format)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = args.data or DATA
    if args.data is None:
        build_dataset("smollm2", DATA, n_conversations=48, seq_length=1024, draft_vocab_size=2048, held_out=8,
                      dtype="native", progress=False)
    load_before = os.getloadavg()
    session = TrainSession(data, progress=False, total_seq_len=1024, warm_start_layer=-1, hidden_states_dtype="native",
                           max_steps=max(args.steps, 56))
    t0 = time.perf_counter()
    live = session.track_tau(args.every)
    setup = time.perf_counter() - t0
    session.run(args.steps)
    steps = [r["seconds"] for r in session.history]
    measured = [r[live_tau.TAU_SECONDS] for r in session.history if live_tau.TAU in r]
    step = statistics.median(steps)
    later = statistics.median(measured[1:]) if len(measured) > 1 else float("nan")
    share = later / (args.every * step)
    whole = (setup + sum(measured)) / sum(steps)
    result = {"steps": args.steps, "every": args.every, "prompts": len(live.prompts),
              "reply_tokens": sum(map(len, live.conts)), "step_s_median": round(step, 3),
              "setup_s": round(setup, 2), "first_measurement_s": round(measured[0], 3) if measured else None,
              "later_measurement_s_median": round(later, 3), "share_at_default_frequency": round(share, 4),
              "share_of_this_run_with_setup": round(whole, 4),
              "taus": [round(r[live_tau.TAU], 3) for r in session.history if live_tau.TAU in r],
              "load_before": load_before, "load_after": os.getloadavg(), "cpus": os.cpu_count(),
              "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
              "hidden_states_dtype": session.settings.hidden_states_dtype}
    out = Path(args.out)
    write_text(out / "live_tau.json", json.dumps(result, indent=1) + "\n")
    lines = ["# τ live while training: its cost", "",
             f"`python bench/live_tau.py --steps {args.steps} --every {args.every}`: the demo's recipe (SmolLM2, "
             f"1024-token packs, draft vocab 2048, {session.settings.hidden_states_dtype}), τ simulated on "
             f"{result['prompts']} held-out prompts ({result['reply_tokens']} reply tokens) every {args.every} steps; "
             f"one run on {os.cpu_count()} cores, load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}.", "",
             "| measure | seconds |", "|---|---:|",
             f"| a training step (median) | {step:.3f} |",
             f"| setup, once: the verifier loaded, its greedy replies written | {setup:.2f} |",
             f"| first measurement (reads the verifier's hidden states once) | {result['first_measurement_s']} |",
             f"| each later measurement (draft forwards only, median) | {later:.3f} |", "",
             f"**Share of the training time at the default frequency** (a later measurement / {args.every} steps): "
             f"**{share:.1%}**. This run, setup and first measurement included: {whole:.1%} of {sum(steps):.0f} s of "
             f"training. τ measured: {result['taus']}.", ""]
    write_text(out / "live_tau.md", "\n".join(lines))
    print("\n".join(lines))
    if args.export:
        print(f"exported: {session.export(args.export)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
