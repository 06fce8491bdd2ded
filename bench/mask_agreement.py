"""eagle3kit's loss mask against speculators' prepare-data mask on the same conversations, and the render route's cost.

    .venv/bin/python bench/mask_agreement.py [--sharegpt 40] [--routes] [--out bench/results/mask_agreement]

For each verifier (``tiny``: SmolLM2's tokenizer and ChatML template; ``tiny-qwen3``: Qwen3's tokenizer and thinking
template) in one run: vLLM's GPU-less render server (``vllm launch render``, from the vLLM environment) is started and
timed to ``/health``; the real ``speculators prepare-data --render-endpoint`` CLI writes a directory from the same
conversations (timed); then every conversation goes through speculators' ``build_speculator_training_dataset`` and
eagle3kit's ``conversations.rows`` and the rows are compared token for token (``eagle3kit.data.agreement``).
Conversations: the kinds of tests/test_mask_agreement.py, then the first ``--sharegpt`` usable ShareGPT V3 ones.
"before" is what eagle3kit did before issue 36 on the same rows: reasoning dropped, one render per conversation
(a conversation whose template re-renders history was refused: every token of its rows counts as differing).
``--routes`` also times the two render routes on the real SmolLM2: ``vllm launch render`` and the full engine's
``vllm serve --enable-scale-out`` (start-up, one render, prepare-data). Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_mask_agreement import CONVERSATIONS, KINDS  # noqa: E402
from vllm_served import rendered  # noqa: E402

from eagle3kit.data import agreement  # noqa: E402
from eagle3kit.data import conversations as conv  # noqa: E402
from eagle3kit.tables import markdown_table  # noqa: E402
from eagle3kit.verifier import load_tokenizer, resolve  # noqa: E402


def before(tok, turns, seq_length):
    """eagle3kit's rows before issue 36: role/content only, one render per conversation, refused if unstable."""
    plain = [{"role": t["role"], "content": t["content"]} for t in turns]
    try:
        return [conv.tokenize(tok, plain, seq_length)]
    except conv.ConversationError:
        return []


def compare(tok, conversations: dict, endpoint: str, old: bool) -> agreement.pd.DataFrame:
    rows = []
    saved = conv.rows
    if old:
        conv.rows = before  # the comparison itself stays agreement's; only eagle3kit's side is the old one
    try:
        for name, c in conversations.items():
            raw = conv.normalize(conv.turns_of(c))
            theirs = agreement.speculators_rows(tok, raw, endpoint, 4096)
            mine = raw if not old else [{"role": t["role"], "content": t["content"]} for t in raw]
            rows += [{**r, "conversation": name} for r in agreement.compare_conversation(tok, mine, theirs, 4096)]
    finally:
        conv.rows = saved
    return agreement.pd.DataFrame(rows, columns=agreement.COLUMNS)


def prepare(v, conversations: dict, url: str) -> float:
    """Seconds the real ``speculators prepare-data`` CLI takes on ``conversations`` against ``url``."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "c.jsonl"
        src.write_text("".join(json.dumps({"conversations": c}) + "\n" for c in conversations.values()))
        t0 = time.perf_counter()
        subprocess.run([str(Path(sys.executable).parent / "speculators"), "prepare-data", "--model", v.path, "--data",
                        str(src), "--output", str(Path(tmp) / "out"), "--render-endpoint", url, "--seq-length",
                        "4096", "--num-preprocessing-workers", "1"], check=True, capture_output=True)
        return time.perf_counter() - t0


def routes(conversations: dict, result: dict) -> list[str]:
    """The two render routes on SmolLM2 (the real 135M model): start-up, one render, prepare-data."""
    v, rows = resolve("smollm2"), []
    body = json.dumps({"messages": [{"role": "user", "content": "hello " * 200}], "add_generation_prompt": True})
    for serve in (False, True):
        t0 = time.perf_counter()
        with rendered(v.path, timeout=900, serve=serve) as url:
            up = time.perf_counter() - t0
            t1 = time.perf_counter()
            for _ in range(50):
                request = urllib.request.Request(f"{url}/v1/chat/completions/render", data=body.encode(),
                                                 headers={"content-type": "application/json"})
                urllib.request.urlopen(request).read()
            rows.append({"route": "vllm serve --enable-scale-out" if serve else "vllm launch render",
                         "up_s": round(up, 1), "render_ms": round((time.perf_counter() - t1) * 20, 1),
                         "prepare_data_s": round(prepare(v, conversations, url), 1)})
    result["routes"] = rows
    return ["## The render routes on `smollm2` (SmolLM2-135M-Instruct, fp32)", "",
            f"start-up to `/health`, one render of a ~200-token prompt (mean of 50), `prepare-data` on "
            f"{len(conversations)} conversations:", "", markdown_table(agreement.pd.DataFrame(rows)), ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sharegpt", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "mask_agreement"))
    ap.add_argument("--routes", action="store_true", help="also time both render routes on SmolLM2")
    args = ap.parse_args()
    sharegpt = {f"sharegpt-{i}": c for i, c in enumerate(conv.read_sharegpt()[: 3 * args.sharegpt])
                if conv.usable(conv.normalize(c))}
    sharegpt = dict(list(sharegpt.items())[: args.sharegpt])
    conversations = {**CONVERSATIONS, **sharegpt}
    kinds = {**KINDS, **dict.fromkeys(sharegpt, "ShareGPT V3")}
    result = {"load_before": os.getloadavg(), "verifiers": {}}
    md = ["# eagle3kit's loss mask vs speculators' prepare-data mask", "",
          f"`python bench/mask_agreement.py --sharegpt {args.sharegpt}`, 2-core CPU; load average at start "
          f"{os.getloadavg()[0]:.1f}.", ""]
    for name in ("tiny", "tiny-qwen3"):
        v = resolve(name)
        tok = load_tokenizer(v)
        t0 = time.perf_counter()
        with rendered(v.path) as url:
            up = time.perf_counter() - t0
            prepare_s = prepare(v, conversations, url)
            now = agreement.summary(compare(tok, conversations, url, old=False), kinds)
            then = agreement.summary(compare(tok, conversations, url, old=True), kinds)
        table = now.assign(before_ids_differ=then["ids_differ"], before_mask_differ=then["mask_differ"])
        result["verifiers"][name] = {"server_up_s": round(up, 1), "prepare_data_s": round(prepare_s, 1),
                                     "conversations": len(conversations), "table": table.to_dict("records")}
        md += [f"## `{name}` ({'SmolLM2' if name == 'tiny' else 'Qwen3'} tokenizer and chat template)", "",
               f"render server up in {up:.1f} s; `speculators prepare-data` on {len(conversations)} conversations "
               f"in {prepare_s:.1f} s", "", markdown_table(table), ""]
        print("\n".join(md[-6:]), flush=True)
    if args.routes:
        md += routes(conversations, result)
    result["load_after"] = os.getloadavg()
    Path(args.out + ".json").write_text(json.dumps(result, indent=2))
    Path(args.out + ".md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
