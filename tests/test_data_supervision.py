"""`doctor --data` checks what is supervised: each failure built for real on a tiny data directory (made by
build_dataset, then broken the way the reported bug breaks it), and silence on healthy directories."""

from __future__ import annotations

import json
import shutil

import pytest
from datasets import load_from_disk

from eagle3kit.data import conversations as conv
from eagle3kit.data import vocab
from eagle3kit.data.breakages import aux_one_layer_late, d2t_all_zero, last_state_normed
from eagle3kit.data.dataset import _write_arrow, build_dataset, training_rows
from eagle3kit.data.directory import MANIFEST, DataDir
from eagle3kit.data.loader import held_out_coverage
from eagle3kit.doctor.checks.run import check_data_dir
from eagle3kit.verifier import load_tokenizer

VOCAB = 8
SETTINGS = dict(n_conversations=4, seq_length=160, held_out=0, draft_vocab_size=VOCAB, progress=False, batch_size=4)
THINK = "<think>\n\n</think>\n\n"


def _conversations() -> list[list[dict]]:
    out = []
    for i in range(4):
        turns = [{"role": "system", "content": f"You are assistant number {i}; answer briefly."}] if i % 2 else []
        for j in range(3):
            turns += [{"role": "user", "content": f"What is {i} plus {j}?"},
                      {"role": "assistant", "content": f"{i} plus {j} is {i + j}."}]
        out.append(turns)
    return out


@pytest.fixture(scope="module")
def healthy(tmp_path_factory, tiny_verifier):
    """Multi-turn conversations (half with a system prompt) through the tiny verifier, as `eagle3kit data` makes."""
    root = tmp_path_factory.mktemp("supervision")
    conv.write_jsonl(root / "c.jsonl", _conversations())
    build_dataset(tiny_verifier, root / "data", source=root / "c.jsonl", **SETTINGS)
    return root / "data"


@pytest.fixture
def copy(healthy, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(healthy, out)
    return out


def rewrite(out, rows: list[tuple[list[int], list[int]]], tiny_verifier) -> None:
    """Store new rows the way a buggy pipeline would: Arrow rows, its token counts and mapping, its hidden states."""
    _write_arrow(out, [conv.Tokenized(ids, mask) for ids, mask in rows])
    vocab.save_token_freq(load_from_disk(str(out)), out)
    build_dataset(tiny_verifier, out, source=DataDir(out).request.source, **SETTINGS)  # remakes files and mapping


def rows_of(out) -> list[tuple[list[int], list[int]]]:
    ds = load_from_disk(str(out)).with_format(None)
    return list(zip(ds["input_ids"], ds["loss_mask"], strict=True))


def named(findings, check: str, severity: str, words: str) -> bool:
    return any(f.check == check and f.severity == severity and words in f.what for f in findings)


def loud(findings) -> list:
    return [f for f in findings if f.severity != "info"]


def test_healthy_directories_give_no_error_and_no_warning(healthy, tiny_data):
    for data in (healthy, tiny_data):
        found = check_data_dir(data, "tiny")
        assert not loud(found), found
        assert {f.check for f in found} == {"data_dir", "loss_mask", "aux_layers", "vocab"}
        assert named(found, "loss_mask", "info", "equals")
        assert named(found, "aux_layers", "info", "claimed layers")


@pytest.mark.catalogue("loss-mask-not-shifted")
def test_a_loss_mask_shifted_by_one_is_named(copy, tiny_verifier):
    rewrite(copy, [(ids, [0, *mask[:-1]]) for ids, mask in rows_of(copy)], tiny_verifier)
    assert named(check_data_dir(copy, "tiny"), "loss_mask", "error", "shifted by one")


@pytest.mark.catalogue("mask-wrong-span")
def test_a_mask_over_system_and_user_turns_is_named(copy, tiny_verifier):
    rewrite(copy, [(ids, [1] * len(ids)) for ids, _ in rows_of(copy)], tiny_verifier)
    found = check_data_dir(copy, "tiny")
    assert named(found, "loss_mask", "error", "outside the assistant replies")


@pytest.mark.catalogue("eos-masked-as-pad")
def test_end_of_turn_tokens_masked_as_padding_are_named(copy, tiny_verifier):
    eos = load_tokenizer(tiny_verifier).eos_token_id  # SmolLM2's pad token is its EOS, <|im_end|>
    rewrite(copy, [(ids, [m * (t != eos) for t, m in zip(ids, mask, strict=True)]) for ids, mask in rows_of(copy)],
            tiny_verifier)
    found = check_data_dir(copy, "tiny")
    assert named(found, "loss_mask", "error", "end-of-turn (EOS) tokens")


@pytest.mark.catalogue("loss-on-padding")
def test_loss_on_a_padded_tail_is_named(copy, tiny_verifier):
    pad = load_tokenizer(tiny_verifier).pad_token_id
    rewrite(copy, [(ids + [pad] * 8, mask + [1] * 8) for ids, mask in rows_of(copy)], tiny_verifier)
    assert named(check_data_dir(copy, "tiny"), "loss_mask", "error", "loss on padding")
    (copy / MANIFEST).unlink()  # a directory made elsewhere: the padded tail is still found
    assert named(check_data_dir(copy, "tiny"), "loss_mask", "error", "loss on padding")


@pytest.mark.catalogue("empty-rows-after-truncation")
def test_rows_with_nothing_supervised_are_named(copy, tiny_verifier):
    rows = rows_of(copy)
    rows[1] = (rows[1][0], [0] * len(rows[1][0]))  # every reply of row 1 cut off
    rewrite(copy, rows, tiny_verifier)
    found = check_data_dir(copy, "tiny")
    assert named(found, "loss_mask", "warning", "1 of 4 rows supervise no token") and not named(
        found, "loss_mask", "error", "")


@pytest.mark.catalogue("template-mismatch")
def test_rows_rendered_with_another_chat_template_are_named(copy, tiny_verifier):
    tokenizer = load_tokenizer(tiny_verifier)
    head = "message['role'] + '\n' + message['content']"  # the template's '\n' is a real newline
    assert head in tokenizer.chat_template
    tokenizer.chat_template = tokenizer.chat_template.replace(  # a thinking template: an empty think block per reply
        head, f"message['role'] + '\n' + ({json.dumps(THINK)} if message['role'] == 'assistant' else '') "
              "+ message['content']")
    _held, stream = training_rows(tokenizer, DataDir(copy).request)
    rows = [(t.input_ids, t.loss_mask) for _, t in stream]
    assert tokenizer.encode(THINK, add_special_tokens=False)[0] in rows[0][0]
    rewrite(copy, rows, tiny_verifier)
    assert named(check_data_dir(copy, "tiny"), "template", "error", "not the verifier's chat template")


@pytest.mark.catalogue("aux-ids-off-by-one")
def test_aux_slices_one_layer_off_are_named_with_the_layer_they_are(copy, tiny_verifier):
    aux = DataDir(copy).aux_layer_ids
    aux_one_layer_late(copy)  # the aux capture one layer late (the output of layer i)
    found = check_data_dir(copy, "tiny")
    assert named(found, "aux_layers", "error", f"aux slices are layers {[i + 1 for i in aux]}, the data claims {aux}")


@pytest.mark.slow
@pytest.mark.catalogue("last-state-normed")
def test_a_normed_last_state_is_named(smollm2, tmp_path):
    """On SmolLM2: the tiny verifier's final norm has unit weights, so norming twice changes nothing there."""
    build_dataset(smollm2, tmp_path / "data", n_conversations=2, seq_length=64, held_out=0, progress=False)
    last_state_normed(tmp_path / "data")  # transformers' hidden_states[-1]: already normed
    found = check_data_dir(tmp_path / "data", "smollm2")
    assert named(found, "data_dir", "error", "does not give the verifier's logits")
    assert not named(found, "aux_layers", "error", "")


@pytest.mark.catalogue("vocab-mapping-stale")
def test_a_mapping_and_token_counts_from_other_data_are_named(copy, tiny_data, tiny_verifier):
    shutil.copy(DataDir(tiny_data).token_freq_path, DataDir(copy).token_freq_path)  # another run's cached counts ...
    vocab.build_mapping(copy, VOCAB, tiny_verifier.text_config.vocab_size)  # ... and the mapping made from them
    found = check_data_dir(copy, "tiny")
    assert named(found, "vocab", "error", "token_freq.pt does not count")
    assert named(found, "vocab", "error", f"t2d-{VOCAB}.npy is not this data's mapping")


@pytest.mark.catalogue("vocab-fewer-tokens")
def test_fewer_distinct_tokens_than_the_draft_vocab_is_named(copy, tiny_verifier):
    distinct = len(vocab.load_token_freq(copy))
    build_dataset(tiny_verifier, copy, source=DataDir(copy).request.source,  # the same data, a larger draft vocab
                  **{**SETTINGS, "draft_vocab_size": distinct + 100})
    found = check_data_dir(copy, "tiny")
    assert named(found, "vocab", "warning", f"draft vocab {distinct + 100} > the {distinct} distinct")
    assert not named(found, "vocab", "error", "")


def test_a_directory_without_manifest_is_checked_against_the_template_markers(copy):
    (copy / MANIFEST).unlink()  # as speculators' own pipeline leaves it
    found = check_data_dir(copy, "tiny")
    assert not loud(found), found
    assert named(found, "loss_mask", "info", "agrees with tiny's chat template")
    assert any("no eagle3kit manifest" in f.why for f in found)
    assert named(found, "aux_layers", "info", "the directory does not say which")
    assert named(check_data_dir(copy), "data_dir", "error", "cannot be checked")  # no verifier: named, not guessed


@pytest.mark.slow
def test_smollm2_data_as_the_demo_makes_it_is_healthy(smollm2, tmp_path):
    build_dataset(smollm2, tmp_path / "data", n_conversations=3, seq_length=256, held_out=1, draft_vocab_size=64,
                  progress=False)
    found = check_data_dir(tmp_path / "data", "smollm2")
    assert not loud(found), found
    assert named(found, "aux_layers", "info", "claimed layers")


def test_an_all_zero_d2t_is_named(copy):
    d2t_all_zero(copy)  # SafeAILab/EAGLE issue 222: draft id i decodes as verifier id i
    assert named(check_data_dir(copy, "tiny"), "vocab", "error", f"d2t-{VOCAB}.npy does not map")


def test_held_out_coverage_counts_the_replies_the_vocab_was_not_counted_on(tiny_data, tmp_path):
    """The draft vocab is counted on the training replies; on the held-out replies it covers less (the demo's 2048
    tokens: 0.75), the full vocab covers all, and a folder without held-out conversations has no such number."""
    from conftest import TINY_DATA_VOCAB

    tok = load_tokenizer("tiny")
    held = held_out_coverage(tiny_data, tok, TINY_DATA_VOCAB)
    t2d = vocab.load_mapping(tiny_data, TINY_DATA_VOCAB, len(tok))[0]
    ids = [i for turns in conv.read_jsonl(DataDir(tiny_data).path / DataDir.HELD_OUT) for t in turns
           if t["role"] == "assistant" for i in tok(t["content"], add_special_tokens=False)["input_ids"]]
    assert held == sum(bool(t2d[i]) for i in ids) / len(ids) and 0 < held < 1
    assert held_out_coverage(tiny_data, tok, None) == 1.0
    bare = shutil.copytree(tiny_data, tmp_path / "no-held-out")
    (bare / DataDir.HELD_OUT).unlink()
    assert held_out_coverage(bare, tok, TINY_DATA_VOCAB) is None
