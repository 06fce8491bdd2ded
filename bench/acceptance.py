"""Acceptance length τ and decode speed: plain greedy vs the speculative decode loop, per prompt, in one run.

    .venv/bin/python bench/acceptance.py [--draft DIR] [--verifier smollm2] [--prompts 4] [--new 64] [--k 3]

Without --draft an untrained draft is used (τ ≈ 1: the loop's overhead only). Prints one row per prompt and the
medians; the speed ratio is measured within this run on the same prompts (on a shared CPU, read ratios, not times).
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch

from eagle3kit.evaluate import acceptance as ev
from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model
from eagle3kit.evaluate.decode import greedy_generate, speculative_generate
from eagle3kit.evaluate.export import reload
from eagle3kit.verifier import load_model, load_tokenizer

PROMPTS = [
    "Explain what a hash table is and when to use one.",
    "Write a short email asking a colleague to review my pull request.",
    "What are the main causes of the French Revolution?",
    "Give me three tips for learning to play the guitar.",
    "How does photosynthesis work?",
    "Summarise the plot of Romeo and Juliet in a paragraph.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--draft", help="an exported draft directory (default: untrained)")
    ap.add_argument("--verifier", default="smollm2")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--k", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, tok = load_model(args.verifier), load_tokenizer(args.verifier)
    if args.draft:
        draft = reload(args.draft)
    else:
        torch.manual_seed(0)
        draft = build_model(build_config(verifier=args.verifier, training=False)).eval()
    prompts = ev.chat_prompts(tok, PROMPTS, args.prompts)
    rows = []
    for i, prompt in enumerate(prompts):
        t0 = time.perf_counter()
        ref = greedy_generate(model, prompt, args.new, tok.eos_token_id)
        t_greedy = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = speculative_generate(model, draft, prompt, args.new, args.k, tok.eos_token_id)
        t_spec = time.perf_counter() - t0
        sim = ev.simulate(model, draft, [prompt], [ref], args.k, progress=False)
        rows.append({"prompt": i, "tokens": len(ref), "lossless": res.tokens == ref, "tau_decode": round(res.tau, 3),
                     "tau_simulated": round(sim.tau, 3), "greedy_tok_s": round(len(ref) / t_greedy, 1),
                     "spec_tok_s": round(len(res.tokens) / t_spec, 1), "speedup": round(t_greedy / t_spec, 2)})
    df = pd.DataFrame(rows)
    print(df.to_string(index=False))
    cols = ("tau_decode", "tau_simulated", "greedy_tok_s", "spec_tok_s", "speedup")
    med = {c: statistics.median(df[c]) for c in cols}
    print("median:", med, f"lossless {int(df['lossless'].sum())}/{len(df)}")


if __name__ == "__main__":
    main()
