"""A doctor finding (severity, what, why, the fixing line) and its table and terminal renderings."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning" | "info"
    what: str
    why: str
    fix: str = ""
    check: str = ""


def to_frame(findings: list[Finding]) -> pd.DataFrame:
    """Findings as a table, errors first (renders in notebooks; ``.to_string()`` in terminals)."""
    df = pd.DataFrame([asdict(f) for f in findings], columns=["severity", "check", "what", "why", "fix"])
    return df.sort_values("severity", key=lambda s: s.map(SEVERITIES.index), kind="stable").reset_index(drop=True)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def format_findings(findings: list[Finding]) -> str:
    """A terminal rendering: one block per finding."""
    if not findings:
        return "no findings"
    out = []
    for f in to_frame(findings).itertuples():
        out.append(f"[{f.severity.upper()}] {f.what}\n    why: {f.why}" + (f"\n    fix: {f.fix}" if f.fix else ""))
    return "\n".join(out)
