"""Self-distillation data: the verifier writes the assistant replies it will later be asked to speed up.

A draft learns to predict the verifier. On human-written replies (ShareGPT) the training text is not what the
verifier would write, so at serving time the draft meets text unlike its training data. Replacing each reply by the
verifier's own greedy answer removes that gap. Three engines write the replies: ``"vllm"``, vLLM's CPU build offline
(``vllm.LLM``, the fastest here), ``"vllm-served"``, the same engine served and asked by speculators' own
``regenerate-responses`` (the route speculators documents; both in :mod:`eagle3kit.data.regenerate_vllm`, into the
same rows), and ``"transformers"``, :func:`eagle3kit.data.generate.greedy_replies` on any device (many replies per
forward, rows leaving as they finish and waiting prompts joining).

Each conversation keeps its system turns and its first user turn (cut to ``max_prompt_tokens``) and gets
the verifier's reply. The output is a JSONL (``{"messages": [...]}`` per line) that
``eagle3kit.data.dataset.build_dataset(source=...)`` reads. Each reply is saved as it finishes to ``<out>.partial``; an
interrupted run resumes there (a vLLM engine's rows in :func:`vllm_rows`, with the same settings), and the final file
is written atomically, in the source's seeded order.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from eagle3kit import validate
from eagle3kit.atomic import write_text
from eagle3kit.data import conversations as conv
from eagle3kit.data.generate import greedy_replies
from eagle3kit.device import resolve_device
from eagle3kit.progress import tqdm
from eagle3kit.verifier import Verifier, load_model, load_tokenizer, resolve


ENGINES = ("auto", "vllm", "vllm-served", "transformers")
VLLM_ENGINES = ENGINES[1:3]  # vLLM's CPU build: offline, served
SPARE_PROMPTS = 8  # notebook 04 asks this many beyond its training and held-out conversations (empty replies drop)


@dataclass
class RegenInfo:
    path: str
    n_conversations: int
    generated_tokens: int
    seconds: float  # of this call's generation (0 when everything was already done)
    tokens_per_s: float | None
    resumed: int  # conversations taken over from an interrupted run
    empty: int  # prompts the verifier answered with nothing at once (left out)
    engine: str = "transformers"  # what wrote the replies: one of ENGINES but "auto"
    start_seconds: float = 0.0  # the engine's start (vLLM: until its engine was built or its server answered)

    def line(self) -> str:
        """What this call did, in one line (every field: ``vars(info)``)."""
        speed = (f" ({self.tokens_per_s:.0f} tokens/s, after a {self.start_seconds:.0f} s start)"
                 if self.tokens_per_s else "")
        return (f"{self.engine} wrote {self.generated_tokens:,} reply tokens for {self.n_conversations} prompts in "
                f"{self.seconds:.0f} s{speed}" + (f"; {self.resumed} taken over from an interrupted run"
                                                   if self.resumed else "")
                + (f"; {self.empty} answered with nothing, left out" if self.empty else ""))


def choose_engine(engine: str, verifier_path: str | None, device: str) -> tuple[str, str | None]:
    """(the engine that writes the replies, why not vLLM when "auto" falls back). "auto": vLLM's CPU build offline
    when it is installed and runs this verifier on a CPU (the fastest here: ``bench/regeneration_engines.py``), else
    transformers' batched loop."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)} (got {engine!r}).")
    if engine == "transformers":
        return engine, None
    from eagle3kit.data import regenerate_vllm

    why = ("it runs the CPU build here, not on " + device) if device != "cpu" else regenerate_vllm.usable(verifier_path)
    if why and engine in VLLM_ENGINES:
        raise ValueError(f"engine={engine!r} cannot write these replies: {why}.")
    return ("transformers", f"transformers writes the replies (not vLLM: {why})") if why else (
        "vllm" if engine == "auto" else engine, None)


def regenerate(
    verifier: Verifier | str = "smollm2",
    out_path: str | os.PathLike = "regenerated.jsonl",
    n_conversations: int = 64,
    max_new_tokens: int = 256,
    max_prompt_tokens: int = 256,
    seed: int = 0,
    source: str | os.PathLike | None = None,
    batch_size: int = 32,  # bench/regenerate.py: 4.8x batch-1 tokens/s at 32, 4.4x at 16 (2 cores)
    device: str = "auto",
    progress: bool = True,
    engine: str = "auto",
) -> RegenInfo:
    """Write ``n_conversations`` conversations whose reply is the verifier's greedy answer (resumable). ``engine``:
    see :func:`choose_engine` (vLLM writes in bf16 where the CPU computes it natively, transformers in float32)."""
    validate.check_all({"n_conversations": n_conversations, "max_new_tokens": max_new_tokens,
                        "max_prompt_tokens": max_prompt_tokens, "batch_size": batch_size})
    v = resolve(verifier)
    engine, fallback = choose_engine(engine, v.path, resolve_device(device))
    if fallback and progress:
        print(fallback)
    out = Path(out_path)
    partial = out.with_name(out.name + ".partial")
    settings = {"verifier": v.path, "n_conversations": n_conversations, "max_new_tokens": max_new_tokens,
                "max_prompt_tokens": max_prompt_tokens, "engine": engine,
                "seed": seed, "source": str(Path(source).resolve()) if source is not None else None}
    if out.is_file():  # finished before with the same settings: nothing to read or generate
        done = _read_records(out)
        if done and done[0].get("settings") == settings:
            return RegenInfo(str(out), len(done), 0, 0.0, None, len(done), 0, engine)
    tokenizer = load_tokenizer(v)
    prompts = distinct_prompts(tokenizer, source, seed, n_conversations, max_prompt_tokens)
    records = _resume(partial, settings)
    resumed = len(records)
    if not partial.is_file():  # a new run: what a vLLM engine left belongs to another one
        for leftover in _vllm_leftovers(out):
            leftover.unlink(missing_ok=True)
        write_text(partial, json.dumps({"settings": settings}) + "\n")
    todo = [i for i in range(len(prompts)) if i not in records]
    started = 0.0
    if todo and engine in VLLM_ENGINES:
        seconds, n_tokens, started, more = _write_with_vllm(v.path, engine == "vllm-served", tokenizer, prompts, todo,
                                                            records, out, max_new_tokens, progress)
        resumed += more
    elif todo:
        model = load_model(v, device=resolve_device(device))
        t0, n_tokens = time.perf_counter(), 0
        bar = tqdm(total=len(todo), desc="regenerate", unit="conv", disable=not progress)
        with partial.open("a", encoding="utf-8") as f:
            for j, reply in greedy_replies(model, [prompts[i][1] for i in todo], max_new_tokens,
                                           tokenizer.eos_token_id, batch_size):
                i = todo[j]
                text = tokenizer.decode(reply, skip_special_tokens=True)
                records[i] = {"index": i, "messages": prompts[i][0] + [{"role": "assistant", "content": text}],
                              "tokens": len(reply)}
                f.write(json.dumps(records[i]) + "\n")
                f.flush()
                n_tokens += len(reply)
                bar.update(1)
                bar.set_postfix(tok_s=f"{n_tokens / (time.perf_counter() - t0):.0f}")
        bar.close()
        seconds = time.perf_counter() - t0
    else:
        seconds, n_tokens = 0.0, 0
    kept = [records[i] for i in range(len(prompts)) if records[i]["messages"][-1]["content"].strip()]
    if not kept:
        raise ValueError(f"The verifier's reply was empty for all {len(prompts)} prompts (it ended the turn at once); "
                         "is it a chat model with a chat template? Try more conversations or another verifier.")
    lines = [json.dumps({"messages": r["messages"], "settings": settings}) for r in kept]
    write_text(out, "\n".join(lines) + "\n")
    partial.unlink(missing_ok=True)
    return RegenInfo(str(out), len(kept), sum(r["tokens"] for r in kept), round(seconds, 2),
                     round(n_tokens / seconds, 1) if seconds else None, resumed, len(prompts) - len(kept), engine,
                     round(started, 2))


def vllm_rows(out_path: str | os.PathLike) -> Path:
    """The rows a vLLM engine writes for ``out_path`` (speculators' format), resumed by a rerun with the same
    settings and removed once the file is finished."""
    out = Path(out_path)
    return out.with_name(out.name + ".partial.vllm.jsonl")


def _vllm_leftovers(out: Path) -> tuple[Path, Path]:
    from eagle3kit.data.regenerate_vllm import errors_file

    return vllm_rows(out), errors_file(vllm_rows(out))


def _write_with_vllm(path: str, served: bool, tokenizer, prompts, todo: list[int], records: dict, out: Path,
                     max_new_tokens: int, progress: bool) -> tuple[float, int, float, int]:
    """The replies of ``todo`` written by vLLM, offline or ``served`` (:mod:`eagle3kit.data.regenerate_vllm`), kept
    in ``records`` and appended to the partial file; (seconds writing, tokens written by this call, seconds starting,
    replies taken over from the rows an interrupted run left)."""
    from eagle3kit.data.regenerate_vllm import replies

    run = replies(path, {i: prompts[i][0] for i in todo}, vllm_rows(out), max_new_tokens, served, progress)
    eos = tokenizer.eos_token_id
    n_tokens = 0
    with out.with_name(out.name + ".partial").open("a", encoding="utf-8") as f:
        for i in todo:
            reply = [t for t in run.ids.get(i, []) if t != eos]
            text = tokenizer.decode(reply, skip_special_tokens=True)
            records[i] = {"index": i, "messages": prompts[i][0] + [{"role": "assistant", "content": text}],
                          "tokens": len(reply)}
            f.write(json.dumps(records[i]) + "\n")
            n_tokens += 0 if i in run.resumed else len(reply)
    for leftover in _vllm_leftovers(out):
        leftover.unlink(missing_ok=True)
    return run.seconds, n_tokens, run.start_seconds, len(run.resumed)


def distinct_prompts(tokenizer, source: str | os.PathLike | None, seed: int, n: int, max_prompt_tokens: int
                     ) -> list[tuple[conv.Turns, list[int]]]:
    """(prompt turns, chat-template ids with the generation prompt) for the first ``n`` usable conversations.

    A prompt seen before is skipped: its greedy reply would be the same, so a copy in the held-out part would be a
    training sample ("continue", "hi" and some questions occur several times in ShareGPT)."""
    out, seen = [], set()
    for turns in conv.ordered(conv.read(source), seed):
        head = conv.prompt_turns(turns)
        if head is None:
            continue
        ids = tokenizer(head[-1]["content"], add_special_tokens=False)["input_ids"]
        if len(ids) > max_prompt_tokens:
            head[-1]["content"] = tokenizer.decode(ids[:max_prompt_tokens])
        chat = tuple(tokenizer.apply_chat_template(head, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"])
        if chat in seen:
            continue
        seen.add(chat)
        out.append((head, list(chat)))
        if len(out) == n:
            return out
    raise conv.ConversationError(
        f"The source has only {len(out)} conversations with a distinct user turn; ask for fewer.")


def in_seeded_order(source: str | os.PathLike | None) -> bool:
    """Whether ``source`` is a file :func:`regenerate` finished (each row carries its settings): its rows are already
    a seeded sample of their source, in an order whose first rows do not depend on how many were asked for, so a
    data directory that takes its held-out conversations first keeps the same ones at any ``n_conversations``."""
    if source is None or not Path(source).is_file():
        return False
    with Path(source).open(encoding="utf-8") as f:
        try:
            first = json.loads(f.readline() or "{}")
        except json.JSONDecodeError:
            return False
    return isinstance(first, dict) and "seed" in (first.get("settings") or {})


def _read_records(path: Path) -> list[dict]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut by an interruption: everything after it is redone
    return records


def _resume(partial: Path, settings: dict) -> dict[int, dict]:
    """Finished records of an interrupted run with the same settings (else start over)."""
    if not partial.is_file():
        return {}
    lines = _read_records(partial)
    if not lines or lines[0].get("settings") != settings:
        partial.unlink()
        return {}
    records = {r["index"]: r for r in lines[1:] if "index" in r}
    # rewrite without a line an interruption may have cut, so appending continues a valid file
    write_text(partial, "\n".join(json.dumps(x) for x in [lines[0], *records.values()]) + "\n")
    return records
