"""The cost of one training step: speculators' dense path against the block-sparse one (eagle3kit.train.forward).

Both paths train the same draft (same seed, same batches) in one process, their steps interleaved (dense, sparse,
dense, ...) so that load from other processes hits both alike; each row is the median of the timed steps after one
warm-up step. Per step it reports the FLOPs each path does, the "useful" FLOPs as issue 47 counted them
(speculators' dense step without the attention its mask throws away) and the FLOPs the same loss needs at least
("needed": the linears on the rows whose draft chain reaches a loss, lm_head and the loss on the loss rows,
attention on the kept scores), and each rate against this CPU's matmul peak measured in the same run, in the dtype
the step trains in.

    .venv/bin/python bench/train_step.py            # packs 512 / 1024 / 2048 x TTT 1 / 3 / 7, the profile, parts
    .venv/bin/python bench/train_step.py --quick    # the 1024-token, 3-TTT pair and its ratio
    .venv/bin/python bench/train_step.py --curves 100   # + the two paths trained 100 steps: loss curves and τ

Writes bench/results/train_step.md and .json (not with --quick).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.attention.block_sparse import plan_for  # noqa: E402
from eagle3kit.attention.block_mask import eagle_block_mask  # noqa: E402
from eagle3kit.attention.rows import rows_to_compute  # noqa: E402
from eagle3kit.data.dataset import build_dataset  # noqa: E402
from eagle3kit.device import native_dtype  # noqa: E402
from eagle3kit.draft.config import DraftSpec  # noqa: E402
from eagle3kit.logs import quiet  # noqa: E402
from eagle3kit.tables import markdown_table  # noqa: E402
from eagle3kit.train import forward as fwd  # noqa: E402
from eagle3kit.train.session import TrainSession  # noqa: E402
from speculators.models.eagle3.attention import extend_mask_for_draft_tokens  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "train_step"
VOCAB = 2048
DEMO_LIKE = {"n_conversations": 192, "seq_length": 224, "held_out": 32}  # ShareGPT cut to 224 tokens: ~4.6
# documents a 1024-token pack, like the demo's (user turns cut to 128 tokens, replies up to 96); 32 held out


def matmul_peak(dtype: torch.dtype, repeats: int = 20) -> float:
    """GFLOP/s of a 4096 x 576 @ 576 x 1536 matmul (SmolLM2's MLP shape) in ``dtype``, best of ``repeats``."""
    a, b = torch.randn(4096, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 3):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * 4096 * 576 * 1536 / best / 1e9


def step_flops(model, batch: dict, ttt: int) -> dict[str, float]:
    """FLOPs of one step (forward + backward) on ``batch``: what the dense path does, what the block-sparse path
    does, and what is useful (see the module docstring). A multiply-add is 2 FLOPs; a trained linear's backward is
    2x its forward (input and weight gradients), fc's 1x (its input needs none); attention's backward is 2x its
    forward (4 products)."""
    cfg = model.config.transformer_layer_config
    h, heads, dim = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    kv, inter, vocab = cfg.num_key_value_heads * dim, cfg.intermediate_size, model.config.draft_vocab_size
    aux = model.fc.in_features
    per_row_layer = [2 * h * (heads * dim + 2 * kv)] + [h * (heads * dim + 2 * kv)] * (cfg.num_hidden_layers - 1)
    body = sum(m + heads * dim * h + 3 * h * inter for m in per_row_layer)  # q k v o and the MLP, multiply-adds
    docs, loss = batch["document_ids"][0], batch["loss_mask"][0].bool()
    n, real = docs.shape[0], int((docs != -1).sum())
    cut = min(n, real + ttt - 1)

    def linears(draft_rows: int, fc_rows: int, head_rows: int, target_rows: int) -> float:
        return 6 * draft_rows * body + 4 * fc_rows * aux * h + 6 * head_rows * h * vocab + 2 * target_rows * h * vocab

    chain = sum(len(r) for r in rows_to_compute(loss[:cut], ttt))
    head_rows = sum(int((loss[t:] | loss[: n - t]).sum()) for t in range(ttt))  # the rows the sparse path keeps
    need = int(fwd._needed_target_rows(loss, ttt).sum())  # noqa: SLF001
    mask = eagle_block_mask(docs[:cut])
    computed = kept = 0
    for step in range(ttt):
        c, k = plan_for(mask, cut, (step + 1) * cut).scores()
        computed, kept = computed + c, kept + k
        mask = extend_mask_for_draft_tokens(mask)
    loss_rows = sum(int(loss[t:].sum()) for t in range(ttt))
    dense_scores = sum((t + 1) * n * n for t in range(ttt))
    attention = 12 * heads * dim
    return {"dense": linears(n * ttt, n, n * ttt, n) + attention * dense_scores,
            "sparse": linears(chain, cut, head_rows, need) + attention * computed,
            # the issue's "useful": speculators' dense step without the attention its mask throws away
            "useful": linears(n * ttt, n, n * ttt, n) + attention * kept,
            # the least work that gives the same loss: what the block-sparse step does, padding and gathers aside
            "needed": linears(chain - (cut - real), real, loss_rows, int(loss.sum())) + attention * kept,
            "documents": int(docs.max()) + 1, "loss_share": float(loss.float().mean()), "rows": n, "real": real}


def sessions(data: Path, seq: int, ttt: int, dtype: str, **paths) -> dict[str, TrainSession]:
    spec = DraftSpec(verifier="smollm2", draft_vocab_size=VOCAB, device="cpu", ttt_steps=ttt)
    return {name: TrainSession(data, spec, progress=False, total_seq_len=seq, hidden_states_dtype=dtype,
                               warm_start_layer=-1, max_steps=1000, attention=path) for name, path in paths.items()}


def time_pair(data: Path, seq: int, ttt: int, steps: int, dtype: str, peak: float) -> dict:
    """Median seconds a step of each path, interleaved, and the FLOPs of the batches they trained on."""
    pair = sessions(data, seq, ttt, dtype, dense=fwd.SPECULATORS, sparse=fwd.BLOCK_SPARSE)
    times: dict[str, list[float]] = {name: [] for name in pair}
    flops = []
    for i in range(steps + 1):
        flops.append(step_flops(pair["sparse"].model, pair["sparse"].peek_batch(), ttt))
        for name, s in pair.items():
            record = s.step()
            if i:  # the first step warms up
                times[name].append(record["seconds"])
    med = {name: statistics.median(t) for name, t in times.items()}
    mean = {k: statistics.mean(f[k] for f in flops[1:]) for k in ("dense", "sparse", "useful", "needed",
                                                                    "documents", "loss_share", "real")}
    return {"tokens": seq, "ttt_steps": ttt, "steps": steps, "dense_s": round(med["dense"], 3),
            "sparse_s": round(med["sparse"], 3), "speedup": round(med["dense"] / med["sparse"], 2),
            "dense_gflop": round(mean["dense"] / 1e9, 1), "sparse_gflop": round(mean["sparse"] / 1e9, 1),
            "useful_gflop": round(mean["useful"] / 1e9, 1), "needed_gflop": round(mean["needed"] / 1e9, 1),
            "useful_share_dense": round(mean["useful"] / med["dense"] / 1e9 / peak, 3),
            "useful_share_sparse": round(mean["useful"] / med["sparse"] / 1e9 / peak, 3),
            "needed_share_sparse": round(mean["needed"] / med["sparse"] / 1e9 / peak, 3),
            "documents": round(mean["documents"], 1), "loss_share": round(mean["loss_share"], 2)}


def parts(data: Path, steps: int, dtype: str) -> list[dict]:
    """Each change alone at 1024 tokens, 3 TTT steps: the step with that change against the dense step."""
    off = {"loss_rows": False, "chain_rows": False, "cut_padding": False}
    variants = {"speculators' dense forward": None,
                "block-sparse attention (BlockMask built without vmap)": off,
                "+ lm_head, loss and targets on the rows that carry loss": {**off, "loss_rows": True},
                "+ past TTT step 0, only the rows whose chain reaches a loss": {**off, "loss_rows": True,
                                                                               "chain_rows": True},
                "+ padding after the last document cut (all changes)": {}}
    s = sessions(data, 1024, 3, dtype, dense=fwd.SPECULATORS)["dense"]
    batch = s.peek_batch()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(steps + 1):
        for name, options in variants.items():
            t0 = time.perf_counter()
            s.model.zero_grad()
            with s.autocast():
                if options is None:
                    loss, _ = fwd.speculators_forward(s.model, batch, **s.forward_kwargs)
                else:
                    loss, _ = fwd.block_sparse_forward(s.model, batch, **s.forward_kwargs, **options)
            loss.backward()
            if i:
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["speculators' dense forward"])
    rows = [{"forward + backward": name, "seconds": round(statistics.median(t), 3),
             "speedup": round(base / statistics.median(t), 2)} for name, t in times.items()]
    t0 = time.perf_counter()
    for _ in range(20):
        s.model._create_mask_fn(fwd_mask_mod(batch), None, None, 1024, 1024, device="cpu")  # noqa: SLF001
    vmap_s = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    for _ in range(20):
        eagle_block_mask(batch["document_ids"][0])
    rows.append({"forward + backward": "mask alone: speculators' vmapped create_mask (dense) / BlockMask without vmap",
                 "seconds": f"{vmap_s:.4f} / {(time.perf_counter() - t0) / 20:.4f}", "speedup": ""})
    t0 = time.perf_counter()
    for _ in range(5):
        s.batches._cached = None  # noqa: SLF001  (read and collate the batch again)
        s.batches.peek_ranks()
    rows.append({"forward + backward": "reading and collating a batch (the most prefetching could hide)",
                 "seconds": round((time.perf_counter() - t0) / 5, 4), "speedup": ""})
    loss = batch["loss_mask"][0].bool()
    with torch.no_grad():
        targets = s.model.verifier_lm_head(s.model.verifier_norm(batch["verifier_last_hidden_states"][0, loss]))
    t0 = time.perf_counter()
    for _ in range(5):
        for _step in range(2):  # the softmax a target distribution computed once would save: 2 of 3 TTT steps
            torch.softmax(targets.float(), -1)
    rows.append({"forward + backward": "the targets' softmax at TTT steps 1 and 2, loss rows (what computing it once "
                 "would save)", "seconds": round((time.perf_counter() - t0) / 5, 4), "speedup": ""})
    return rows


def fwd_mask_mod(batch):
    from speculators.models.eagle3.attention import create_combined_mask_mod

    return create_combined_mask_mod(batch["document_ids"][0], 1024)


def profile(data: Path, dtype: str, rows: int = 10) -> dict[str, list[dict]]:
    """torch.profiler's top rows (self CPU time) over 3 steps of each path, 1024 tokens, 3 TTT steps."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out = {}
    for name, s in sessions(data, 1024, 3, dtype, dense=fwd.SPECULATORS, sparse=fwd.BLOCK_SPARSE).items():
        s.step()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                s.step()
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in events)
        out[name] = [{"op": e.key[:60], "ms a step": round(e.self_cpu_time_total / 3e3, 1),
                      "share": f"{e.self_cpu_time_total / total:.0%}"} for e in events[:rows]]
    return out


def curves(data: Path, steps: int, dtype: str, n_prompts: int = DEMO_LIKE["held_out"]) -> dict:
    """Both paths trained ``steps`` steps from the same start on the same batches: their loss curves, and τ
    (simulated, k 3, the bonus token counted) of each draft at the end on the data's held-out prompts, with the
    paired difference's 95 % interval (prompts resampled)."""
    import numpy as np

    from eagle3kit.data import conversations as conv
    from eagle3kit.data.directory import DataDir
    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.scores import interval
    from eagle3kit.verifier import load_model, load_tokenizer

    pair = sessions(data, 1024, 3, dtype, dense=fwd.SPECULATORS, sparse=fwd.BLOCK_SPARSE)
    for s in pair.values():
        s.run(steps)
    losses = {name: np.array([r["loss"] for r in s.history]) for name, s in pair.items()}
    gap = np.abs(losses["sparse"] - losses["dense"])
    noise = np.abs(np.diff(losses["dense"]))  # how much the loss moves from one batch to the next
    verifier = pair["dense"].build.verifier
    tok, model = load_tokenizer(verifier), load_model(verifier)
    prompts = ev.chat_prompts(tok, conv.read_jsonl(DataDir(data).held_out_path), n_prompts)
    conts = ev.continuations(model, prompts, 64, tok.eos_token_id, progress=False)
    states: ev.VerifierStates = {}
    taus = {}
    for name, s in pair.items():
        s.model.eval()
        taus[name] = np.array([a.tau for a in ev.simulate_each(model, s.model, prompts, conts, 3, progress=False,
                                                                states=states)])
    keep = ~(np.isnan(taus["dense"]) | np.isnan(taus["sparse"]))
    low, high = interval(taus["sparse"][keep] - taus["dense"][keep])
    return {"steps": steps, "loss_dense": losses["dense"].round(5).tolist(),
            "loss_sparse": losses["sparse"].round(5).tolist(), "max_loss_gap": round(float(gap.max()), 5),
            "median_loss_gap": round(float(np.median(gap)), 5),
            "median_step_to_step_change": round(float(np.median(noise)), 4),
            "tau_dense": round(float(taus["dense"][keep].mean()), 4),
            "tau_sparse": round(float(taus["sparse"][keep].mean()), 4), "prompts": int(keep.sum()),
            "tau_delta_interval": [round(low, 4), round(high, 4)]}


def demo_like_data(work: Path) -> Path:
    out = work / "data-{n_conversations}-{seq_length}-{held_out}".format(**DEMO_LIKE)
    build_dataset("smollm2", out, draft_vocab_size=VOCAB, dtype="native", progress=False, **DEMO_LIKE)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the 1024-token, 3-TTT pair (under 3 minutes)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps a path and shape (after one warm-up step)")
    ap.add_argument("--data", default=None, help="a data directory (default: a demo-like one built in --work)")
    ap.add_argument("--work", default="/tmp/eagle3kit-bench-train-step")
    ap.add_argument("--curves", type=int, default=0, help="also train both paths this many steps and compare")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    quiet()
    data = Path(args.data) if args.data else demo_like_data(Path(args.work))
    dtype = native_dtype("cpu")
    peak = matmul_peak(getattr(torch, dtype), repeats=50)
    shapes = [(1024, 3)] if args.quick else [(seq, ttt) for seq in (512, 1024, 2048) for ttt in (1, 3, 7)]
    rows = []
    for seq, ttt in shapes:
        rows.append(time_pair(data, seq, ttt, 8 if args.quick else args.steps, dtype, peak))
        print(json.dumps(rows[-1]), flush=True)
    if args.quick:
        r = rows[0]
        print(f"1024 tokens, 3 TTT steps, {dtype}: speculators' dense {r['dense_s']} s, block-sparse {r['sparse_s']} s "
              f"a step: {r['speedup']}x")
        return 0
    peak = max(peak, matmul_peak(getattr(torch, dtype), repeats=50))  # again after: the best of both
    result = {"machine": {"cpus": torch.get_num_threads(), "dtype": dtype, "matmul_peak_gflops": round(peak, 1),
                          "torch": torch.__version__}, "rows": rows, "parts": parts(data, args.steps, dtype),
              "profile": profile(data, dtype)}
    if args.curves:
        result["curves"] = curves(data, args.curves, dtype)
    RESULTS.with_suffix(".json").write_text(json.dumps(result, indent=1))
    RESULTS.with_suffix(".md").write_text(report(result))
    print(f"written to {RESULTS.with_suffix('.md')}")
    return 0


def report(result: dict) -> str:
    m = result["machine"]
    by = {(r["tokens"], r["ttt_steps"]): r for r in result["rows"]}
    lines = [
        "# One training step: speculators' dense path against the block-sparse one (`bench/train_step.py`)", "",
        f"{m['cpus']} threads, {m['dtype']} (the dtype the step trains in on this CPU), torch {m['torch']}; this "
        f"CPU's {m['dtype']} matmul peak measured in the run: {m['matmul_peak_gflops']} GFLOP/s. Median seconds a step "
        "(optimizer included) over interleaved steps; FLOPs a step per path, useful (issue 47's count: "
        "speculators' dense step without the attention its mask throws away) and needed (the least work for the "
        "same loss: linears on the rows whose draft chain reaches a loss, lm_head and loss on the loss rows, "
        "attention on the kept scores); a share = those FLOPs / the path's seconds / the peak.", "",
        markdown_table(pd.DataFrame(result["rows"])), "",
    ]
    if (1024, 3) in by and (2048, 3) in by:
        a, b = by[(1024, 3)], by[(2048, 3)]
        lines += [f"A 2048-token pack costs {b['dense_s'] / a['dense_s']:.2f}x a 1024 one on the dense path and "
                  f"{b['sparse_s'] / a['sparse_s']:.2f}x on the block-sparse one (3 TTT steps).", ""]
    lines += ["## Each change alone (1024 tokens, 3 TTT steps, forward + backward on one batch)", "",
              markdown_table(pd.DataFrame(result["parts"])), ""]
    for name, top in result["profile"].items():
        lines += [f"## Where a step goes: {name} (torch.profiler, self CPU time, 3 steps)", "",
                  markdown_table(pd.DataFrame(top)), ""]
    if "curves" in result:
        c = result["curves"]
        lines += [f"## The two paths trained {c['steps']} steps from the same start, on the same batches", "",
                  f"Loss gap between the paths: median {c['median_loss_gap']}, largest {c['max_loss_gap']}; the "
                  f"loss itself moves by a median {c['median_step_to_step_change']} from one batch to the next. "
                  f"τ (simulated, k 3, bonus token counted) on {c['prompts']} held-out prompts after the last step: "
                  f"dense {c['tau_dense']}, block-sparse {c['tau_sparse']}; paired difference 95 % interval "
                  f"{c['tau_delta_interval']}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
