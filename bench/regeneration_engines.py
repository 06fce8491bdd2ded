"""Who writes the verifier's replies fastest here, at the demo's own scale: transformers' batched loop against vLLM's
CPU build, offline and served, on the same prompts in one run; each engine's start apart, and the share of this CPU's
bf16 matmul peak each reaches.

    .venv/bin/python bench/regeneration_engines.py [--n 128] [--max-new-tokens 96] [--max-prompt-tokens 128]
        [--out bench/results/regeneration.json]

The prompts are notebook 04's: ``--n`` training conversations (the demo preset's 128) + its held-out ones (16) +
``SPARE_PROMPTS`` (8), ShareGPT first user turns cut to the demo's 128 tokens, up to its 96 new tokens, greedy.
Rows (what eagle3kit.data.regenerate runs, engine by engine):
  transformers fp32 b32   eagle3kit.data.generate.greedy_batch in float32, 32 rows (notebook 04 without vLLM);
                          its start is the verifier's load
  transformers bf16 b64   the same loop in bfloat16, 64 rows
  vLLM served             engine "vllm-served": `vllm serve` + speculators' `regenerate-responses`, start = until the
                          server answered; generation includes the client's own start and HTTP
  vLLM offline            engine "vllm" (what auto picks): vllm.LLM in data/regenerate_worker.py, start = until its
                          engine was built
Both vLLM rows run native_dtype (bf16 where the CPU computes it), every core, 256 sequences at once. The summary
states offline / served (tokens/s, and wall time start included). The peak: a 2048^3 bf16 matmul (and float32), best
of 5. A token costs 2 x (the verifier's parameters) FLOPs (embedding lookup left out, the tied lm_head counted).
tokens/s counts generated tokens over the generation's seconds. equal = replies equal to transformers fp32's (text).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.data import conversations as conv  # noqa: E402
from eagle3kit.data.generate import greedy_batch  # noqa: E402
from eagle3kit.device import native_dtype  # noqa: E402
from eagle3kit.data.regenerate import SPARE_PROMPTS, distinct_prompts, regenerate  # noqa: E402
from eagle3kit.presets import parameters  # noqa: E402
from eagle3kit.verifier import load_model, load_tokenizer, resolve  # noqa: E402

DEMO = parameters("demo", "04")  # on this CPU


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` n x n x n matmuls in ``dtype``."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--n", type=int, default=DEMO["n_conversations"],
                   help=f"training conversations; the prompts are these + {DEMO['held_out']} held out + "
                        f"{SPARE_PROMPTS} (notebook 04)")
    p.add_argument("--max-new-tokens", type=int, default=DEMO["regenerate_tokens"])
    p.add_argument("--max-prompt-tokens", type=int, default=DEMO["regenerate_prompt_tokens"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "regeneration.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    n_prompts = args.n + DEMO["held_out"] + SPARE_PROMPTS
    v = resolve(args.verifier)
    tok = load_tokenizer(v)
    t = time.perf_counter()
    model = load_model(v)
    load_s = time.perf_counter() - t
    params = sum(t.numel() for name, t in model.named_parameters() if "embed_tokens" not in name)
    params += model.lm_head.weight.numel() if model.config.tie_word_embeddings else 0
    flops_per_token = 2 * params
    eos, n = tok.eos_token_id, args.max_new_tokens
    heads = distinct_prompts(tok, None, 0, n_prompts, args.max_prompt_tokens)
    data = [ids for _, ids in heads]
    load0 = os.getloadavg()
    native = native_dtype("cpu")  # without native bf16 (AVX2 only) bf16 is emulated: its peak and row are left out
    peak = {dtype: matmul_peak(getattr(torch, dtype)) for dtype in dict.fromkeys(("float32", native))}
    print(f"{len(data)} prompts ({args.n} + {DEMO['held_out']} held out + {SPARE_PROMPTS}), {n} new tokens at most; "
          f"matmul peak {', '.join(f'{k} {x:.0f}' for k, x in peak.items())} GFLOP/s; "
          f"{flops_per_token / 1e6:.0f} MFLOP a token", flush=True)
    rows: list[dict] = []

    def add(name: str, seconds: float, tokens: int, start: float, replies: dict[str, str]) -> None:
        rate = tokens / seconds
        rows.append({"engine": name, "seconds": round(seconds, 1), "start_seconds": round(start, 1),
                     "tokens": tokens, "tokens_per_s": round(rate, 1),
                     f"share_of_{native}_peak": round(rate * flops_per_token / (peak[native] * 1e9), 3),
                     "replies": replies})
        print(f"  {name}: {tokens} tokens in {seconds:.1f}s ({rate:.0f} tok/s; start {start:.1f}s)", flush=True)

    def texts(outputs: list[list[int]]) -> dict[str, str]:
        return {json.dumps(turns): tok.decode([t for t in o if t != eos], skip_special_tokens=True)
                for (turns, _), o in zip(heads, outputs, strict=True)}

    t = time.perf_counter()
    got = greedy_batch(model, data, n, eos, batch_size=32)
    add("transformers fp32 b32", time.perf_counter() - t, sum(map(len, got)), load_s, texts(got))
    del model
    if native == "bfloat16":
        t = time.perf_counter()
        half = load_model(v, dtype="bfloat16")
        start = time.perf_counter() - t
        t = time.perf_counter()
        got = greedy_batch(half, data, n, eos, batch_size=64)
        add("transformers bf16 b64", time.perf_counter() - t, sum(map(len, got)), start, texts(got))
        del half
    for name, engine in (("vLLM served (regenerate-responses)", "vllm-served"), ("vLLM offline (vllm.LLM)", "vllm")):
        with tempfile.TemporaryDirectory() as tmp:
            info = regenerate(v, Path(tmp) / "r.jsonl", n_conversations=n_prompts, max_new_tokens=n,
                              max_prompt_tokens=args.max_prompt_tokens, engine=engine, progress=False)
            assert info.engine == engine and not info.resumed
            replies = {json.dumps(turns[:-1]): turns[-1]["content"] for turns in conv.read_jsonl(info.path)}
        add(name, info.seconds, info.generated_tokens, info.start_seconds, replies)
    load1 = os.getloadavg()
    ref = rows[0]["replies"]
    for r in rows:
        r["ratio_to_transformers_fp32"] = round(r["tokens_per_s"] / rows[0]["tokens_per_s"], 2)
        r["replies_equal_to_fp32"] = sum(r["replies"].get(k) == text for k, text in ref.items() if text.strip())
    served, offline = rows[-2], rows[-1]
    summary = {"offline_over_served_tokens_per_s": round(offline["tokens_per_s"] / served["tokens_per_s"], 2),
               "offline_over_served_wall": round((served["seconds"] + served["start_seconds"])
                                                 / (offline["seconds"] + offline["start_seconds"]), 2),
               "offline_replies_equal_to_served": sum(offline["replies"].get(k) == text
                                                      for k, text in served["replies"].items()),
               "served_replies": len(served["replies"])}
    for r in rows:
        del r["replies"]
    result = {"prompts": len(data), "n_conversations": args.n, "max_new_tokens": n,
              "max_prompt_tokens": args.max_prompt_tokens, "threads": args.threads, "cpus": os.cpu_count(),
              "matmul_peak_gflops": {k: round(x) for k, x in peak.items()}, "flops_per_token": flops_per_token,
              "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1],
              "rows": rows, "offline_vs_served": summary}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{'engine':<40}{'tok/s':>8}{'ratio':>7}{'peak':>7}{'start s':>9}  equal")
    for r in rows:
        print(f"{r['engine']:<40}{r['tokens_per_s']:>8.0f}{r['ratio_to_transformers_fp32']:>6.2f}x"
              f"{r[f'share_of_{native}_peak']:>7.1%}{r['start_seconds']:>9.1f}  {r['replies_equal_to_fp32']}")
    print(f"offline / served: {summary['offline_over_served_tokens_per_s']}x tokens/s, "
          f"{summary['offline_over_served_wall']}x wall (start included); replies equal "
          f"{summary['offline_replies_equal_to_served']}/{summary['served_replies']}")
    print(f"load {load0[0]:.2f} -> {load1[0]:.2f}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
