"""A doctor finding (severity, what, why, the fixing line) and its table and terminal renderings."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass

import pandas as pd

from eagle3kit.tables import INDENT, format_table, terminal_width

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    what: str
    why: str
    fix: str = ""
    check: str = ""


def guarded(findings: list[Finding], fix: str, severity: str = "error") -> Callable[[str, Callable], None]:
    """A runner ``run(name, check)`` that adds ``check()``'s findings to ``findings``, or, when the check raises, one
    finding naming it (a broken subject gives a finding, never a crash)."""
    def run(name: str, check: Callable[[], list[Finding]]) -> None:
        try:
            findings.extend(check())
        except Exception as exc:  # noqa: BLE001
            findings.append(Finding(severity, f"{name} check could not run", f"{type(exc).__name__}: {exc}"[:300],
                                    fix, name))
    return run


def to_frame(findings: list[Finding]) -> pd.DataFrame:
    """Findings as a table, errors first (renders in notebooks; :func:`findings_table` in terminals)."""
    df = pd.DataFrame([asdict(f) for f in findings], columns=["severity", "check", "what", "why", "fix"])
    return df.sort_values("severity", key=lambda s: s.map(SEVERITIES.index), kind="stable").reset_index(drop=True)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def format_findings(findings: list[Finding], width: int | None = None) -> str:
    """A terminal rendering: one block per finding, wrapped to ``width`` characters (None: unwrapped)."""
    if not findings:
        return "no findings"
    out = []
    for f in to_frame(findings).itertuples():
        parts = [(f"[{f.severity.upper()}] ", f.what), (f"{INDENT}why: ", f.why)]
        if f.fix:
            parts.append((f"{INDENT}fix: ", f.fix))
        for head, text in parts:
            out.append(head + text if width is None else
                       textwrap.fill(text, width, initial_indent=head, subsequent_indent=INDENT * 2,
                                     break_on_hyphens=False))
    return "\n".join(out)


def findings_table(findings: list[Finding], width: int | None = None) -> str:
    """The findings as a table no wider than ``width`` (default: the terminal's), text columns wrapped; one block
    per finding when even wrapped columns do not fit."""
    if not findings:
        return "no findings"
    width = width or terminal_width()
    return format_table(to_frame(findings), width, fallback=lambda _df, w: format_findings(findings, w))
