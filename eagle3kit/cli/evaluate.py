"""``evaluate``: acceptance length τ of exported drafts, simulated and by a real decode loop, or per category of
named benchmark sets (notebook 06)."""

from __future__ import annotations

import argparse

from eagle3kit.cli.measure import (bench_sets, bench_settings, check_bench, measure_options, print_scores, prompts_of,
                                   sources_of)
from eagle3kit.errors import UserError


def evaluate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    measure_options(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-decode", action="store_true", help="simulated acceptance only (skip the decode loop)")


def cmd_evaluate(args: argparse.Namespace) -> int:
    """acceptance length tau of drafts: simulated and by a real decode loop; with --bench, per category of a
    named prompt set"""
    import torch

    from eagle3kit.draft.config import build_config, draft_ttt_steps
    from eagle3kit.draft.model import build_model
    from eagle3kit.evaluate import acceptance as ev
    from eagle3kit.evaluate.export import reload
    from eagle3kit.tables import column_blocks, format_table
    from eagle3kit.verifier import load_model, load_tokenizer

    torch.set_num_threads(min(2, torch.get_num_threads()))
    check_bench(args)
    sources = None if args.bench else sources_of(args)
    drafts = {path: reload(path) for path in args.draft or []}
    first = next(iter(drafts.values()), None)
    verifier = args.verifier or (first.config.speculators_config.verifier.name_or_path if first else None)
    if verifier is None or not (drafts or args.untrained):
        raise UserError("Pass --draft DIR (a draft exported by `eagle3kit train ... --export DIR`), and/or "
                        "--untrained with --verifier NAME.")
    if args.untrained:
        t2d, d2t = (first.t2d, first.d2t) if first is not None else (None, None)
        size = first.config.draft_vocab_size if first is not None else None
        torch.manual_seed(args.seed)
        drafts = {"untrained": build_model(build_config(verifier=verifier, draft_vocab_size=size, training=False,
                                                        ttt_steps=max(1, args.k)), t2d=t2d, d2t=d2t).eval(),
                  **drafts}
    k = args.k or (draft_ttt_steps(first.config) if first else 3)
    model, tok = load_model(verifier), load_tokenizer(verifier)
    if args.bench:
        return _evaluate_bench(args, model, tok, drafts, k, verifier)
    prompts = prompts_of(args, sources, tok)
    table, _sim, _real = ev.compare(model, tok, drafts, prompts, args.max_new_tokens, k, not args.no_decode)
    print(format_table(table, fallback=column_blocks))
    print(f"\ntau = accepted draft tokens + 1 bonus token per round (k = {k}, {len(prompts)} prompts, "
          f"{args.max_new_tokens} greedy tokens each)")
    if args.json_path:
        from eagle3kit.atomic import write_text

        write_text(args.json_path, table.to_json(orient="records", indent=1))
    return 0


def _evaluate_bench(args: argparse.Namespace, model, tok, drafts: dict, k: int, verifier) -> int:
    """``evaluate --bench``: each set scored per category by simulation, every draft on the same continuations."""
    from eagle3kit.evaluate import scores

    names = {path: ("untrained" if path == "untrained" else _label(path)) for path in drafts}
    results = {}
    for name, prompts in bench_sets(args, tok).items():
        _ids, _conts, records = scores.simulated_scores(model, tok, drafts, prompts, args.max_new_tokens, k)
        by_draft = {names[path]: r for path, r in records.items()}
        print_scores(name, scores.score_table(by_draft), k, args, verifier)
        results[name] = by_draft
    print("\nSimulated: the draft's TTT forward on the verifier's greedy continuations (`vllm-check --bench` scores "
          "the same sets in vLLM).")
    if args.json_path:
        scores.write_sets(args.json_path, results, bench_settings(args, k, verifier))
    return 0


def _label(path: str) -> str:
    from pathlib import Path

    return Path(path).name or str(path)
