"""``evaluate``: acceptance length τ of exported drafts, simulated and by a real decode loop, or per category of
named benchmark sets (notebook 06)."""

from __future__ import annotations

import argparse

from eagle3kit.cli.eval_prompts import (bench_sets, bench_settings, check_bench, measure_options, print_scores,
                                        prompts_of, sources_of)
from eagle3kit.errors import UserError
from eagle3kit.evaluate.benchmarks import LONG_CONTEXT


def evaluate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    measure_options(p)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-decode", action="store_true", help="simulated acceptance only (skip the decode loop)")
    p.add_argument("--show", metavar="FILE.html", help="also write every reply token's fate (accepted at which "
                   "depth, the verifier's own after a rejection, bonus) for the prompts evaluated, with where the "
                   "draft fails by token class, as one self-contained HTML page")


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
    conts = ev.continuations(model, prompts, args.max_new_tokens, tok.eos_token_id)
    states: dict = {}
    table, _sim, _real = ev.compare(model, tok, drafts, prompts, args.max_new_tokens, k, not args.no_decode,
                                    conts=conts, states=states)
    print(format_table(table, fallback=column_blocks))
    from eagle3kit.evaluate.conventions import TAU_CONVENTION

    print(f"\n{TAU_CONVENTION} (k = {k}, {len(prompts)} prompts, {args.max_new_tokens} greedy tokens each)")
    if args.json_path:
        from eagle3kit.atomic import write_text

        write_text(args.json_path, table.to_json(orient="records", indent=1))
    if args.show:
        from eagle3kit.evaluate.benchmarks import BenchPrompt

        named = [BenchPrompt(f"prompt/{i}", "prompts", ()) for i in range(len(prompts))]
        ids = [p[0].tolist() for p in prompts]
        _show(args, model, tok, {path: (d, {"prompts": (named, ids, conts)}) for path, d in drafts.items()}, k,
              states)
    return 0


def _evaluate_bench(args: argparse.Namespace, model, tok, drafts: dict, k: int, verifier) -> int:
    """``evaluate --bench``: each set scored per category by simulation, every draft on the same continuations; the
    long-context set also as the curve of τ against context length."""
    from eagle3kit.evaluate import long_context, scores

    results, shown, states = {}, {}, {}
    for name, prompts in bench_sets(args, tok, model.config.max_position_embeddings).items():
        if name == LONG_CONTEXT:
            ids, conts, records = long_context.score(model, drafts, tok, prompts, args.max_new_tokens, k, states)
        else:
            ids, conts, records = scores.simulated_scores(model, tok, drafts, prompts, args.max_new_tokens, k,
                                                          states=states)
        by_draft = {_name(path): r for path, r in records.items()}
        print_scores(name, scores.score_table(by_draft), k, args, verifier)
        if name == LONG_CONTEXT:
            _print_curves(by_draft, drafts)
        results[name] = by_draft
        for path, d in drafts.items():
            shown.setdefault(path, (d, {}))[1][name] = (prompts, ids, conts)
    from eagle3kit.evaluate.conventions import TAU_CONVENTION

    print(f"\nSimulated: the draft's TTT forward on the verifier's greedy continuations (`vllm-check --bench` scores "
          f"the same sets in vLLM). {TAU_CONVENTION}.")
    if args.json_path:
        scores.write_sets(args.json_path, results, bench_settings(args, k, verifier))
    if args.show:
        _show(args, model, tok, shown, k, states, results.get(LONG_CONTEXT))
    return 0


def _print_curves(by_draft: dict, drafts: dict) -> None:
    """Each draft's τ per context length, and the doctor's sentence when it falls past its training length."""
    from eagle3kit.evaluate.context_curve import curve_table, fall
    from eagle3kit.evaluate.conventions import TAU_LABEL
    from eagle3kit.tables import format_table

    for path, d in drafts.items():
        name = _name(path)
        table = curve_table(by_draft[name])
        trained, window = _lengths(path, d)
        print(f"\n{name}: {TAU_LABEL} against context length (trained at {trained or 'an unknown length'}, "
              f"sliding window {window or 'none'})")
        print(format_table(table.reset_index().round(3)))
        found = fall(table, trained) if trained else None
        if found is not None and found.falls:
            print(found.line(window))


def _lengths(path: str, draft) -> tuple[int | None, int | None]:
    """(the context the draft was trained at, its sliding window): from its folder's records and config."""
    from eagle3kit.doctor.checks.draft_loader import sliding_window, trained_length

    return (None if path == "untrained" else trained_length(path)), sliding_window(draft.config)


def _show(args: argparse.Namespace, model, tok, shown: dict, k: int, states: dict, long_records: dict | None = None
          ) -> None:
    """``--show``: every token's fate for the prompts evaluated, per draft and set, on one page."""
    from eagle3kit.evaluate.conventions import TAU_CONVENTION
    from eagle3kit.evaluate.fates import views_of
    from eagle3kit.evaluate.token_classes import draft_vocab_mask
    from eagle3kit.evaluate.token_page import figure_html, write_page

    sections, vocab, figures = {}, {}, []
    for path, (d, sets) in shown.items():
        for set_name, (prompts, ids, conts) in sets.items():
            sections[f"{_name(path)} · {set_name}"] = views_of(model, d, prompts, ids, conts, k, states)
            vocab[f"{_name(path)} · {set_name}"] = draft_vocab_mask(d)
        if long_records is not None:
            from eagle3kit.evaluate.context_curve import curve_table, plot_context_curve

            figures.append(figure_html(plot_context_curve(curve_table(long_records[_name(path)]), *_lengths(path, d),
                                                          f"{_name(path)}: τ against context length"), TAU_CONVENTION))
    out = write_page(args.show, sections, tok, "Every token's fate", vocab,
                     f"k = {k}, temperature 0, at most {args.max_new_tokens} new tokens; simulated exactly as "
                     "`eagle3kit evaluate` scores it (its per-prompt τ is this page's).", figures)
    print(f"\nevery token's fate: {out}")


def _name(path: str) -> str:
    from pathlib import Path

    return "untrained" if path == "untrained" else (Path(path).name or str(path))
