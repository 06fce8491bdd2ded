"""Regeneration throughput: batched greedy decoding (eagle3kit.data.generate) vs batch-1 greedy ``generate``.

    .venv/bin/python bench/regenerate.py [--n 32] [--max-new-tokens 96] [--batch-sizes 16,32] [--threads 2] [--bf16]

Rows, all on the same ShareGPT prompts (chat template, first user turn cut to --max-prompt-tokens) in one process:
  batch 1 generate        transformers' greedy ``generate``, one prompt at a time (the baseline)
  generate, padded bN     transformers' ``generate`` on left-padded batches (regenerate's path before greedy_batch)
  greedy_batch bN         eagle3kit.data.generate: up to N rows per forward, each prompt prefilled alone, finished
                          rows leave and waiting prompts join, preallocated KV cache, GQA sdpa
  greedy_batch bN bf16    the same in bfloat16 (only with --bf16)
Batched paths take the prompts shortest first, as regenerate does. The baseline runs half its prompts first and
half last, so load that drifts during the run weighs on both alike; still, quote the ratio, not the speeds.
agree = replies equal token for token to the baseline's; for the others the first differing step and the gap between
the baseline's two best logits there (a gap near 0 is a floating-point tie, not a bug).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.data.generate import greedy_batch  # noqa: E402
from eagle3kit.data.regenerate import distinct_prompts  # noqa: E402
from eagle3kit.verifier import load_model, load_tokenizer, resolve  # noqa: E402


def prompts(tok, n: int, max_prompt_tokens: int, seed: int = 0) -> list[list[int]]:
    """Chat-template ids of the first ``n`` distinct ShareGPT prompts, exactly as ``regenerate`` builds them."""
    return [ids for _, ids in distinct_prompts(tok, None, seed, n, max_prompt_tokens)]


def cut(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos)] if eos in row else row


@torch.no_grad()
def hf_generate(model, batch: list[list[int]], n: int, eos: int) -> list[list[int]]:
    """transformers' greedy ``generate`` on one left-padded batch (a batch of one has no padding)."""
    width = max(map(len, batch))
    ids = torch.tensor([[eos] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, do_sample=False, eos_token_id=eos,
                         pad_token_id=eos)
    return [cut(r, eos) for r in out[:, width:].tolist()]


def batched(fn, data: list[list[int]], bs: int) -> list[list[int]]:
    order = sorted(range(len(data)), key=lambda i: len(data[i]))
    got: list[list[int]] = [[] for _ in data]
    for b in range(0, len(order), bs):
        idx = order[b: b + bs]
        for i, r in zip(idx, fn([data[i] for i in idx]), strict=True):
            got[i] = r
    return got


def timed(fn) -> tuple[object, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


@torch.no_grad()
def tie_gap(model, prompt: list[int], ref: list[int], step: int) -> float:
    """Gap between the two best logits the baseline saw at ``step`` (batch 1, no padding)."""
    logits = model(input_ids=torch.tensor([prompt + ref[:step]]), logits_to_keep=1).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--max-prompt-tokens", type=int, default=256)
    p.add_argument("--batch-sizes", default="16,32", help="greedy_batch batch sizes, comma-separated")
    p.add_argument("--hf-batch-size", type=int, default=16, help="padded generate batch size (0: skip that row)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="add greedy_batch rows in bfloat16")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    v = resolve(args.verifier)
    tok = load_tokenizer(v)
    model = load_model(v)
    eos, n = tok.eos_token_id, args.max_new_tokens
    data = prompts(tok, args.n, args.max_prompt_tokens)
    print(f"{args.n} prompts ({min(map(len, data))}-{max(map(len, data))} tokens), {n} new tokens max, "
          f"{args.threads} threads, {os.cpu_count()} CPUs; load before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
          flush=True)

    def one(ids: list[int]) -> list[int]:
        return hf_generate(model, [ids], n, eos)[0]

    model(input_ids=torch.tensor([data[0][:8]]))  # warm-up
    ref: list[list[int] | None] = [None] * len(data)
    runs = []
    first, last = list(range(0, len(data), 2)), list(range(1, len(data), 2))
    out, w0, c0 = timed(lambda: [one(data[i]) for i in first])
    for i, r in zip(first, out, strict=True):
        ref[i] = r
    plans = []
    if args.hf_batch_size:
        b = args.hf_batch_size
        plans.append((f"generate, padded b{b}", lambda b=b: batched(lambda x: hf_generate(model, x, n, eos), data, b)))
    for b in map(int, args.batch_sizes.split(",")):
        plans.append((f"greedy_batch b{b}", lambda b=b: greedy_batch(model, data, n, eos, batch_size=b)))
    if args.bf16:
        half = load_model(v, dtype="bfloat16")
        for b in map(int, args.batch_sizes.split(",")):
            plans.append((f"greedy_batch b{b} bf16",
                          lambda b=b: greedy_batch(half, data, n, eos, batch_size=b)))
    for name, fn in plans:
        got, w, c = timed(fn)
        runs.append((name, got, w, c))
        print(f"  {name}: {w:.1f}s", flush=True)
    out, w1, c1 = timed(lambda: [one(data[i]) for i in last])
    for i, r in zip(last, out, strict=True):
        ref[i] = r
    load1 = os.getloadavg()
    runs.insert(0, ("batch 1 generate", ref, w0 + w1, c0 + c1))

    base = sum(map(len, ref)) / (w0 + w1)
    print(f"\n{'path':<26}{'seconds':>9}{'cpu s':>9}{'tokens':>8}{'tok/s':>8}{'ratio':>7}  agree")
    for name, got, w, c in runs:
        toks = sum(map(len, got))
        same = sum(g == r for g, r in zip(got, ref, strict=True))
        print(f"{name:<26}{w:>9.1f}{c:>9.1f}{toks:>8}{toks / w:>8.1f}{toks / w / base:>6.2f}x  {same}/{len(data)}")
    print(f"load after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; "
          f"{sum(len(r) == n for r in ref)}/{len(ref)} baseline replies reached {n} tokens")
    for name, got, _, _ in runs[1:]:
        for i, (g, r) in enumerate(zip(got, ref, strict=True)):
            if g != r:
                k = next((j for j, (a, b) in enumerate(zip(g, r, strict=False)) if a != b), min(len(g), len(r)))
                print(f"  {name}: prompt {i} differs from step {k} of {len(r)} "
                      f"(baseline top-2 logit gap there {tie_gap(model, data[i], r, k):.2e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
