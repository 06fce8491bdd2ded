"""What the overfit check measures on healthy and on miswired setups (SmolLM2 by default), to set its verdict.

    .venv/bin/python bench/overfit_verdict.py --out /tmp/overfit-bench [--cases multi_system aux_late ...]

Each case runs :func:`eagle3kit.train.overfit.overfit` with its defaults on one conversation; a miswired case breaks
the one-conversation data directory before training the way a miswired pipeline would (``prepare``, with
:mod:`eagle3kit.data.breakages`). One JSON line per
case is appended to ``OUT/results.jsonl`` (τ, accepted per round, the training accuracy per TTT step at the last step,
loss first/last) and a table is printed with the verdict's numbers: the mean draft tokens accepted per round against
the number the draft's own training accuracy predicts (``expected_accepted``). A run is recorded in
``bench/results/overfit_verdict.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from eagle3kit.data import conversations as conv
from eagle3kit.data.breakages import aux_one_layer_late, d2t_all_zero, d2t_one_id_off, last_state_normed
from eagle3kit.train.overfit import overfit


def multi_turn_source(path: Path) -> Path:
    """A system prompt and three user/assistant turns per conversation."""
    topics = [("a concise assistant that answers questions about cooking",
               ["How do I boil an egg?", "How long for a soft yolk?", "And for a hard one?"]),
              ("a helpful travel guide", ["What is the capital of France?", "What should I see there?",
                                          "Where can I eat well?"])]
    out = []
    for system, users in topics:
        turns = [{"role": "system", "content": f"You are {system}."}]
        for u in users:
            turns += [{"role": "user", "content": u}, {"role": "assistant", "content": "A short answer."}]
        out.append(turns)
    conv.write_jsonl(path, out)
    return path


CASES = {
    "sharegpt_0": ({}, None), "sharegpt_1": ({"seed": 1}, None), "short_reply": ({"reply_tokens": 16}, None),
    "long_reply": ({"reply_tokens": 128}, None), "multi_system": ({"source": "MULTI"}, None),
    "aux_late": ({}, aux_one_layer_late), "last_normed": ({}, last_state_normed), "d2t_zero": ({}, d2t_all_zero),
    "d2t_one_off": ({}, d2t_one_id_off),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--verifier", default="smollm2")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.cases:
        kwargs, prepare = CASES[name]
        if kwargs.get("source") == "MULTI":
            kwargs = {**kwargs, "source": multi_turn_source(out / "multi.jsonl")}
        r = overfit(args.verifier, out / name, progress=False, prepare=prepare, **kwargs)
        row = {"case": name, "tau": r.tau, "passed": r.passed, "mean_accepted": float(np.mean(r.accepted)),
               "expected_accepted": r.expected_accepted, "full_acc": r.full_acc, "loss_first": r.losses[0],
               "loss_last": r.losses[-1], "reply_tokens": r.reply_tokens, "lossless": r.lossless,
               "accepted": r.accepted, "seconds": round(r.seconds)}
        rows.append(row)
        with (out / "results.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    print(pd.DataFrame(rows).drop(columns=["accepted"]).to_string())


if __name__ == "__main__":
    main()
