"""``vllm-check``: an exported draft served in real vLLM (CPU build): τ by vLLM's counters beside eagle3kit's on the
same prompts, the output unchanged; with ``--bench``, per category of named sets (notebook 06)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from eagle3kit.cli.args import signature_options
from eagle3kit.errors import UserError
from eagle3kit.evaluate.benchmarks import LONG_CONTEXT
from eagle3kit.cli.eval_prompts import (bench_sets, bench_settings, check_bench, measure_options, print_scores,
                                        prompts_of, sources_of)


def vllm_check_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.evaluate.vllm.serve import check_draft

    p.add_argument("--draft", required=True, metavar="DIR", help="an exported draft (speculators format)")
    p.add_argument("--verifier", metavar="DIR", help="the verifier's local directory (default: the one recorded in "
                   "the draft's config)")
    measure_options(p)
    signature_options(p, check_draft, {"timeout": "seconds before vLLM is stopped"})


def cmd_vllm_check(args: argparse.Namespace) -> int:
    """run an exported draft in real vLLM (CPU build): tau by vLLM's counters beside eagle3kit's simulated tau on
    the same prompts and lengths, output unchanged (exit 1 if not); with --bench, per category of a named set"""
    import torch

    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.export import reload, vllm_commands
    from eagle3kit.evaluate.vllm import serve
    from eagle3kit.evaluate.vllm.compare import comparison_table, speed_rows
    from eagle3kit.vllm_env import VllmError, vllm_python
    from eagle3kit.atomic import write_text
    from eagle3kit.tables import format_table
    from eagle3kit.verifier import load_model, load_tokenizer

    check_bench(args)
    if LONG_CONTEXT in (args.bench or []):
        raise UserError(f"vllm-check does not serve the {LONG_CONTEXT} set (histories up to the verifier's limit, "
                        f"for minutes on a CPU); `eagle3kit evaluate --bench {LONG_CONTEXT}` simulates it.")
    sources = None if args.bench else sources_of(args)  # no prompts: say so before the draft and vLLM are looked at
    draft, verifier, k = serve.check_inputs(args.draft, args.verifier, args.k or None)
    python = vllm_python()  # no vLLM environment: say how to make one before anything is loaded
    tok = load_tokenizer(str(verifier))
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = load_model(str(verifier))
    sets = bench_sets(args, tok) if args.bench else None
    if sets is not None:
        from eagle3kit.evaluate.benchmarks import render

        rendered = {name: render(tok, prompts, model) for name, prompts in sets.items()}
        prompts = [torch.tensor([ids]) for ids in sum(rendered.values(), [])]
    else:
        prompts = prompts_of(args, sources, tok)
        rendered = {"all": [p[0].tolist() for p in prompts]}
    try:  # every set in one batch: one start of each engine
        check, parts = serve.check_sets(draft, verifier, rendered, args.max_new_tokens, k, args.timeout)
    except VllmError as exc:  # vLLM failed to start or run: the message ends with its log's tail
        print(f"eagle3kit: {exc}", file=sys.stderr)
        return 1
    print(format_table(check.table()))
    conts = ev.continuations(model, prompts, args.max_new_tokens, tok.eos_token_id, progress=False)
    sim_parts = ev.simulate_each(model, reload(draft), prompts, conts, k, progress=False)
    print("\nThe same prompts and lengths, eagle3kit beside vLLM:")
    print(format_table(comparison_table(check, ev.merge(sim_parts), None, conts).reset_index(names="measure")))
    print("\nSpeed, with the draft beside without it (measured the same way):")
    print(format_table(speed_rows(check, None, args.max_new_tokens)))
    print(f"\n{len(prompts)} prompts, {args.max_new_tokens} greedy tokens each, k = {k}")
    if sets is not None:
        results = _vllm_bench_tables(args, sets, parts, sim_parts, k, verifier)
        if args.json_path:
            from eagle3kit.evaluate.scores import write_sets

            counters = {name: {f: getattr(c, f) for f in ("drafts", "accepted", "accepted_per_pos")}
                        for name, c in parts.items()}  # each set's, from vLLM's per-request metrics
            write_sets(args.json_path, results, bench_settings(args, k, verifier), vllm=dataclasses.asdict(check),
                       vllm_sets=counters)
    elif args.json_path:
        write_text(args.json_path, json.dumps(dataclasses.asdict(check)))
    print(f"\nServe the draft (`vllm` is in {python.parent}):\n  {vllm_commands(draft, k, verifier)['long']}")
    if check.lossless < len(prompts):
        print(f"eagle3kit: the draft changed vLLM's greedy output on {len(prompts) - check.lossless} of "
              f"{len(prompts)} prompts; speculative decoding must leave it unchanged.", file=sys.stderr)
        return 1
    return 0


def _vllm_bench_tables(args: argparse.Namespace, sets: dict, checks: dict, parts: list, k: int, verifier) -> dict:
    """Per set: the simulated records beside vLLM's per-request ones, printed as one table with lossless stated
    (``checks``: vLLM's check of each set, :func:`eagle3kit.evaluate.vllm.serve.check_sets`)."""
    from eagle3kit.evaluate import scores

    results, start = {}, 0
    for name, prompts in sets.items():
        end, check = start + len(prompts), checks[name]
        by_engine = {"simulated": scores.from_simulation(prompts, parts[start:end]),
                     "vLLM": scores.from_vllm(prompts, check.histograms)}
        print_scores(name, scores.score_table(by_engine), k, args, verifier)
        print(f"lossless in vLLM: {check.lossless}/{len(prompts)} prompts gave the same tokens with and without the "
              "draft")
        results[name] = by_engine
        start = end
    return results
