"""Who writes the verifier's replies fastest here: transformers' batched loop against vLLM's CPU build, on the same
prompts in one run, and the share of this CPU's bf16 matmul peak each reaches.

    .venv/bin/python bench/regeneration_engines.py [--n 280] [--max-new-tokens 96] [--max-prompt-tokens 128]
        [--out bench/results/regeneration.json]

Rows (the demo's regeneration: ShareGPT first user turns cut to 128 tokens, up to 96 new tokens, greedy):
  transformers fp32 b32   eagle3kit.data.generate.greedy_batch in float32, 32 rows (what notebook 04 used: 118 tok/s)
  transformers bf16 b64   the same loop in bfloat16, 64 rows
  vLLM served (eagle3kit) `vllm serve` + speculators' `regenerate-responses` (eagle3kit.data.regenerate, engine vllm):
                          bf16, every core, 256 sequences at once; its engine start is timed apart
  vLLM offline LLM.generate  the same engine without the server (evaluate/vllm/worker.py), bf16, every core
  vLLM offline, 1 core    vLLM's default core reservation (one core kept for its own process)
The peak: a 2048^3 bf16 matmul (and float32), best of 5. A token costs 2 x (the verifier's parameters) FLOPs
(embedding lookup left out, the tied lm_head counted). tokens/s counts generated tokens over the generation's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eagle3kit.data.generate import greedy_batch  # noqa: E402
from eagle3kit.data.regenerate import distinct_prompts, regenerate  # noqa: E402
from eagle3kit.evaluate.vllm.serve import WORKER  # noqa: E402
from eagle3kit.processes import log_tail  # noqa: E402
from eagle3kit.verifier import load_model, load_tokenizer, resolve  # noqa: E402
from eagle3kit.vllm_env import run_env, vllm_python  # noqa: E402


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


def vllm_offline(verifier: str, prompts: list[list[int]], max_new_tokens: int, env: dict) -> dict:
    """One vLLM engine (bf16, no draft) generating greedily from the prompts' ids, through evaluate/vllm/worker.py."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"verifier": verifier, "k": 1, "prompts": prompts, "max_new_tokens": max_new_tokens, "runs": ["plain"],
                "dtype": "bfloat16", "max_num_seqs": 256, "step_times": False, "kv_cache_gb": 4}
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        log = Path(tmp) / "log"
        with log.open("w") as f:
            code = subprocess.run([str(vllm_python()), str(WORKER), f"{tmp}/spec.json", f"{tmp}/out.json"],
                                  stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **env}).returncode
        if code:
            raise RuntimeError(f"vLLM worker failed:\n{log_tail(log)}")
        run = json.loads((Path(tmp) / "out.json").read_text())["runs"]["plain"]
    return {"seconds": run["seconds"], "start_seconds": run["load_seconds"], "tokens": run["generated_tokens"],
            "outputs": run["outputs"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verifier", default="smollm2")
    p.add_argument("--n", type=int, default=280, help="prompts (the demo regenerates 256 + 16 held out + 8)")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--max-prompt-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "regeneration.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    v = resolve(args.verifier)
    tok = load_tokenizer(v)
    model = load_model(v)
    params = sum(t.numel() for name, t in model.named_parameters() if "embed_tokens" not in name)
    params += model.lm_head.weight.numel() if model.config.tie_word_embeddings else 0
    flops_per_token = 2 * params
    eos, n = tok.eos_token_id, args.max_new_tokens
    heads = distinct_prompts(tok, None, 0, args.n, args.max_prompt_tokens)
    data = [ids for _, ids in heads]
    load0 = os.getloadavg()
    peak = {"bfloat16": matmul_peak(torch.bfloat16), "float32": matmul_peak(torch.float32)}
    print(f"{len(data)} prompts, {n} new tokens at most; matmul peak bf16 {peak['bfloat16']:.0f} GFLOP/s, "
          f"float32 {peak['float32']:.0f}; {flops_per_token / 1e6:.0f} MFLOP a token", flush=True)
    rows: list[dict] = []

    def add(name: str, seconds: float, tokens: int, start: float = 0.0, outputs=None) -> None:
        rate = tokens / seconds
        rows.append({"engine": name, "seconds": round(seconds, 1), "start_seconds": round(start, 1),
                     "tokens": tokens, "tokens_per_s": round(rate, 1),
                     "share_of_bf16_peak": round(rate * flops_per_token / (peak["bfloat16"] * 1e9), 3),
                     "outputs": outputs})
        print(f"  {name}: {tokens} tokens in {seconds:.1f}s ({rate:.0f} tok/s; start {start:.0f}s)", flush=True)

    t = time.perf_counter()
    ref = greedy_batch(model, data, n, eos, batch_size=32)
    add("transformers fp32 b32", time.perf_counter() - t, sum(map(len, ref)), outputs=ref)
    half = load_model(v, dtype="bfloat16")
    t = time.perf_counter()
    got = greedy_batch(half, data, n, eos, batch_size=64)
    add("transformers bf16 b64", time.perf_counter() - t, sum(map(len, got)), outputs=got)
    del half
    with tempfile.TemporaryDirectory() as tmp:
        info = regenerate(v, Path(tmp) / "r.jsonl", n_conversations=args.n, max_new_tokens=n,
                          max_prompt_tokens=args.max_prompt_tokens, engine="vllm", progress=False)
        add("vLLM served (eagle3kit regenerate)", info.seconds, info.generated_tokens, info.start_seconds)
    for name, env in (("vLLM offline LLM.generate", run_env()),
                      ("vLLM offline, 1 core (vLLM's default reservation)", {"VLLM_CPU_KVCACHE_SPACE": "4"})):
        r = vllm_offline(v.path, data, n, env)
        add(name, r["seconds"], r["tokens"], r["start_seconds"],
            [[t for t in o if t != eos] for o in r["outputs"]])
    load1 = os.getloadavg()
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["ratio_to_transformers_fp32"] = round(r["tokens_per_s"] / base, 2)
        outs = r.pop("outputs")
        r["replies_equal_to_fp32"] = None if outs is None else sum(a == b for a, b in zip(outs, ref, strict=True))
    result = {"prompts": len(data), "max_new_tokens": n, "max_prompt_tokens": args.max_prompt_tokens,
              "threads": args.threads, "cpus": os.cpu_count(), "matmul_peak_gflops": {k: round(x) for k, x in
                                                                                      peak.items()},
              "flops_per_token": flops_per_token, "load_before": [round(x, 2) for x in load0],
              "load_after": [round(x, 2) for x in load1], "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"\n{'engine':<50}{'tok/s':>8}{'ratio':>7}{'peak':>7}{'start s':>9}  equal")
    for r in rows:
        print(f"{r['engine']:<50}{r['tokens_per_s']:>8.0f}{r['ratio_to_transformers_fp32']:>6.2f}x"
              f"{r['share_of_bf16_peak']:>7.1%}{r['start_seconds']:>9.0f}  {r['replies_equal_to_fp32']}")
    print(f"load {load0[0]:.2f} -> {load1[0]:.2f}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
