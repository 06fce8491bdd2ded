"""Random init vs warm start (eagle3kit.draft.warm_start): held-out τ of both drafts after the same steps, in one run.

    .venv/bin/python bench/warm_start.py --data runs/demo/work/data [--steps 400] [--every 100] [--prompts 16]

Both arms train on the same data with the demo recipe (lr 2e-3, linear schedule over --steps, 1024 tokens a step,
bf16 autocast) and are scored every --every steps on the data's held-out conversations that are not also training
prompts: simulated τ (k = 3) on the verifier's greedy continuations. The arms alternate chunk by chunk so that both
see the same machine load. Prints one row per checkpoint and the final ratio.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch
from datasets import load_from_disk

from eagle3kit.data.loader import held_out_prompts
from eagle3kit.data.directory import DataDir
from eagle3kit.draft.config import DraftSpec
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_model, load_tokenizer


def unseen_prompts(data_dir, tok, n: int, max_prompt_tokens: int = 128):
    """Held-out conversations whose first user turn does not occur in the training rows."""
    train_text = [tok.decode(r) for r in load_from_disk(str(data_dir))["input_ids"]]
    clean = [p for p in held_out_prompts(data_dir) if not any(p[-1]["content"] in t for t in train_text)]
    return ev.chat_prompts(tok, clean, n, max_prompt_tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--data", required=True, help="a data directory with held-out conversations (notebook 04)")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new", type=int, default=96)
    ap.add_argument("--layer", type=int, default=-1, help="the verifier layer of the warm start")
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    torch.set_num_threads(2)
    data = DataDir.open(args.data)
    verifier = data.require_manifest().verifier.ref
    model, tok = load_model(verifier), load_tokenizer(verifier)
    prompts = unseen_prompts(args.data, tok, args.prompts)
    conts = ev.continuations(model, prompts, args.new, tok.eos_token_id, progress=False)
    spec = DraftSpec(verifier=verifier, draft_vocab_size=data.draft_vocab_size)
    arms = {name: TrainSession(data, spec, lr=args.lr, total_seq_len=1024, max_steps=args.steps,
                               warm_start_layer=layer, progress=False)
            for name, layer in (("random init", None), (f"warm start (layer {args.layer})", args.layer))}
    seconds = dict.fromkeys(arms, 0.0)
    rows = []
    print(f"{len(prompts)} held-out prompts x {args.new} tokens ({sum(map(len, conts))} scored tokens)", flush=True)
    for step in range(args.every, args.steps + 1, args.every):
        for name, s in arms.items():
            t0 = time.perf_counter()
            s.run(step - s.global_step)
            seconds[name] += time.perf_counter() - t0
            s.model.eval()
            a = ev.simulate(model, s.model, prompts, conts, 3, progress=False)
            s.model.train()
            rates = a.rates()["conditional"].round(3).tolist()
            rows.append({"arm": name, "step": s.global_step, "tau": round(a.tau, 3), "acc_1": rates[0],
                         "train_loss": round(s.history[-1]["loss"], 3), "train_s": round(seconds[name])})
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    print(df.pivot(index="step", columns="arm", values="tau").to_string())
    last = df[df["step"] == args.steps].set_index("arm")["tau"]
    print(f"\nτ at {args.steps} steps: " + ", ".join(f"{k} {v:.3f}" for k, v in last.items())
          + f"; gain {last.iloc[1] - last.iloc[0]:+.3f}")


if __name__ == "__main__":
    main()
