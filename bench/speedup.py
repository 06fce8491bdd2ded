"""From τ to speed: eagle3kit.plan.serving_speed against published EAGLE-3 (τ, speedup) pairs, and this CPU's vLLM
measurement against the speedup its own step costs imply.

    .venv/bin/python bench/speedup.py --draft runs/demo/work/draft_06 --data runs/demo/work/data \\
        [--batches 16 1] [--repeats 2] [--out bench/results]

published  every point of eagle3kit.plan.published_speedups (vllm issue 20780's k sweep, SGLang PR 4247 / docs,
           SGLang PR 4716): its setting, τ, the published speedup, the model's (its own plain step fixes the
           verifier's overhead; the draft's and the round's come from vllm issue 20780), their ratio
cpu        the draft served by vLLM's CPU build (`eagle3kit.evaluate.vllm.serve.check_draft`: two engines, warm, the
           same prompts with and without the draft, the step timer inside vLLM), at each batch size (``max_num_seqs``),
           ``--repeats`` times; per repeat the measured speedup (tokens/s with / without, the whole generation) beside
           the one the measured step costs and vLLM's τ per position imply; medians, and the load average of each run.
Without ``--draft`` only the published rows. Writes speedup.md and speedup.json into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import pandas as pd

from eagle3kit.data.loader import held_out_conversations
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate import round_speed
from eagle3kit.evaluate.vllm import serve
from eagle3kit.plan import serving_speed
from eagle3kit.tables import format_table, markdown_table
from eagle3kit.verifier import load_tokenizer


def published() -> pd.DataFrame:
    table = serving_speed.speed_checks()
    return table.assign(**{"within 20%": table["within 20%"].map({True: "yes", False: "NO"})})


def cpu_rows(draft: str, data: str, n_prompts: int, max_new_tokens: int, max_prompt_tokens: int, k: int | None,
             batches: list[int], repeats: int) -> tuple[pd.DataFrame, list[dict]]:
    """One row per batch size: medians over repeats of the measured and predicted speedup, with every repeat kept."""
    draft_dir, verifier, k = serve.check_inputs(draft, None, k)
    tok = load_tokenizer(str(verifier))
    prompts = [p[0].tolist() for p in ev.chat_prompts(tok, held_out_conversations(data), n_prompts,
                                                      max_prompt_tokens)]
    rows, raw = [], []
    for batch in batches:
        runs = []
        for i in range(repeats):
            check = serve.check_draft(draft_dir, verifier, prompts, max_new_tokens, k,
                                      max_num_seqs=batch if batch < len(prompts) else None)
            cpu = round_speed.cpu_prediction(check.steps, k, check.acceptance_per_pos, check.tokens_per_s,
                                             check.seconds)
            runs.append(cpu)
            raw.append({"batch": batch, "repeat": i, "tau": check.tau, "load": check.load,
                        "tokens_per_s": check.tokens_per_s, "seconds": check.seconds,
                        "costs_ms": cpu.table().set_index("what")["value (ms, or as named)"].to_dict()})
            print(f"batch {batch}, repeat {i}: {check.tokens_per_s['draft']:.1f} vs {check.tokens_per_s['plain']:.1f} "
                  f"tokens/s, τ {check.tau:.3f}, predicted {cpu.predicted_tokens_per_s:.1f}, load {check.load_text}",
                  flush=True)
            print(format_table(cpu.table()), flush=True)

        rows.append(cpu_row(runs, [r for r in raw if r["batch"] == batch], batch, k))
        rows[-1]["ratio"] = round(rows[-1]["predicted"] / rows[-1]["published"], 3)
        rows[-1]["within 20%"] = "yes" if abs(rows[-1]["ratio"] - 1) <= serving_speed.TOLERANCE else "NO"
    return pd.DataFrame(rows), raw


def loads(raw: list[dict]) -> str:
    """Each repeat's load average before/after the timed run, with the draft | without it."""
    def one(values: list[float]) -> str:
        return "/".join(f"{x:.1f}" for x in values)
    return "; ".join(f"{one(r['load']['draft'])} | {one(r['load']['plain'])}" for r in raw if r["load"])


def cpu_row(runs: list[round_speed.CpuPrediction], raw: list[dict], batch: int, k: int) -> dict:
    """The medians over repeats of one batch size, in the published table's columns (and the costs behind them)."""
    def med(f) -> float:
        return statistics.median(f(c) for c in runs)

    return {
        "point": f"this CPU: vLLM 0.32 CPU build, SmolLM2-135M fp32, batch {batch}", "source": "measured here",
        "GPU": f"CPU, {os.cpu_count()} cores", "batch": batch, "k / steps": k, "τ": round(med(lambda c: c.tau), 3),
        "published": round(med(lambda c: c.measured), 3),
        "predicted": round(med(lambda c: c.predicted_tokens_per_s / c.measured_tokens_per_s["plain"]), 3),
        "tokens/s with (measured / predicted)": f"{med(lambda c: c.measured_tokens_per_s['draft']):.1f} / "
                                                f"{med(lambda c: c.predicted_tokens_per_s):.1f}",
        "tokens/s without": round(med(lambda c: c.measured_tokens_per_s["plain"]), 1),
        "verifier step 1 / k+1 tokens (ms)": f"{med(lambda c: c.plain.verifier_s) * 1e3:.1f} / "
                                              f"{med(lambda c: c.draft.verifier_s) * 1e3:.1f}",
        "draft step (ms)": round(med(lambda c: c.draft.draft_step_s) * 1e3, 1),
        "round other work (ms)": round(med(lambda c: c.draft.other_s) * 1e3, 1),
        "break-even τ": round(med(lambda c: c.break_even), 2),
        "load (with | without)": loads(raw),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft", help="an exported draft (speculators format) for vLLM's CPU build")
    p.add_argument("--data", help="the data directory whose held-out conversations are the prompts")
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--k", type=int, default=None)
    p.add_argument("--batches", type=int, nargs="+", default=[16])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", default="bench/results")
    args = p.parse_args(argv)
    pd.set_option("display.width", 250)
    table = published()
    print(format_table(table.drop(columns=["note"])), flush=True)
    raw: list[dict] = []
    if args.draft:
        cpu, raw = cpu_rows(args.draft, args.data, args.n_prompts, args.max_new_tokens, args.max_prompt_tokens,
                            args.k, args.batches, args.repeats)
        print(format_table(cpu), flush=True)
        table = pd.concat([table, cpu], ignore_index=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["point", "source", "GPU", "batch", "k / steps", "τ", "published", "predicted", "ratio", "within 20%"]
    extra = [c for c in table.columns if c not in cols]
    (out / "speedup.md").write_text(
        "# bench/speedup.py\n\n`published` is the published speedup (for this CPU: the measured one); `predicted` is "
        "eagle3kit's (for this CPU: from the step costs measured inside vLLM and vLLM's τ).\n\n"
        f"{markdown_table(table[cols])}\n\n{markdown_table(table[['point', *extra]].fillna(''))}\n\n"
        f"Engine overheads: {serving_speed.vllm_overheads().source}.\n")
    (out / "speedup.json").write_text(json.dumps({"rows": table.to_dict(orient="records"), "cpu_runs": raw},
                                                 indent=1, default=str))
    print(f"wrote {out / 'speedup.md'} and {out / 'speedup.json'}")
    if args.draft:  # the package keeps this CPU's rows (doctor and notebook 06 cite them)
        round_speed.write_cpu_points(json.loads((out / "speedup.json").read_text())["rows"])
        print(f"and this CPU's rows into {round_speed.CPU_POINTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
