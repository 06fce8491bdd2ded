"""Hidden-state extraction throughput vs the plain HF decoder forward with output_hidden_states, on the same batches.

    .venv/bin/python bench/data.py [--verifier smollm2] [--n 8] [--seq-length 512] [--batch-size 4] [--rounds 3]

Rows (medians over rounds, interleaved so that machine load hits each alike):
  plain HF forward       model.model(ids, output_hidden_states=True): every layer's state, no lm_head (the
                         baseline: the same work extraction does; the full-vocab logits would be extra work)
  eagle3kit extract      hidden_states.extract: the same forward + a hook for the pre-norm last state, stacked
  extract + write        the same plus writing each sample's hs_{i}.safetensors atomically (the whole pipeline)
ratio = throughput / baseline throughput (goal >= 0.9).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from eagle3kit.data import conversations as conv
from eagle3kit.data import hidden_states as hs
from eagle3kit.draft.config import resolve_aux_layer_ids
from eagle3kit.verifier import load_model, load_tokenizer, resolve


def batches(verifier, n: int, seq_length: int, batch_size: int, seed: int) -> list[torch.Tensor]:
    """Real ShareGPT samples (chat template, truncated), planned as build_dataset plans them."""
    tok = load_tokenizer(verifier)
    samples = []
    for turns in conv.ordered(conv.read(None), seed):
        ids = conv.tokenize(tok, turns, seq_length).input_ids
        samples.append(ids)
        if len(samples) == n:
            break
    out = []
    for plan in hs.plan_batches([len(s) for s in samples], batch_size):
        width = max(len(samples[i]) for i in plan)
        ids = torch.zeros(len(plan), width, dtype=torch.long)
        for r, i in enumerate(plan):
            ids[r, : len(samples[i])] = torch.tensor(samples[i])
        out.append(ids)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--seq-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    v = resolve(args.verifier)
    model = load_model(v, dtype=args.dtype)
    aux = resolve_aux_layer_ids(v)
    data = batches(v, args.n, args.seq_length, args.batch_size, seed=0)
    tokens = sum(int(b.numel()) for b in data)
    tmp = Path(tempfile.mkdtemp(prefix="eagle3kit-bench-"))

    def plain():
        with torch.no_grad():
            for b in data:
                model.model(input_ids=b, output_hidden_states=True, use_cache=False)

    def ours():
        for b in data:
            hs.extract(model, b, aux)

    def ours_write():
        k = 0
        for b in data:
            states = hs.extract(model, b, aux)
            for r in range(b.shape[0]):
                hs.write_file(hs.hs_path(tmp, k), states[r], b[r])
                k += 1

    cases = {"plain HF forward": plain, "eagle3kit extract": ours, "extract + write": ours_write}
    plain()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["plain HF forward"])
    print(f"\n{args.verifier}: {len(data)} batches, {tokens} tokens (padded), batch {args.batch_size}, "
          f"seq <= {args.seq_length}, {args.dtype}, {args.threads} threads, {args.rounds} rounds (medians), "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print(f"{'case':<20} {'seconds':>8} {'tokens/s':>9} {'ratio':>6}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<20} {med:8.2f} {tokens / med:9.0f} {base / med:6.2f}")
    shutil.rmtree(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
