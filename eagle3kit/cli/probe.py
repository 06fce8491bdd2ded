"""``eagle3kit probe``: every attention backend measured on this device, each cell in a subprocess (notebook 02)."""

from __future__ import annotations

import argparse


def probe_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verifier", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--backends", nargs="+", default=["eager", "sdpa", "simple_flex_attention", "flex_attention"])
    p.add_argument("--modes", nargs="+", default=["forward", "forward+backward"])
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=120, help="seconds per cell before it is killed")
    p.add_argument("--repeats", type=int, default=3, help="timed steps per cell (median)")
    p.add_argument("--isolate-each", action="store_true", help="a fresh process for every cell")


def cmd_probe(args: argparse.Namespace) -> int:
    """measure every attention backend on this device, crash-isolated"""
    from eagle3kit.doctor.probe import matrix as probe
    from eagle3kit.device import resolve_device
    from eagle3kit.doctor.probe.recommend import race
    from eagle3kit.tables import format_table

    matrix = probe.probe(verifier=args.verifier, device=args.device, backends=args.backends, modes=args.modes,
                         seq_len=args.seq_len, ttt_steps=args.ttt_steps, timeout_s=args.timeout,
                         repeats=args.repeats, isolate_each=args.isolate_each)
    print(format_table(matrix.drop(columns=["loss"])))
    kind = "cuda" if resolve_device(args.device).startswith("cuda") else "cpu"
    for training in (True, False):
        found = race(matrix, training, kind)
        print(f"recommended ({'training' if training else 'inference'}): {found.winner or 'none'} "
              f"({found.sentence()})")
    return 0
