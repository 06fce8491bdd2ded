"""``eagle3kit masks``: the EAGLE-3 training mask of a packed batch, its statistics and heatmap (notebook 03)."""

from __future__ import annotations

import argparse
import textwrap


def masks_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lengths", default="", help="packed document lengths, e.g. '300,512,77' (default: one document)")
    p.add_argument("--total-seq-len", type=int, default=None,
                   help="padded sequence length (default: the lengths' sum rounded up to a multiple of 128)")
    p.add_argument("--ttt-steps", type=int, default=3)
    p.add_argument("--sliding-window", type=int, default=0, help="0: full attention")
    p.add_argument("--plot", metavar="PNG", help="also save the token heatmap to this PNG file")


def cmd_masks(args: argparse.Namespace) -> int:
    """the EAGLE-3 training mask of a packed batch: stats per TTT step, PNG heatmap"""
    from eagle3kit.atomic import atomic_file
    from eagle3kit.masks import plots as mask_plots
    from eagle3kit.masks.eagle_mask import build_mask
    from eagle3kit.masks.explorer import parse_lengths
    from eagle3kit.masks.stats import stats
    from eagle3kit.tables import column_blocks, format_table, terminal_width

    lengths = parse_lengths(args.lengths)
    mask = build_mask(lengths or [args.total_seq_len or 128], args.total_seq_len, args.ttt_steps,
                      args.sliding_window or None)
    print(textwrap.fill(f"{len(lengths)} documents, total_seq_len {mask.total_seq_len}, {mask.ttt_steps} TTT steps, "
                        f"window {mask.sliding_window or 'off'}; BlockMask built in {mask.build_seconds:.2f}s "
                        f"({'compiled' if mask.compiled else 'uncompiled'} create_block_mask)", terminal_width()))
    print(format_table(stats(mask), fallback=column_blocks))
    if args.plot:
        with atomic_file(args.plot) as tmp:
            mask_plots.plot_token_mask(mask).savefig(tmp, format="png", dpi=100)
        print(f"token heatmap written to {args.plot}")
    return 0
