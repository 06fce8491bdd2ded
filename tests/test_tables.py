"""Terminal tables: text columns wrap so no line is wider than the terminal; blocks when columns cannot fit."""

from __future__ import annotations

import copy
from collections import Counter

import pandas as pd
import pytest

from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.findings import Finding, findings_table, format_findings, to_frame
from eagle3kit.draft.config import build_config
from eagle3kit.runner import NotebookResult, _write_summary
from eagle3kit.tables import (column_blocks, column_widths, format_records, format_sections, format_table,
                              markdown_table)

LONG = ("speculators extends the BlockMask by whole blocks of 128 tokens, so the second TTT step fails with "
        "'block_mask was created for a larger length' when total_seq_len is not a multiple of 128")


def words(text: str) -> Counter:
    return Counter(text.split())


def assert_fits(text: str, width: int) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, f"{len(too_long)} lines wider than {width}: {too_long[0]!r}"


@pytest.fixture(scope="module")
def findings() -> list[Finding]:
    """Real doctor findings (tiny verifier): an unset attention implementation, a bad length, the fused loss."""
    build = build_config(verifier="tiny", device="cpu")
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = None
    found = check(config, device="cpu", training=True, loss=None, seq_len=300)
    assert {f.severity for f in found} >= {"error", "warning"}
    return found


@pytest.mark.parametrize("width", [80, 120])
def test_findings_fit_the_terminal_with_every_word(findings, width):
    text = findings_table(findings, width)
    assert_fits(text, width)
    expected = words(" ".join(f"{f.what} {f.why} {f.fix}" for f in findings))
    assert not expected - words(text), f"missing words: {expected - words(text)}"


@pytest.mark.parametrize("width", [80, 120])
def test_findings_blocks_wrap_to_the_width(findings, width):
    text = format_findings(findings, width)
    assert_fits(text, width)
    assert text.count("[ERROR]") == sum(f.severity == "error" for f in findings)
    assert words(" ".join(f"{f.what} {f.why} {f.fix}" for f in findings)) <= words(text)
    assert format_findings(findings) == format_findings(findings, None)  # None: one line per part, unwrapped
    assert max(map(len, format_findings(findings).splitlines())) > width


@pytest.mark.parametrize("width", [80, 120])
def test_text_columns_wrap_and_numbers_keep_their_width(width):
    df = pd.DataFrame({"check": ["seq_len", "loss"], "why": [LONG, "ok"], "tokens": [384, 1024]})
    text = format_table(df, width)
    assert_fits(text, width)
    lines = text.splitlines()
    assert lines[0].split() == ["check", "why", "tokens"] and set(lines[1]) == {"-", " "}
    assert len(lines) > 4  # the long text wrapped over several lines
    assert words(text) == words(" ".join(["check why tokens", *df.astype(str).to_numpy().ravel()])) + words(
        " ".join("-" * w for w in column_widths(df, width)))
    assert lines[2].rstrip().endswith("384")  # numbers right-aligned in their column


def test_a_narrow_table_is_left_as_it_is():
    df = pd.DataFrame({"a": ["x", "yy"], "b": [1.5, float("nan")]})
    assert column_widths(df, 80) == [2, 3]
    assert format_table(df, 80).splitlines() == ["a     b", "--  ---", "x   1.5", "yy"]


def test_columns_that_cannot_fit_fall_back_to_blocks():
    df = to_frame([Finding("error", "w " * 30, "y " * 30, "a_command_line_that_should_not_be_broken_up(x=1)", "c")])
    assert column_widths(df, 40) is None
    text = format_table(df, 40)
    assert text == format_records(df, 40) and text.startswith("error\n    check: c")
    assert_fits(text, 40)
    assert findings_table([Finding("error", "w", "y", "z" * 60)], 40).startswith("[ERROR] w")


def test_wide_numeric_tables_fall_back_to_column_blocks():
    """A training history with many per-TTT-step columns: whole columns per block, every number kept."""
    df = pd.DataFrame({"step": [1, 2], "loss": [3.2, 2.9],
                       **{f"full_acc_{k}": [0.1 * k, 0.2 * k] for k in range(8)}, "tokens_per_s": [512.5, 530.1]})
    assert column_widths(df, 80) is None
    text = format_table(df, 80, fallback=column_blocks)
    assert_fits(text, 80)
    assert text == column_blocks(df, 80) and text.count("step") == 1 and "full_acc_7" in text and "530.1" in text
    assert format_table(df, 400, fallback=column_blocks) == format_table(df, 400)  # fits: the fallback is unused


def test_markdown_table_escapes_pipes_and_right_aligns_numbers():
    df = pd.DataFrame({"notebook": ["01_a", "02_b"], "seconds": [1.5, 20.0], "error": ["", "x | y\nz"]})
    assert markdown_table(df).splitlines() == ["| notebook | seconds | error |", "| --- | ---: | --- |",
                                               "| 01_a | 1.5 |  |", "| 02_b | 20 | x \\| y<br>z |"]


def test_run_summary_is_a_markdown_table(tmp_path):
    results = [NotebookResult("01_build_draft_config", "ok", 12.34, summary={"tau": 1.4}),
               NotebookResult("02_debug_attention", "failed", 3.0, failing_cell=7, error="RuntimeError: boom")]
    _write_summary(tmp_path, "ci", results)
    lines = (tmp_path / "summary.md").read_text().splitlines()
    assert lines[0] == "# eagle3kit run (ci)" and "```" not in lines
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + len(results) and all(line.count(" | ") == table[0].count(" | ") for line in table)
    assert "| 02_debug_attention | failed | 3 | 7 | RuntimeError: boom |" in table[3]


@pytest.mark.parametrize("width", [60, 80])
def test_sections_head_their_rows_once_and_columns_align_across_them(width):
    df = pd.DataFrame([("disk", "per token", "32 kB", "derived"), ("disk", LONG, "3.36 TB", "derived"),
                       ("time", "training", "1.7 h", "assumed")], columns=["section", "item", "value", "kind"])
    text = format_sections(df, width=width)
    assert_fits(text, width)
    assert words(" ".join(df.drop(columns="section").to_numpy().ravel())) <= words(text)
    lines = text.splitlines()
    assert [line for line in lines if line and not line.startswith(" ")] == ["disk", "time"]  # each heading once
    assert "" not in lines[lines.index("disk"):lines.index("time") - 1]  # no blank line between a section's rows
    wrapped = lines[lines.index("disk") + 3]  # the long item's second line: a hanging indent under its first
    assert wrapped.startswith("    ") and not wrapped.startswith("     ")
    value_at = {line.index(v) for line in lines for v in ("32 kB", "3.36 TB", "1.7 h") if v in line}
    assert len(value_at) == 1  # one value column across both sections
    assert format_sections(df, width=20) == format_records(df, 20)  # cannot fit: one block per row
