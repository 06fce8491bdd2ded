"""The verifier's replies written by vLLM's offline engine (``vllm.LLM``), as the rows speculators'
``regenerate-responses`` writes from a vLLM server: one row per conversation (``id``, ``primary_id``, ``input_ids`` =
prompt + completion, ``loss_mask`` 0 over the prompt and 1 over the completion, ``text``, ``metadata``), a wholly
empty reply logged to ``<outfile stem>.errors.jsonl`` instead. The prompts are rendered by vLLM's own chat path
(``LLM.enqueue_chat``, the renderer its chat endpoint uses), the sampling is the server's (the model's generation
defaults under the request's ``sampling_params``), so both routes ask the engine for the same thing.

Standalone on purpose: it runs with the vLLM environment's python, which has no eagle3kit, and imports only vllm and
the standard library::

    .venv-vllm/bin/python regenerate_worker.py spec.json

``spec.json`` holds every setting (:mod:`eagle3kit.data.regenerate_vllm` writes it; nothing is defaulted here):
``model``, ``dtype``, ``max_num_seqs``, ``max_tokens``, ``sampling_params``, ``dataset`` (JSONL of ``{"id",
"messages"}``), ``outfile``, ``ready`` and ``done`` (files touched once the engine is built and once the last row is
written). A row is appended and flushed as its request finishes; a conversation whose ``primary_id`` is already in
``outfile`` is skipped (resume), and with nothing left the engine is not built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ENDPOINT = "vllm.LLM (offline)"  # stands where a served row names its endpoint


def written(outfile: Path) -> set[str]:
    """The ``primary_id`` of every complete row in ``outfile`` (speculators' ``load_seen``)."""
    seen: set[str] = set()
    if outfile.is_file():
        for line in outfile.read_text(encoding="utf-8").splitlines():
            try:
                seen.add(str(json.loads(line)["primary_id"]))
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return seen


def row(output: Any, primary_id: str, idx: int, spec: dict[str, Any], decode) -> dict[str, Any]:
    """One finished request as speculators' boundary sample (``_sample_from_response``); ``error`` set instead when
    the reply is empty, as the served route logs it."""
    done = output.outputs[0]
    if not done.text:
        return {"id": primary_id, "metadata": {"idx": idx, "error": repr(ValueError(
            "empty assistant generation (sample 0)")), "generations_completed": 0, "endpoint": ENDPOINT}}
    prompt, completion = list(output.prompt_token_ids), list(done.token_ids)
    input_ids = prompt + completion
    usage = {"prompt_tokens": len(prompt), "total_tokens": len(input_ids), "completion_tokens": len(completion),
             "prompt_tokens_details": None, "completion_tokens_details": None}  # the served usage's keys
    return {"id": f"{primary_id}_gen0", "primary_id": primary_id, "input_ids": input_ids,
            "loss_mask": [0] * len(prompt) + [1] * len(completion), "text": decode(input_ids),
            "metadata": {"idx": idx, "finish_reason": done.finish_reason, "is_tool_call": False, "usage": usage,
                         "endpoint": ENDPOINT, "sampling_params": spec["sampling_params"]}}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: regenerate_worker.py spec.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    out = Path(spec["outfile"])
    errors = out.with_name(f"{out.stem}.errors{out.suffix or '.jsonl'}")
    rows = [json.loads(line) for line in Path(spec["dataset"]).read_text(encoding="utf-8").splitlines() if line]
    seen = written(out)
    todo = [(idx, r) for idx, r in enumerate(rows) if str(r["id"]) not in seen]
    if not todo:
        Path(spec["ready"]).touch()
        Path(spec["done"]).touch()
        return 0
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], dtype=spec["dtype"], enforce_eager=True, max_num_seqs=int(spec["max_num_seqs"]))
    Path(spec["ready"]).touch()
    params = SamplingParams.from_optional(**{**llm.model_config.get_diff_sampling_param(), **spec["sampling_params"],
                                             "max_tokens": int(spec["max_tokens"])})
    tokenizer = llm.get_tokenizer()

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    request_ids = llm.enqueue_chat([r["messages"] for _, r in todo], params, use_tqdm=False)
    # enqueue_chat returns the engine's ids ("<n>-<8 random characters>"), a finished output carries the LLM's own
    # "<n>" (a counter, as LLM.generate sorts its outputs by it)
    pending = {rid.partition("-")[0]: (idx, str(r["id"])) for rid, (idx, r) in zip(request_ids, todo, strict=True)}
    engine = llm.llm_engine
    with out.open("a", encoding="utf-8") as f, errors.open("a", encoding="utf-8") as err:
        while engine.has_unfinished_requests():  # LLM.wait_for_completion's loop, each reply written as it ends
            for output in engine.step():
                if output.finished:
                    idx, primary_id = pending.pop(output.request_id)
                    sample = row(output, primary_id, idx, spec, decode)
                    target = err if "error" in sample["metadata"] else f
                    target.write(json.dumps(sample, ensure_ascii=False) + "\n")
                    target.flush()
    Path(spec["done"]).touch()
    return 0


if __name__ == "__main__":  # the guard vLLM's spawned engine process needs
    sys.exit(main(sys.argv[1:]))
