"""``eagle3kit`` commands for evaluation and serving (notebook 06): ``evaluate``, ``install-vllm`` and
``vllm-check``; each command's options, then its handler (a thin wrapper over the stage's library functions)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from eagle3kit.cli.args import signature_options
from eagle3kit.errors import UserError
from eagle3kit.evaluate import defaults
from eagle3kit.evaluate.benchmarks import HELD_OUT
from eagle3kit.evaluate.benchmarks import names as bench_names


# ----------------------------------------------------------------------------------------------- prompts
def _measure_options(p: argparse.ArgumentParser) -> None:
    """What ``evaluate`` and ``vllm-check`` both measure on (defaults: :mod:`eagle3kit.evaluate.defaults`): the
    prompts (held-out conversations of a data directory and/or texts), their length, the continuation, k."""
    p.add_argument("--data", help="a data directory: its held-out conversations give the prompts (one speculators' "
                   "prepare-data made: the prompts of its validation rows)")
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable)")
    p.add_argument("--bench", action="append", metavar="NAME", choices=bench_names(),
                   help=f"a named prompt set, scored per category (repeatable): {', '.join(bench_names())} "
                   "(held-out: --data's held-out conversations); see docs/scoring.md")
    p.add_argument("--n-prompts", type=int, default=None,
                   help=f"at most this many prompts (default: {defaults.N_PROMPTS}; a --bench set: all of it, a "
                   "shorter run takes the categories in turn)")
    p.add_argument("--json", default=None, metavar="FILE", dest="json_path",
                   help="also write the result as JSON (with --bench: the per-prompt records and the table)")
    p.add_argument("--max-prompt-tokens", type=int, default=defaults.MAX_PROMPT_TOKENS,
                   help=f"a prompt is cut to this many tokens (default: {defaults.MAX_PROMPT_TOKENS})")
    p.add_argument("--max-new-tokens", type=int, default=defaults.MAX_NEW_TOKENS,
                   help=f"greedy tokens per prompt (default: {defaults.MAX_NEW_TOKENS})")
    p.add_argument("--k", type=int, default=defaults.K, help="draft tokens per round (0: the draft's ttt_steps)")


def _conversations(args: argparse.Namespace) -> list:
    """What the prompts come from: the ``--prompt`` texts, then the held-out conversations of ``--data``."""
    from eagle3kit.data.loader import held_out_conversations

    source = [*(args.prompt or []), *(held_out_conversations(args.data) if args.data else [])]
    if not source and not _rows_give_prompts(args):
        where = (f"{args.data} has no held-out conversations (make one with `eagle3kit data --held-out 8`)"
                 if args.data else "No prompts were given")
        raise UserError(f"{where}; pass --data DIR (a data directory with held-out conversations) or --prompt TEXT.")
    return source


def _rows_give_prompts(args: argparse.Namespace) -> bool:
    """``--data`` is a directory speculators' pipeline made (no held-out conversations, no manifest): its
    validation rows give the prompts (:func:`eagle3kit.data.loader.held_out_prompt_ids`)."""
    from eagle3kit.data.directory import DataDir

    if not args.data or args.prompt:
        return False
    data = DataDir.open(args.data)
    return not data.has_manifest and data.has_arrow


def _check_bench(args: argparse.Namespace) -> None:
    """``--bench`` names the prompts: ``--prompt`` would do nothing, ``--data`` only gives the held-out set."""
    if not args.bench:
        return
    if args.prompt:
        raise UserError("--prompt does nothing with --bench (the set gives the prompts); pass one or the other.")
    if HELD_OUT in args.bench and not args.data:
        raise UserError(f"--bench {HELD_OUT} scores a data directory's held-out conversations; pass --data DIR.")
    if args.data and HELD_OUT not in args.bench:
        raise UserError(f"--data does nothing with --bench {' '.join(args.bench)}; add --bench {HELD_OUT} to score "
                        "its held-out conversations too, or leave --data out.")


def _bench_sets(args: argparse.Namespace, tokenizer) -> dict:
    """Each ``--bench`` set's prompts (:mod:`eagle3kit.evaluate.benchmarks`); the held-out one cut as
    ``--max-prompt-tokens`` says, the named ones whole."""
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import benchmarks

    sets = {}
    for name in dict.fromkeys(args.bench):
        if name == HELD_OUT:
            held = benchmarks.held_out_set(held_out_conversations(args.data), args.n_prompts or defaults.N_PROMPTS)
            if not held:
                raise UserError(f"{args.data} has no held-out conversations (make some with `eagle3kit data "
                                "--held-out 8`).")
            sets[name] = [benchmarks.cut_user_turn(tokenizer, p, args.max_prompt_tokens) for p in held]
        else:
            sets[name] = benchmarks.load_set(name, args.n_prompts)
    return sets


def _print_scores(name: str, table, k: int, args: argparse.Namespace, verifier) -> None:
    from eagle3kit.evaluate.scores import display_table
    from eagle3kit.tables import format_table

    print(f"\n{name}: τ per category (mean over prompts, 95% interval from bootstrapping prompts; pooled: all "
          f"rounds), k = {k}, temperature 0, at most {args.max_new_tokens} new tokens, verifier {verifier}")
    print(format_table(display_table(table).reset_index()))


def _sources(args: argparse.Namespace) -> tuple[list, list | None]:
    """(conversations, prompt ids): what both commands measure on, refused before anything loads. The ids come from
    a directory speculators' pipeline made (its validation rows, as its trainer holds them out)."""
    from eagle3kit.data.loader import held_out_prompt_ids
    from eagle3kit.train.session import TrainSettings

    conversations = _conversations(args)
    if conversations:
        return conversations, None
    return [], held_out_prompt_ids(args.data, args.n_prompts or defaults.N_PROMPTS, args.max_prompt_tokens,
                                   TrainSettings.train_data_ratio)


def _prompts(args: argparse.Namespace, sources: tuple[list, list | None], tokenizer) -> list:
    """The prompts ([1, P] ids): the conversations' through the verifier's chat template, else the rows' ids."""
    from eagle3kit.evaluate import acceptance as ev

    conversations, ids = sources
    return ids if ids is not None else ev.chat_prompts(tokenizer, conversations, args.n_prompts or defaults.N_PROMPTS,
                                                        args.max_prompt_tokens)


# ----------------------------------------------------------------------------------------------- evaluate
def evaluate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--draft", action="append", metavar="DIR", help="an exported draft (repeatable)")
    p.add_argument("--untrained", action="store_true", help="also an untrained draft of the same shape")
    p.add_argument("--verifier", help="default: the verifier recorded in the draft's config")
    _measure_options(p)
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
    _check_bench(args)
    sources = None if args.bench else _sources(args)
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
    prompts = _prompts(args, sources, tok)
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
    for name, prompts in _bench_sets(args, tok).items():
        _ids, _conts, records = scores.simulated_scores(model, tok, drafts, prompts, args.max_new_tokens, k)
        by_draft = {names[path]: r for path, r in records.items()}
        _print_scores(name, scores.score_table(by_draft), k, args, verifier)
        results[name] = by_draft
    print("\nSimulated: the draft's TTT forward on the verifier's greedy continuations (`vllm-check --bench` scores "
          "the same sets in vLLM).")
    if args.json_path:
        scores.write_sets(args.json_path, results, _settings(args, k, verifier))
    return 0


def _label(path: str) -> str:
    from pathlib import Path

    return Path(path).name or str(path)


def _settings(args: argparse.Namespace, k: int, verifier) -> dict:
    """How a bench result was measured (its JSON's header)."""
    return {"k": k, "temperature": 0, "max_new_tokens": args.max_new_tokens,
            "max_prompt_tokens_held_out": args.max_prompt_tokens, "verifier": str(verifier)}


# ----------------------------------------------------------------------------------------------- vLLM
def install_vllm_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.vllm_env import VENV_VAR, install_vllm_env

    signature_options(p, install_vllm_env, {"path": f"the environment's folder (None: ${VENV_VAR}, else .venv-vllm)"})


def cmd_install_vllm(args: argparse.Namespace) -> int:
    """install vLLM's CPU build in its own environment (once; a few minutes) and print its folder"""
    from eagle3kit.vllm_env import install_vllm_env

    print(install_vllm_env(args.path))
    return 0


def vllm_check_options(p: argparse.ArgumentParser) -> None:
    from eagle3kit.evaluate.vllm.serve import check_draft

    p.add_argument("--draft", required=True, metavar="DIR", help="an exported draft (speculators format)")
    p.add_argument("--verifier", metavar="DIR", help="the verifier's local directory (default: the one recorded in "
                   "the draft's config)")
    _measure_options(p)
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

    _check_bench(args)
    sources = None if args.bench else _sources(args)  # no prompts: say so before the draft and vLLM are looked at
    draft, verifier, k = serve.check_inputs(args.draft, args.verifier, args.k or None)
    python = vllm_python()  # no vLLM environment: say how to make one before anything is loaded
    tok = load_tokenizer(str(verifier))
    torch.set_num_threads(min(2, torch.get_num_threads()))
    model = load_model(str(verifier))
    sets = _bench_sets(args, tok) if args.bench else None
    if sets is not None:
        from eagle3kit.evaluate.benchmarks import render

        rendered = {name: render(tok, prompts, model) for name, prompts in sets.items()}
        prompts = [torch.tensor([ids]) for ids in sum(rendered.values(), [])]
    else:
        prompts = _prompts(args, sources, tok)
    try:
        check = serve.check_draft(draft, verifier, [p[0].tolist() for p in prompts], args.max_new_tokens, k,
                                  args.timeout)
    except VllmError as exc:  # vLLM failed to start or run: the message ends with its log's tail
        print(f"eagle3kit: {exc}", file=sys.stderr)
        return 1
    print(format_table(check.table()))
    conts = ev.continuations(model, prompts, args.max_new_tokens, tok.eos_token_id, progress=False)
    parts = ev.simulate_each(model, reload(draft), prompts, conts, k, progress=False)
    print("\nThe same prompts and lengths, eagle3kit beside vLLM:")
    print(format_table(comparison_table(check, ev.merge(parts), None, conts).reset_index(names="measure")))
    print("\nSpeed, with the draft beside without it (measured the same way):")
    print(format_table(speed_rows(check, None, args.max_new_tokens)))
    print(f"\n{len(prompts)} prompts, {args.max_new_tokens} greedy tokens each, k = {k}")
    if sets is not None:
        results = _vllm_bench_tables(args, sets, check, parts, k, verifier)
        if args.json_path:
            from eagle3kit.evaluate.scores import write_sets

            write_sets(args.json_path, results, _settings(args, k, verifier), vllm=dataclasses.asdict(check))
    elif args.json_path:
        write_text(args.json_path, json.dumps(dataclasses.asdict(check)))
    print(f"\nServe the draft (`vllm` is in {python.parent}):\n  {vllm_commands(draft, k, verifier)['long']}")
    if check.lossless < len(prompts):
        print(f"eagle3kit: the draft changed vLLM's greedy output on {len(prompts) - check.lossless} of "
              f"{len(prompts)} prompts; speculative decoding must leave it unchanged.", file=sys.stderr)
        return 1
    return 0


def _vllm_bench_tables(args: argparse.Namespace, sets: dict, check, parts: list, k: int, verifier) -> dict:
    """Per set: the simulated records beside vLLM's per-request ones, printed as one table with lossless stated."""
    from eagle3kit.evaluate import scores

    results, start = {}, 0
    for name, prompts in sets.items():
        end = start + len(prompts)
        same = sum(a == b for a, b in zip(check.outputs_draft[start:end], check.outputs_plain[start:end],
                                          strict=True))
        by_engine = {"simulated": scores.from_simulation(prompts, parts[start:end]),
                     "vLLM": scores.from_vllm(prompts, check.histograms[start:end])}
        _print_scores(name, scores.score_table(by_engine), k, args, verifier)
        print(f"lossless in vLLM: {same}/{len(prompts)} prompts gave the same tokens with and without the draft")
        results[name] = by_engine
        start = end
    return results
