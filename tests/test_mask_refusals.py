"""Notebook 03's pieces: bad layouts refused in one sentence, the backends' masks checked with and without a window,
and the zoom regions."""

from __future__ import annotations

from eagle3kit.masks.plots import around, corner
from eagle3kit.masks.refusals import EXAMPLES, verdicts
from eagle3kit.masks.stats import equivalence


def test_each_bad_layout_gets_its_sentence_and_a_good_one_its_mask():
    lines = dict(line.split(": ", 1) for line in verdicts())
    assert list(lines) == list(EXAMPLES)
    assert "sum to 3500 tokens" in lines["lengths past total_seq_len"]
    assert "length #1 is 0" in lines["an empty document"]
    assert "not a multiple of 128" in lines["total_seq_len 300 with 3 TTT steps"]
    assert lines["64 tokens with 1 TTT step"] == "fine, a 64 x 64 mask"
    one = {"one block, 3 TTT steps": {"lengths": [100], "total_seq_len": 128}}
    assert verdicts(one) == ["one block, 3 TTT steps: fine, a 128 x 384 mask"]


def test_equivalence_checks_every_backend_and_step_with_and_without_a_window():
    table = equivalence([100, 80, 60], 256, 2, 64)
    assert table.equal_to_flex.all() and len(table) == 2 * 2 * 2  # 2 windows x 2 backends x 2 steps
    assert sorted(table.window.astype(str).unique()) == ["64", "off"]


def test_regions_stay_inside_the_mask():
    assert around(50) == (0, 146, 0, 146) and around(500, 10) == (490, 510, 490, 510)
    assert corner(100, 400) == (0, 100, 0, 100) and corner(3072, 1024) == (0, 1024, 0, 1024)
