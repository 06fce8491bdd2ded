"""Which of speculators' optimizers trains the draft faster here: AdamW, or Muon (2D weights) + AdamW (the rest).

Same data, same seed, same initial draft, same batches in the same order; the two sessions' steps are interleaved
(adamw, muon, adamw, ...) so that load from other processes hits both alike. Every ``--eval-every`` steps both
drafts are scored on the held-out rows (the data's last ``1 - train_data_ratio``, as speculators' trainer splits
them): loss / full_acc per TTT step, token-weighted over all held-out rows.

    .venv/bin/python bench/optimizer.py                       # SmolLM2, a small data set built in /tmp if needed
    .venv/bin/python bench/optimizer.py --verifier tiny --steps 6 --eval-every 3 --conversations 12
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import torch
from speculators.train.utils import normalize_counted_metrics

from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.loader import make_loader
from eagle3kit.data.directory import DataDir
from eagle3kit.draft.config import DraftSpec
from eagle3kit.logs import quiet
from eagle3kit.train.session import TrainSession

OPTIMIZERS = ("adamw", "muon")


def held_out_metrics(session: TrainSession) -> dict[str, float]:
    """The draft's loss / full_acc per TTT step on the held-out rows (sums over all batches, then normalized)."""
    s = session.settings
    loader = make_loader(session.data, s.total_seq_len, session.dtype, train_ratio=s.train_data_ratio,
                         split="val", seed=s.seed)
    sums: dict[str, float] = {}
    session.model.eval()
    with torch.no_grad():
        for batch in loader:
            batch = {k: v.to(session.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
            with session.autocast():  # the precision the session trains in
                _, metrics = session.forward(session.model, batch, **session.forward_kwargs)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + float(v)
    session.model.train()
    return normalize_counted_metrics(sums)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="smollm2")
    ap.add_argument("--data", default=None, help="data directory (default: built in /tmp/eagle3kit-bench-optimizer-*)")
    ap.add_argument("--conversations", type=int, default=48)
    ap.add_argument("--total-seq-len", type=int, default=512)
    ap.add_argument("--draft-vocab-size", type=int, default=2048, help="when the data is built here")
    ap.add_argument("--steps", type=int, default=60, help="training steps per optimizer")
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--ttt-steps", type=int, default=DraftSpec().ttt_steps)
    ap.add_argument("--lr", type=float, default=2e-3, help="AdamW lr (and the Muon group's, as speculators)")
    ap.add_argument("--warm-start-layer", type=int, default=-1, help="as the demo preset; use -2 for random init")
    ap.add_argument("--hidden-states-dtype", default="native", help="as the demo preset: bf16 where the CPU has it")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet()

    data = Path(args.data or f"/tmp/eagle3kit-bench-optimizer-{args.verifier}")
    if not args.data:  # a given data directory is used as it is (e.g. notebook 04's: the demo's own data)
        build_dataset(args.verifier, data, n_conversations=args.conversations, seq_length=args.total_seq_len,
                      held_out=2, draft_vocab_size=args.draft_vocab_size, dtype="float32", progress=False)
    data = DataDir.open(data)
    spec = DraftSpec(verifier=data.require_manifest().verifier.ref, draft_vocab_size=data.draft_vocab_size,
                     device="cpu", ttt_steps=args.ttt_steps)
    warm = None if args.warm_start_layer == -2 else args.warm_start_layer
    sessions = {name: TrainSession(data, spec, progress=False, total_seq_len=args.total_seq_len, lr=args.lr,
                                   max_steps=args.steps, warm_start_layer=warm, optimizer=name,
                                   hidden_states_dtype=args.hidden_states_dtype) for name in OPTIMIZERS}
    ttt = next(iter(sessions.values())).ttt_steps
    print(f"\nverifier {args.verifier}, {len(sessions['adamw'].batches.dataset)} training rows from {data}, "
          f"total_seq_len {args.total_seq_len}, draft vocab {spec.draft_vocab_size}, "
          f"{sessions['adamw'].settings.hidden_states_dtype}, lr {args.lr:g}, "
          f"warm start {warm}, {args.steps} steps each, {args.threads} threads")
    print("held-out (token-weighted over the held-out rows), printed as it goes:")
    head = "".join(f"{f'loss_{k}':>9}" for k in range(ttt)) + "".join(f"{f'acc_{k}':>8}" for k in range(ttt))
    print(f"{'step':>5} {'optimizer':<10}{'loss':>9}{head}", flush=True)
    for step in range(args.steps + 1):
        if step:
            for s in sessions.values():
                s.step()
        if step % args.eval_every == 0 or step == args.steps:
            for name, s in sessions.items():
                m = held_out_metrics(s)
                cells = "".join(f"{m[f'loss_{k}']:>9.4f}" for k in range(ttt))
                cells += "".join(f"{m[f'full_acc_{k}']:>8.4f}" for k in range(ttt))
                print(f"{step:>5} {name:<10}{m['loss']:>9.4f}{cells}", flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"train (last 10 steps, mean) and speed (median); load average at the end {load}:")
    for name, s in sessions.items():
        tail = s.history[-10:]
        print(f"  {name:<8} train loss {statistics.mean(r['loss'] for r in tail):.4f}, full_acc_0 "
              f"{statistics.mean(r['full_acc_0'] for r in tail):.4f}, "
              f"{statistics.median(r['seconds'] for r in s.history):.3f} s/step")


if __name__ == "__main__":
    main()
