"""Benchmark: the EAGLE-3 mask at 32,768 tokens x 3 TTT steps: build + stats + render, time and peak RSS.

Run: .venv/bin/python bench/masks.py [--tokens 32768] [--ttt-steps 3] [--repeats 5] [--baseline 8192]
Goal (issue 5): warm build + stats + render <= 5 s and <= 300 MB extra peak RSS on the 2-core machine.
The first call (torch.compile of create_block_mask) is reported on its own row. Peak RSS is the kernel's VmHWM,
reset before each measured call through /proc/self/clear_refs, minus the RSS at that moment.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time
from pathlib import Path

import torch

from eagle3kit.masks import plots as mask_plots
from eagle3kit.masks.eagle_mask import build_mask
from eagle3kit.data.layouts import pack, sharegpt_lengths
from eagle3kit.masks.stats import stats
from eagle3kit.verifier import load_tokenizer


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def reset_peak() -> int:
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmRSS")


def measure(fn):
    """(wall seconds, extra peak RSS bytes, (result, CPU seconds)) of one call."""
    base = reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - t0, _status("VmHWM") - base, (result, time.process_time() - c0)


def one_run(lengths, tokens, ttt_steps, compile):
    times = {}
    t0 = time.perf_counter()
    mask = build_mask(lengths, tokens, ttt_steps, compile=compile)
    times["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = stats(mask)
    times["stats"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for fig in (mask_plots.plot_token_mask(mask), mask_plots.plot_block_map(mask), mask_plots.plot_stats(mask, table)):
        fig.savefig(io.BytesIO(), format="png", dpi=72)
    times["render"] = time.perf_counter() - t0
    return times, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32768)
    parser.add_argument("--ttt-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=int, default=8192,
                        help="also time speculators' uncompiled create_block_mask at this length (0: skip)")
    args = parser.parse_args()
    torch.set_num_threads(2)

    lengths = pack(sharegpt_lengths(load_tokenizer("smollm2"), n=400, seed=0), args.tokens - 64)
    print(f"layout: {len(lengths)} ShareGPT conversations (SmolLM2 chat template), {sum(lengths)} tokens "
          f"+ {args.tokens - sum(lengths)} padding = {args.tokens} x {args.ttt_steps} TTT steps\n")

    first_s, first_rss, ((_, table), first_cpu) = measure(lambda: one_run(lengths, args.tokens, args.ttt_steps, True))
    rows = [("first call (compile + build + stats + render)", first_s, first_rss, first_cpu)]
    runs = [measure(lambda: one_run(lengths, args.tokens, args.ttt_steps, True)) for _ in range(args.repeats)]
    for part in ("build", "stats", "render"):
        rows.append((f"  warm {part}", statistics.median(r[2][0][0][part] for r in runs), None, None))
    total = statistics.median(r[0] for r in runs)
    rss = statistics.median(r[1] for r in runs)
    cpu = statistics.median(r[2][1] for r in runs)
    rows.append((f"warm build + stats + render (median of {args.repeats})", total, rss, cpu))
    last = table.iloc[-1]
    rows.append(("BlockMask tables at the last step (held)", None, int(last.blockmask_bytes), None))
    dense = f"dense bool mask {args.tokens}x{int(last.kv_len)} (sdpa; not built)"
    rows.append((dense, None, int(last.dense_bool_bytes), None))
    rows.append(("dense bf16 float mask (eager; not built)", None, int(last.dense_float_bytes), None))
    if args.baseline:
        ids = [n for n in lengths if n <= args.baseline][:1] or [args.baseline]
        s, r, (_, c) = measure(lambda: build_mask(ids, args.baseline, 1, compile=False))
        rows.append((f"speculators' uncompiled create_block_mask at {args.baseline} tokens", s, r, c))

    print(f"{'what':<62} {'wall s':>8} {'cpu s':>8} {'MB':>10}")
    for what, s, b, c in rows:
        wall, mb = "" if s is None else f"{s:8.2f}", "" if b is None else f"{b / 2**20:10.1f}"
        print(f"{what:<62} {wall:>8} {'' if c is None else f'{c:8.2f}':>8} {mb:>10}")
    ok = total <= 5 and rss <= 300 * 2**20
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"\ngoal (<= 5 s, <= 300 MB extra peak RSS, warm): {'met' if ok else 'NOT met'}; "
          f"first-call compile overhead {first_s - total:.1f} s; load average {load} on {os.cpu_count()} cores "
          f"(wall times grow with it; cpu = this process's CPU seconds)")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
