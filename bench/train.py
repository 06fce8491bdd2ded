"""Benchmark TrainSession.step() against a plain loop written on speculators' forward, and attention backends.

Both trainers see the same batches in the same order and their steps are interleaved (plain, session, plain, ...)
so that load from other processes hits both alike; the table reports medians and the ratio of medians.

    .venv/bin/python bench/train.py                      # SmolLM2, a small data set built in /tmp if needed
    .venv/bin/python bench/train.py --verifier tiny --steps 8
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from eagle3kit.data.dataset import build_dataset
from eagle3kit.draft.config import DraftSpec
from eagle3kit.train.loop import PlainLoop
from eagle3kit.train.session import TrainSession


def plain_trainer(session):
    """The plain loop (eagle3kit.train.loop) on the session's batches, in the session's order."""
    loop = PlainLoop(session.build, session.data, session.settings, session.total_steps)
    dataset, collate, batches = session.batches.dataset, session.batches.collate, session.batches

    def step(epoch: int, index: int) -> float:
        return loop.step(collate([dataset[i] for i in batches.indices(epoch, index)]))

    return step


def timed(fn, *args) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is less disturbed by other processes on a shared box."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="smollm2")
    ap.add_argument("--data", default=None, help="data directory (default: built in /tmp/eagle3kit-bench-train-*)")
    ap.add_argument("--total-seq-len", type=int, default=512)
    ap.add_argument("--draft-vocab-size", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per trainer (after 1 warm-up step)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    data = Path(args.data or f"/tmp/eagle3kit-bench-train-{args.verifier}")
    build_dataset(args.verifier, data, n_conversations=12, seq_length=args.total_seq_len // 2, held_out=2,
                  draft_vocab_size=args.draft_vocab_size, progress=False)
    spec = DraftSpec(verifier=args.verifier, draft_vocab_size=args.draft_vocab_size, device="cpu")
    kw = {"total_seq_len": args.total_seq_len, "seed": 0, "progress": False}

    # 1. TrainSession.step() vs the plain loop, same batches, interleaved
    session = TrainSession(data, spec, **kw)
    plain = plain_trainer(session)
    plain(*session.position)
    session.step()  # warm-up both
    t_plain, t_session, tokens = [], [], []
    for i in range(args.steps):  # alternate who goes first
        epoch, index = session.position
        if i % 2:
            t_session.append(timed(session.step))
            t_plain.append(timed(plain, epoch, index))
        else:
            t_plain.append(timed(plain, epoch, index))
            t_session.append(timed(session.step))
        tokens.append(session.history[-1]["tokens"])
    mp, ms = (statistics.median(t[0] for t in ts) for ts in (t_plain, t_session))
    cp, cs = (statistics.median(t[1] for t in ts) for ts in (t_plain, t_session))
    pairs = statistics.median(s[0] / p[0] for s, p in zip(t_session, t_plain, strict=True))

    # 2. sdpa vs eager attention (CPU training backends), interleaved
    per_impl = {}
    sessions = {impl: TrainSession(data, DraftSpec(**{**spec.__dict__, "attn_implementation": impl}), **kw)
                for impl in ("sdpa", "eager")}
    for s in sessions.values():
        s.step()  # warm-up
    for _ in range(args.steps):
        for impl, s in sessions.items():
            per_impl.setdefault(impl, []).append(s.step()["tokens_per_s"])

    print(f"\nverifier {args.verifier}, total_seq_len {args.total_seq_len}, draft vocab {args.draft_vocab_size}, "
          f"{args.steps} timed steps each, {args.threads} threads, median tokens/step {statistics.median(tokens):.0f}")
    print(f"{'measure':<42}{'median':>12}")
    print(f"{'plain speculators loop, s/step':<42}{mp:>12.3f}")
    print(f"{'TrainSession.step(), s/step':<42}{ms:>12.3f}")
    print(f"{'ratio of medians (goal <= 1.05)':<42}{ms / mp:>12.3f}")
    print(f"{'median of per-pair ratios (wall)':<42}{pairs:>12.3f}")
    print(f"{'plain loop, CPU s/step':<42}{cp:>12.3f}")
    print(f"{'TrainSession.step(), CPU s/step':<42}{cs:>12.3f}")
    print(f"{'ratio of medians, CPU time':<42}{cs / cp:>12.3f}")
    print(f"{'TrainSession tokens/s':<42}{statistics.median(tokens) / ms:>12.0f}")
    for impl, values in per_impl.items():
        print(f"{'tokens/s, attention ' + impl:<42}{statistics.median(values):>12.0f}")
    speedup = statistics.median(per_impl["sdpa"]) / statistics.median(per_impl["eager"])
    print(f"{'sdpa / eager tokens/s':<42}{speedup:>12.3f}")
    if not torch.cuda.is_available():
        print("flex vs sdpa on CUDA: skipped: no CUDA")


if __name__ == "__main__":
    main()
