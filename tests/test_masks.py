"""The EAGLE-3 mask views against speculators, torch's own block tables, the dense backends and a counting oracle."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import flex_attention

from eagle3kit.draft.config import build_config
from eagle3kit.draft.model import build_model
from eagle3kit.masks.eagle_mask import BLOCK, EMPTY, FULL, MaskInputError, build_mask, document_ids_from_lengths
from eagle3kit.masks.stats import blockmask_bytes, check_equivalence, dense_masks, stats

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def layouts(draw):
    """Random packed layouts: lengths not multiples of 128, some shorter than a block, padding, windows."""
    lengths = draw(st.lists(st.integers(1, 300), min_size=0, max_size=5))
    padding = draw(st.integers(0, 200))
    ttt_steps = draw(st.integers(1, 3))
    window = draw(st.one_of(st.none(), st.integers(1, 200)))
    used = max(1, sum(lengths) + padding)
    total = used if ttt_steps == 1 else -(-used // BLOCK) * BLOCK  # ragged lengths are legal without extension
    return lengths, total, ttt_steps, window


def built():
    """A random layout and its mask: ``(lengths, total, ttt_steps, window, mask)``."""
    return layouts().map(lambda layout: (*layout, build_mask(*layout)))


def expected_attended(lengths, total, window):
    """Counting oracle for step 0: causal (windowed) pairs inside each document, plus each padding token's diagonal."""
    pairs = sum(min(i + 1, window or i + 1) for n in lengths for i in range(n))
    return pairs + total - sum(lengths)


@SETTINGS
@given(built())
def test_three_views_agree_with_dense_backends(case):
    *_layout, ttt_steps, _window, mask = case
    table = check_equivalence(mask)
    assert len(table) == 2 * ttt_steps
    assert table["equal_to_flex"].all(), table


@SETTINGS
@given(built())
def test_block_classes_match_the_token_view(case):
    _lengths, total, ttt_steps, _window, mask = case
    for step in range(ttt_steps):
        classes = mask.block_classes(step)
        bm = mask.block_masks[step]
        assert torch.equal(classes != EMPTY, bm.to_dense()[0, 0].bool())  # torch's own decoding of the tables
        q = torch.arange(total)
        kv = torch.arange(mask.kv_len(step))
        truth = mask.evaluate(q[:, None], kv[None, :], step)  # the mask_mod everywhere, no block tables
        assert torch.equal(mask.token_view(step), truth)
        padded = F.pad(truth, (0, -truth.shape[1] % BLOCK, 0, -truth.shape[0] % BLOCK))
        per_block = padded.view(classes.shape[0], BLOCK, classes.shape[1], BLOCK).sum((1, 3))
        assert (per_block[classes == EMPTY] == 0).all()
        if total % BLOCK == 0:
            assert (per_block[classes == FULL] == BLOCK * BLOCK).all()
        if step:
            assert torch.equal(classes[:, : mask.block_classes(step - 1).shape[1]], mask.block_classes(step - 1))


@SETTINGS
@given(built())
def test_stats_are_consistent(case):
    lengths, total, _ttt_steps, window, mask = case
    table = stats(mask)
    base = expected_attended(lengths, total, window)
    for row in table.itertuples():
        assert row.attended_pairs == base + row.step * total  # each extension adds exactly the diagonal
        assert row.attended_pairs == int(mask.token_view(row.step).sum())
        assert row.sparsity == pytest.approx(1 - row.attended_pairs / (total * row.kv_len))
        q_blocks, kv_blocks = -(-total // BLOCK), -(-row.kv_len // BLOCK)
        assert row.full_blocks + row.partial_blocks + row.empty_blocks == q_blocks * kv_blocks
        assert row.dense_bool_bytes == total * row.kv_len and row.dense_float_bytes == 2 * row.dense_bool_bytes
        assert row.blockmask_bytes == blockmask_bytes(mask.block_masks[row.step]) > 0


@pytest.mark.parametrize("tile", [256, 512])
def test_a_ragged_last_tile_holds_only_this_steps_columns(tile):
    """Step 0 of a two-step mask ends mid-tile; the tile must not count the next step's diagonal (a found bug)."""
    mask = build_mask([100, 200], 384, ttt_steps=2)
    counts, area, (q0, q1, k0, k1) = mask.tile_counts(0, None, tile)
    assert (k1, int(area.sum())) == (384, 384 * 384)
    assert int(counts.sum()) == int(mask.token_view(0).sum()) == expected_attended([100, 200], 384, None)


@SETTINGS
@given(built(), st.sampled_from([1, 2, 8, 32, 64, 128, 256]), st.data())
def test_tile_counts_equal_pooled_token_view(case, tile, data):
    _lengths, total, ttt_steps, _window, mask = case
    step = data.draw(st.integers(0, ttt_steps - 1))
    kv_len = mask.kv_len(step)
    q0 = data.draw(st.integers(0, total - 1))
    k0 = data.draw(st.integers(0, kv_len - 1))
    region = (q0, data.draw(st.integers(q0 + 1, total)), k0, data.draw(st.integers(k0 + 1, kv_len)))
    counts, area, (a, b, c, d) = mask.tile_counts(step, region, tile)
    assert a <= region[0] and b >= region[1] and c <= region[2] and d >= region[3]
    view = mask.token_view(step, (a, b, c, d))
    padded = F.pad(view, (0, -view.shape[1] % tile, 0, -view.shape[0] % tile)).long()
    pooled = padded.view(padded.shape[0] // tile, tile, padded.shape[1] // tile, tile).sum((1, 3))
    assert torch.equal(counts.long(), pooled)
    assert int(area.sum()) == (b - a) * (d - c)


def test_flex_sdpa_and_eager_attention_outputs_agree():
    """Not only the masks: the three kernels, fed speculators' masks, give the same attention output."""
    torch.manual_seed(0)
    mask = build_mask([100, 60, 50], 256, ttt_steps=3)
    bools, floats = list(dense_masks(mask, "bool")), list(dense_masks(mask, "float"))
    for step in range(3):
        q = torch.randn(1, 2, 256, 16)
        k, v = torch.randn(2, 1, 2, mask.kv_len(step), 16)
        with torch.no_grad():
            flex = flex_attention(q, k, v, block_mask=mask.block_masks[step])
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bools[step])
        eager = torch.softmax(q @ k.transpose(-1, -2) / 4 + floats[step].float(), -1) @ v
        torch.testing.assert_close(flex, sdpa, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attn", ["simple_flex_attention", "sdpa", "eager"])
def test_same_mask_as_the_real_draft_model(tiny_verifier, attn):
    """Capture the mask speculators' Eagle3DraftModel hands its decoder layer at each TTT step."""
    build = build_config(verifier="tiny", attn_implementation=attn, device="cpu", ttt_steps=3)
    model = build_model(build).eval()
    seen = []
    model.layers[0].register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["attention_mask"]), with_kwargs=True)
    lengths, total = [90, 130, 20], 256
    doc_ids = document_ids_from_lengths(lengths, total)[None]
    hidden = model.fc.in_features
    with torch.no_grad():
        model(hidden_states=torch.randn(1, total, hidden), input_ids=torch.randint(0, 100, (1, total)),
              document_ids=doc_ids, ttt_steps=3)
    window = model.sliding_window if 0 in getattr(model, "sliding_window_indices", ()) else None
    mask = build_mask(lengths, total, 3, window)
    assert len(seen) == 3
    for step, got in enumerate(seen):
        if attn == "simple_flex_attention":
            assert torch.equal(got.kv_num_blocks, mask.block_masks[step].kv_num_blocks)
            assert torch.equal(got.kv_indices, mask.block_masks[step].kv_indices)
            continue
        attends = got[0, 0] if got.dtype == torch.bool else got[0, 0] == 0
        assert torch.equal(attends, mask.token_view(step))


@pytest.mark.slow
def test_compiled_path_builds_the_same_block_tables():
    eager, compiled = (build_mask([300, 77, 500], 1024, 3, compile=c) for c in (False, True))
    assert compiled.compiled and not eager.compiled
    for a, b in zip(eager.block_masks, compiled.block_masks, strict=True):
        for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    for tile in (32, 1):  # the fused (compiled) tile counter against the plain one
        assert torch.equal(compiled.tile_counts(-1, None, tile)[0], eager.tile_counts(-1, None, tile)[0])


def test_short_and_ragged_sequences_give_correct_masks_without_extension():
    mask = build_mask([40, 30], 100, ttt_steps=1)
    assert mask.token_view().shape == (100, 100)
    assert check_equivalence(mask)["equal_to_flex"].all()
    assert build_mask([5], ttt_steps=2).total_seq_len == BLOCK  # total defaults to the next multiple of 128


def test_document_ids_tensor_input():
    ids = document_ids_from_lengths([50, 100], 256)
    assert ids.tolist()[:3] == [0, 0, 0] and ids[-1] == -1 and int((ids == 1).sum()) == 100
    a, b = build_mask([50, 100], 256, 2), build_mask(document_ids=ids[None], ttt_steps=2)
    assert torch.equal(a.token_view(), b.token_view())
    assert [s for s in b.segments()] == [(0, 0, 50), (1, 50, 150), (-1, 150, 256)]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"lengths": [200, 100], "total_seq_len": 256}, "sum to 300 tokens but total_seq_len is 256"),
    ({"lengths": [100, 0], "total_seq_len": 256}, "length #1 is 0"),
    ({"lengths": [100, -4], "total_seq_len": 256}, "length #1 is -4"),
    ({"lengths": [100], "total_seq_len": 300}, "multiple of 128 such as 384"),
    ({"lengths": [50], "total_seq_len": 64}, "fails at TTT step 1"),
    ({"lengths": [50], "total_seq_len": 256, "ttt_steps": 0}, "ttt_steps=0: use an integer >= 1"),
    ({"lengths": [50], "total_seq_len": 256, "sliding_window": 0}, "sliding_window must be a positive integer"),
    ({"document_ids": torch.tensor([0, 0, -2])}, "ids >= 0, -1 for padding"),
    ({}, "Pass either document lengths or a document_ids tensor"),
])
def test_bad_input_is_one_clear_sentence(kwargs, fragment):
    with pytest.raises(MaskInputError, match=fragment) as info:
        build_mask(**kwargs)
    message = str(info.value)
    assert message.endswith(".") and "\n" not in message and message.count(". ") == 0  # one sentence


def test_views_refuse_what_they_cannot_hold():
    mask = build_mask([100], 256, 3)
    with pytest.raises(MaskInputError, match="step must be in 0..2"):
        mask.block_classes(3)
    with pytest.raises(MaskInputError, match="is empty"):
        mask.token_view(0, (10, 10, 0, 5))
    with pytest.raises(MaskInputError, match="power of two"):
        mask.tile_counts(0, None, 3)
    big = build_mask([4700], 4736, 3, compile=False)
    with pytest.raises(MaskInputError, match="too large to hold densely"):
        big.token_view()
    with pytest.raises(MaskInputError, match="dense masks of this layout"):
        check_equivalence(big)
    assert big.fractions(2, None, 64).shape == (74, 222)
