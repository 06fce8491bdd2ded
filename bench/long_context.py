"""τ against context length for one draft: the whole ``long-context`` set (eagle3kit.evaluate.long_context), every
bucket up to the verifier's limit, each with its 95 % interval, marked with the draft's training length and window.

    .venv/bin/python bench/long_context.py --draft DIR [--name NAME] [--data DIR] [--per-bucket 6] [--new-tokens 32]

Writes bench/results/long_context_<name>.md / .json (every prompt's record) / .png. ``--data``: the data directory the
draft was trained on, whose conversations are left out (the set is drawn from ShareGPT's tail either way). Cost on a
2-core CPU with SmolLM2 (float32): the verifier reads ~6 x 15k prompt tokens once; the draft's dense masks at the
verifier's 8k limit peak at ~11 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.atomic import write_text  # noqa: E402
from eagle3kit.doctor.checks.draft_loader import sliding_window, trained_length  # noqa: E402
from eagle3kit.evaluate import context_curve, long_context  # noqa: E402
from eagle3kit.evaluate.conventions import TAU_CONVENTION  # noqa: E402
from eagle3kit.evaluate.export import reload  # noqa: E402
from eagle3kit.figures import png_bytes  # noqa: E402
from eagle3kit.tables import markdown_table  # noqa: E402
from eagle3kit.verifier import load_model, load_tokenizer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", required=True, metavar="DIR", help="an exported draft (or a checkpoint)")
    ap.add_argument("--name", default=None, help="the results' name (default: the draft folder's)")
    ap.add_argument("--data", default=None, metavar="DIR", help="its training data: those conversations left out")
    ap.add_argument("--per-bucket", type=int, default=long_context.PER_BUCKET)
    ap.add_argument("--new-tokens", type=int, default=32, help="the verifier's reply to each prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    name = args.name or Path(args.draft).resolve().name
    t0, load_before = time.perf_counter(), os.getloadavg()
    draft = reload(args.draft)
    verifier = draft.config.speculators_config.verifier.name_or_path
    model, tok = load_model(verifier), load_tokenizer(verifier)
    k = int(draft.config.speculators_config.proposal_methods[0].speculative_tokens)
    limit = model.config.max_position_embeddings
    exclude = long_context.training_prompts(args.data) if args.data else set()
    prompts = long_context.long_context_set(tok, limit, args.per_bucket, exclude, reply_room=args.new_tokens)
    _ids, _conts, records = long_context.score(model, {name: draft}, tok, prompts, args.new_tokens, k)
    table = context_curve.curve_table(records[name])
    trained, window = trained_length(args.draft), sliding_window(draft.config)
    found = context_curve.fall(table, trained) if trained else None
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    about = {"draft": str(Path(args.draft).resolve()), "verifier": str(verifier), "k": k, "limit": limit,
             "new_tokens": args.new_tokens, "per_bucket": args.per_bucket, "trained_length": trained,
             "sliding_window": window, "excluded_training_conversations": len(exclude), "seconds": round(seconds),
             "load_before": load_before, "load_after": os.getloadavg(), "cpus": os.cpu_count(),
             "machine": platform.processor() or platform.machine(), "torch": torch.__version__}
    write_text(out / f"long_context_{name}.json", json.dumps(
        {**about, "table": json.loads(table.reset_index().to_json(orient="records")),
         "falls": None if found is None else asdict(found) | {"falls": found.falls},
         "records": [asdict(r) | {"tau": r.tau} for r in records[name]]}, indent=1) + "\n")
    fig = context_curve.plot_context_curve(table, trained, window, f"{name}: τ against context length")
    (out / f"long_context_{name}.png").write_bytes(png_bytes(fig, dpi=100))
    lines = [f"# τ against context length: {name}", "",
             f"`python bench/long_context.py --draft {args.draft}"
             + (f" --data {args.data}" if args.data else "") + f" --per-bucket {args.per_bucket}`: the "
             f"`long-context` set ({len(prompts)} held-out prompts), verifier {verifier} (limit {limit} positions), "
             f"k = {k}, {args.new_tokens} greedy tokens each, simulated; {TAU_CONVENTION}. Trained at "
             f"{trained or 'an unknown length'}, sliding window {window or 'none'}. {round(seconds)} s on "
             f"{os.cpu_count()} cores, load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}.", "",
             markdown_table(table.reset_index().round(3)), "",
             found.describe() if found else "No bucket on both sides of the training length.",
             *([found.line(window)] if found is not None and found.falls else []), "",
             f"![τ against context length](long_context_{name}.png)", ""]
    write_text(out / f"long_context_{name}.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
