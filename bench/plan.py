"""The planner (`eagle3kit plan`) against measurements: published points, bytes written here, a measured CPU step.

    .venv/bin/python bench/plan.py [--sizes 256 512 1024] [--eagle-conversations 300]

Rows: what was measured (or published), what eagle3kit.plan predicts for the same settings, their ratio and whether
it is within the tolerance (disk 1%, memory and published points 15%):
  published         speculators' 268 MB/sample, PR 951's eager/fused loss peaks, EAGLE issue 30's 740 GB (once at
                    the assumed tokens per conversation, once for information at ShareGPT V3's, counted here with
                    SmolLM2's tokenizer and EAGLE's 2048-token cut)
  disk              bytes `build_dataset` wrote for the tiny verifier (float32 and bfloat16)
  memory            one real CPU training step (tiny verifier, draft vocab 512 or the whole 49152, sdpa, eager loss,
                    AdamW) at each size, torch.profiler peak + weights/gradients/moments/batch; speculators' eager
                    loss alone
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from eagle3kit.data import conversations as conv
from eagle3kit.data.dataset import build_dataset
from eagle3kit.draft.config import build_config
from eagle3kit.plan import published_costs
from eagle3kit.plan.disk import data_token_stats, disk_plan
from eagle3kit.train.measured_memory import measure_loss_peak, measure_training_step
from eagle3kit.plan.memory import CPU_FP32, StepSettings, loss_bytes, memory_parts
from eagle3kit.plan.shapes import draft_shape
from eagle3kit.tables import format_table
from eagle3kit.verifier import load_tokenizer

EAGLE_MAX_LEN = 2048


def row(group: str, name: str, measured: float, predicted: float, tolerance: float | None, note: str = "") -> dict:
    """One comparison; ``tolerance=None``: shown for information, not a pass/fail row."""
    ratio = predicted / measured
    within = "info" if tolerance is None else "yes" if abs(ratio - 1) <= tolerance else "NO"
    return {"group": group, "check": name, "measured": f"{measured:,.0f}", "predicted": f"{predicted:,.0f}",
            "ratio": round(ratio, 3), "within": within, "tolerance": "-" if tolerance is None else f"{tolerance:.0%}",
            "note": note}


def sharegpt_tokens_per_conversation(n: int) -> float:
    """Mean tokens of ShareGPT V3 conversations (SmolLM2's chat template and tokenizer), cut at 2048 as EAGLE did."""
    tok = load_tokenizer("tiny")  # SmolLM2's tokenizer
    lengths = []
    for turns in conv.ordered(conv.read(None), 0):
        lengths.append(len(conv.tokenize(tok, turns, EAGLE_MAX_LEN).input_ids))
        if len(lengths) == n:
            break
    return sum(lengths) / len(lengths)


def published_rows(eagle_conversations: int) -> list[dict]:
    rows = [row("published", c.name, c.published, c.predicted, published_costs.TOLERANCE, c.assumption)
            for c in published_costs.published_checks()]
    if eagle_conversations:
        mean = sharegpt_tokens_per_conversation(eagle_conversations)
        c = published_costs.published_checks(mean)[-1]
        rows.append(row("published", c.name + " (ShareGPT V3 tokens counted)", c.published, c.predicted, None,
                        f"{mean:,.0f} tokens per conversation over {eagle_conversations} (SmolLM2 tokenizer, V3 not "
                        "V4.3): information, EAGLE's token count is not published"))
    return rows


def disk_rows(work: Path) -> list[dict]:
    rows = []
    for dtype, width in (("float32", 4), ("bfloat16", 2)):
        out = work / f"data-{dtype}"
        build_dataset("tiny", out, n_conversations=12, seq_length=256, held_out=2, draft_vocab_size=512, dtype=dtype,
                      progress=False)
        plan = disk_plan(data_token_stats(out), 64, 4, width, 49152, 512)
        written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        hidden = sum(p.stat().st_size for p in (out / "hidden_states").iterdir())
        rows.append(row("disk", f"tiny {dtype}: hidden_states/ bytes", hidden, plan.hidden_states, 0.01))
        rows.append(row("disk", f"tiny {dtype}: whole data directory bytes", written, plan.total, 0.01,
                        "metadata files (manifest, token_freq.pt, held_out.jsonl) not predicted"))
    return rows


def memory_rows(work: Path, sizes: list[int], full_vocab_sizes: list[int]) -> list[dict]:
    data = work / "data-float32"
    rows = []
    for t, vocab in [(t, 512) for t in sizes] + [(t, None) for t in full_vocab_sizes]:
        build = build_config(verifier="tiny", draft_vocab_size=vocab, device="cpu")
        m = measure_training_step(build, data, t)
        parts = memory_parts(draft_shape(build), StepSettings(total_seq_len=t, loss_implementation="eager",
                                                              attention="sdpa", precision=CPU_FP32))
        step = parts["activations (all TTT steps)"] + parts["logits + loss (eager)"]
        name = f"CPU step T={t}, draft vocab {build.config.draft_vocab_size}"
        rows.append(row("memory", f"{name}: peak added by the step", m.step_peak, step, 0.15,
                        "activations + logits/loss"))
        rows.append(row("memory", f"{name}: total", m.total, sum(parts.values()), 0.15,
                        "+ weights, gradients, AdamW moments, batch"))
    for tokens, vocab in ((512, 8192), (1024, 16384)):
        rows.append(row("memory", f"eager kl_div alone {tokens} x {vocab} fp32", measure_loss_peak(tokens, vocab),
                        loss_bytes(tokens, vocab, "eager", 4, with_inputs=False), 0.15, "beyond its inputs"))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024], help="total_seq_len of measured steps")
    p.add_argument("--full-vocab-sizes", type=int, nargs="*", default=[512],
                   help="total_seq_len of measured steps with the whole 49152 vocab (the loss dominates)")
    p.add_argument("--eagle-conversations", type=int, default=300, help="ShareGPT conversations to count (0: skip)")
    p.add_argument("--out", default=None, help="also write the rows as CSV here")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        rows = published_rows(args.eagle_conversations) + disk_rows(Path(tmp)) + memory_rows(Path(tmp), args.sizes,
                                                                                       args.full_vocab_sizes)
    table = pd.DataFrame(rows)
    print(format_table(table))
    if args.out:
        table.to_csv(args.out, index=False)
    return 0 if (table["within"] != "NO").all() else 1


if __name__ == "__main__":
    sys.exit(main())
