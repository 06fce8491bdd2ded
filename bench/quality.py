"""τ against budget: the demo recipe at several sizes, each made from scratch and timed stage by stage.

    .venv/bin/python bench/quality.py [--points 64:60,128:120,256:240] [--n-prompts 16] [--out FILE.json]

A point ``N:S`` regenerates N + held-out + 8 replies with the verifier (as notebook 04 does), stores their hidden
states, trains S steps (notebook 05's settings) and scores the draft's simulated τ on the same held-out prompts for
every point: the first ``--n-prompts`` distinct ShareGPT prompts in seed-1 order that none of the points could have
trained on. The recipe's numbers come from the ``demo`` preset (eagle3kit.presets), so the curve measures the demo's
recipe. Writes the points (eagle3kit.evaluate.budget) and a PNG of the plot beside them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from eagle3kit import presets
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.regenerate import distinct_prompts, regenerate
from eagle3kit.draft.config import DraftSpec
from eagle3kit.device import native_bf16
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate.budget import BudgetPoint, best_per_minute, plot_tau_vs_budget, write_curve
from eagle3kit.logs import quiet
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_model, load_tokenizer, resolve


def eval_prompts(tok, n: int, n_train_max: int, max_prompt_tokens: int) -> list[torch.Tensor]:
    """``n`` prompts (seed-1 order) that are not among the first ``n_train_max`` seed-0 prompts any point trains on."""
    trained = {tuple(ids) for _, ids in distinct_prompts(tok, None, 0, n_train_max, max_prompt_tokens)}
    fresh = [(turns, ids) for turns, ids in distinct_prompts(tok, None, 1, n_train_max + n, max_prompt_tokens)
             if tuple(ids) not in trained][:n]
    return ev.chat_prompts(tok, [turns for turns, _ in fresh], n, max_prompt_tokens)


def run_point(n: int, steps: int, work: Path, verifier, data: dict, train: dict, evaluation: tuple) -> BudgetPoint:
    """One budget point, from nothing to a scored draft, each stage timed."""
    seconds = {}
    t = time.perf_counter()
    regen = regenerate(verifier, work / "regenerated.jsonl", n_conversations=n + data["held_out"] + 8,
                       max_new_tokens=data["regenerate_tokens"],
                       max_prompt_tokens=data["regenerate_prompt_tokens"], progress=False)
    seconds["regenerate"] = time.perf_counter() - t
    t = time.perf_counter()
    info = build_dataset(verifier, work / "data", n_conversations=n, seq_length=data["seq_length"],
                         draft_vocab_size=data["draft_vocab_size"], held_out=data["held_out"], dtype=data["dtype"],
                         batch_size=data["batch_size"], source=regen.path, progress=False)
    seconds["hidden_states"] = time.perf_counter() - t
    t = time.perf_counter()
    model, prompts, conts, k = evaluation  # the draft trains k TTT steps and proposes k tokens a round
    spec = DraftSpec(verifier=verifier, draft_vocab_size=info.draft_vocab_size, device="cpu", ttt_steps=k)
    session = TrainSession(work / "data", spec, progress=False, max_steps=steps, **train)
    session.run(steps)
    seconds["train"] = time.perf_counter() - t
    t = time.perf_counter()
    result = ev.simulate(model, session.model.eval(), prompts, conts, k, progress=False)
    seconds["evaluate"] = time.perf_counter() - t
    per_pos = [float(x) for x in result.rates()["cumulative"]]
    return BudgetPoint(n, steps, round(result.tau, 4), [round(x, 4) for x in per_pos],
                       {k: round(v, 1) for k, v in seconds.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verifier", default="smollm2")
    ap.add_argument("--points", default="64:60,128:120,256:240", help="N:S pairs (conversations:steps)")
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "quality.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    data, train = presets.parameters("demo", "04"), presets.parameters("demo", "05")
    k = int(train.get("ttt_steps", DraftSpec().ttt_steps))  # the draft's TTT steps = the k notebook 06 measures
    train = {key: train[key] for key in ("lr", "hidden_states_dtype", "warm_start_layer", "optimizer") if key in train}
    points = [tuple(map(int, p.split(":"))) for p in args.points.split(",")]
    verifier = resolve(args.verifier).path
    tok, model = load_tokenizer(verifier), load_model(verifier)
    prompts = eval_prompts(tok, args.n_prompts, max(n for n, _ in points) + data["held_out"] + 8, 128)
    conts = ev.continuations(model, prompts, args.max_new_tokens, tok.eos_token_id, progress=False)
    load0 = os.getloadavg()
    results = []
    for n, steps in points:
        work = Path(tempfile.mkdtemp(prefix=f"eagle3kit-quality-{n}-{steps}-"))
        try:
            point = run_point(n, steps, work, verifier, data, train, (model, prompts, conts, k))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results.append(point)
        print(f"{n:>4} conv {steps:>4} steps: τ {point.tau:.3f} (per position {point.acceptance_per_pos}), "
              f"{point.minutes:.1f} min {point.seconds}", flush=True)
    load1 = os.getloadavg()
    context = {"verifier": args.verifier, "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "k": k,
               "recipe": {"data": data, "train": train}, "cpus": os.cpu_count(), "native_bf16": native_bf16(),
               "threads": args.threads,
               "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1]}
    write_curve(results, args.out, **context)
    plot_tau_vs_budget(results).savefig(Path(args.out).with_suffix(".png"), dpi=90)
    best = best_per_minute(results)
    print(f"\nload before {load0}, after {load1}; best per minute: {best.n_conversations} conversations, "
          f"{best.steps} steps (τ {best.tau:.3f} in {best.minutes:.1f} min); written to {args.out}")


if __name__ == "__main__":
    main()
