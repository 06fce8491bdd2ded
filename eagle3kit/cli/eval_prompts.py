"""What ``evaluate`` and ``vllm-check`` both measure on: the prompts (held-out conversations of a data directory,
texts, or named benchmark sets), their length, the continuation, k (defaults: :mod:`eagle3kit.evaluate.defaults`),
and how a benchmark's table is printed and described."""

from __future__ import annotations

import argparse

from eagle3kit.errors import UserError
from eagle3kit.evaluate import defaults
from eagle3kit.evaluate.benchmarks import HELD_OUT, LONG_CONTEXT
from eagle3kit.evaluate.benchmarks import names as bench_names


def measure_options(p: argparse.ArgumentParser) -> None:
    """The options of what both commands measure on."""
    p.add_argument("--data", help="a data directory: its held-out conversations give the prompts (one speculators' "
                   "prepare-data made: the prompts of its validation rows)")
    p.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable)")
    p.add_argument("--bench", action="append", metavar="NAME", choices=bench_names(),
                   help=f"a named prompt set, scored per category (repeatable): {', '.join(bench_names())} "
                   f"(held-out: --data's held-out conversations; {LONG_CONTEXT}: τ against context length, never a "
                   "prompt --data trained on); see docs/scoring.md")
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
    p.add_argument("--longest", type=int, default=None, metavar="TOKENS",
                   help=f"with --bench {LONG_CONTEXT}: measure context lengths up to this many tokens (default: the "
                   "verifier's limit)")


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


def check_bench(args: argparse.Namespace) -> None:
    """``--bench`` names the prompts: ``--prompt`` would do nothing, ``--data`` only gives the held-out set."""
    if not args.bench:
        return
    if args.prompt:
        raise UserError("--prompt does nothing with --bench (the set gives the prompts); pass one or the other.")
    if HELD_OUT in args.bench and not args.data:
        raise UserError(f"--bench {HELD_OUT} scores a data directory's held-out conversations; pass --data DIR.")
    if args.data and HELD_OUT not in args.bench and LONG_CONTEXT not in args.bench:
        raise UserError(f"--data does nothing with --bench {' '.join(args.bench)}; add --bench {HELD_OUT} to score "
                        "its held-out conversations too, or leave --data out.")


def bench_sets(args: argparse.Namespace, tokenizer, limit: int | None = None) -> dict:
    """Each ``--bench`` set's prompts (:mod:`eagle3kit.evaluate.benchmarks`); the held-out one cut as
    ``--max-prompt-tokens`` says, the named ones whole; the long-context one built for a verifier whose positions
    end at ``limit``, leaving out what ``--data`` trained on."""
    from eagle3kit.data.loader import held_out_conversations
    from eagle3kit.evaluate import benchmarks

    sets = {}
    for name in dict.fromkeys(args.bench):
        if name == LONG_CONTEXT:
            from eagle3kit.evaluate import long_context

            exclude = long_context.training_prompts(args.data) if args.data else set()
            lengths = [b for b in long_context.buckets(limit) if b <= (args.longest or limit)]
            if not lengths:
                raise UserError(f"--longest {args.longest} is shorter than the shortest context measured "
                                f"({long_context.BUCKETS[0]} tokens).")
            per_bucket = -(-args.n_prompts // len(lengths)) if args.n_prompts else long_context.PER_BUCKET
            prompts = long_context.long_context_set(tokenizer, limit, per_bucket, exclude,
                                                    reply_room=args.max_new_tokens, lengths=lengths)
            sets[name] = benchmarks.balanced(prompts, args.n_prompts)
        elif name == HELD_OUT:
            held = benchmarks.held_out_set(held_out_conversations(args.data), args.n_prompts or defaults.N_PROMPTS)
            if not held:
                raise UserError(f"{args.data} has no held-out conversations (make some with `eagle3kit data "
                                "--held-out 8`).")
            sets[name] = [benchmarks.cut_user_turn(tokenizer, p, args.max_prompt_tokens) for p in held]
        else:
            sets[name] = benchmarks.load_set(name, args.n_prompts)
    return sets


def print_scores(name: str, table, k: int, args: argparse.Namespace, verifier) -> None:
    from eagle3kit.evaluate.scores import display_table
    from eagle3kit.tables import format_table

    print(f"\n{name}: τ per category (mean over prompts, 95% interval from bootstrapping prompts; pooled: all "
          f"rounds), k = {k}, temperature 0, at most {args.max_new_tokens} new tokens, verifier {verifier}")
    print(format_table(display_table(table).reset_index()))


def sources_of(args: argparse.Namespace) -> tuple[list, list | None]:
    """(conversations, prompt ids): what both commands measure on, refused before anything loads. The ids come from
    a directory speculators' pipeline made (its validation rows, as its trainer holds them out)."""
    from eagle3kit.data.loader import held_out_prompt_ids
    from eagle3kit.train.session import TrainSettings

    conversations = _conversations(args)
    if conversations:
        return conversations, None
    return [], held_out_prompt_ids(args.data, args.n_prompts or defaults.N_PROMPTS, args.max_prompt_tokens,
                                   TrainSettings.train_data_ratio)


def prompts_of(args: argparse.Namespace, sources: tuple[list, list | None], tokenizer) -> list:
    """The prompts ([1, P] ids): the conversations' through the verifier's chat template, else the rows' ids."""
    from eagle3kit.evaluate import acceptance as ev

    conversations, ids = sources
    return ids if ids is not None else ev.chat_prompts(tokenizer, conversations, args.n_prompts or defaults.N_PROMPTS,
                                                        args.max_prompt_tokens)


def bench_settings(args: argparse.Namespace, k: int, verifier) -> dict:
    """How a bench result was measured (its JSON's header)."""
    return {"k": k, "temperature": 0, "max_new_tokens": args.max_new_tokens,
            "max_prompt_tokens_held_out": args.max_prompt_tokens, "verifier": str(verifier)}
