"""A doctor finding (severity, what, why, the fixing line) and its table and terminal renderings."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

import pandas as pd

from eagle3kit.tables import INDENT, format_table, terminal_width

SEVERITIES = ("error", "warning", "info")
T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    what: str
    why: str
    fix: str = ""
    check: str = ""


class Guard:
    """The one try -> :class:`Finding` wrapper of the doctor: a broken subject gives a finding, never a crash.

    ``guard(name, check)`` adds ``check()``'s findings to ``findings``, or, when the check raises, one finding naming
    it (``fix``, ``severity``); ``guard.need(name, what, fix, make)`` returns ``make()``, or None with an error finding
    (``what``, the exception, ``fix``) when it raises: what later checks need and could not have."""

    def __init__(self, findings: list[Finding], fix: str = "", severity: str = "error"):
        self.findings, self.fix, self.severity = findings, fix, severity

    def _failed(self, name: str, what: str, exc: Exception, fix: str, severity: str, named: bool = True) -> None:
        why = f"{type(exc).__name__}: {exc}" if named else str(exc)
        self.findings.append(Finding(severity, what, why[:300], fix, name))

    def __call__(self, name: str, check: Callable[[], list[Finding]]) -> None:
        try:
            self.findings.extend(check())
        except Exception as exc:  # noqa: BLE001
            self._failed(name, f"{name} check could not run", exc, self.fix, self.severity)

    def need(self, name: str, what: str, fix: str, make: Callable[[], T], named: bool = True) -> T | None:
        """``make()``, or None with an error finding (``named``: the exception's type leads its text)."""
        try:
            return make()
        except Exception as exc:  # noqa: BLE001
            self._failed(name, what, exc, fix, "error", named)
            return None


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
