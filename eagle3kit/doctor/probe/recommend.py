"""What the probe's matrix concludes: the recommended backends (and the lines to set), the speed race behind them,
one cell's row, and notebook 02's settings table (settings x outcomes).

Both read the rows of :func:`eagle3kit.doctor.probe.matrix.probe`; nothing is written in advance.
"""

from __future__ import annotations

import pandas as pd

from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.doctor.checks.attention import CONSUMES, SET_ATTN
from eagle3kit.doctor.checks.facts import attention_facts
from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.probe.matrix import MODES
from eagle3kit.draft.config import with_attention


def recommend(matrix: pd.DataFrame, training: bool = True) -> str | None:
    """The fastest backend whose cells (with gradients when ``training``) ran and matched eager; None if none did.
    A training row without draft tokens (eagle3kit's block-sparse step takes no argmax) is matched by its loss."""
    mode = "forward+backward" if training else "forward"
    first_len = matrix.seq_len.iloc[0]
    rows = matrix[(matrix["mode"] == mode) & (matrix.seq_len == first_len) & (matrix.status == "ok")]
    tokens = rows.token_agreement.fillna(1.0 if training else 0.0) if training else rows.token_agreement.fillna(0.0)
    good = rows[(rows.backend == "eager") | ((rows.max_abs_dloss.fillna(1.0) < 1e-4) & (tokens >= 0.999))]
    good = good[good.backend != "unset"]
    return None if good.empty else str(good.sort_values("seconds").iloc[0].backend)


def recommendations(matrix: pd.DataFrame, device: str) -> dict[str, str | None]:
    """The measured recommendation for training and inference on ``device`` (the probe ran only there)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return {f"{kind} training": recommend(matrix, training=True),
            f"{kind} inference": recommend(matrix, training=False)}


def probe_row(matrix: pd.DataFrame, backend: str, mode: str, seq_len: int | None = None) -> pd.Series | None:
    """The probe matrix's row for ``backend`` / ``mode`` at ``seq_len`` (default: the matrix's first length)."""
    n = matrix.seq_len.iloc[0] if seq_len is None else seq_len
    rows = matrix[(matrix.backend == backend) & (matrix["mode"] == mode) & (matrix.seq_len == n)]
    return rows.iloc[0] if len(rows) else None


def settings_table(configs: dict[str, object], matrix: pd.DataFrame, device: str = "cpu", seq_len: int | None = None,
          backend_of: dict[str, str] | None = None) -> pd.DataFrame:
    """Per attention setting: what speculators resolves it to, the mask it builds, the probe's outcome, the doctor's.

    ``configs`` maps a label to a draft config; ``backend_of`` maps a label to its probe backend (default: the label).
    """
    rows = []
    for label, config in configs.items():
        facts = attention_facts(config)
        findings = check(config, device=device, training=True, loss="eager", seq_len=seq_len)
        backend = (backend_of or {}).get(label, label)
        row = {"setting": label, "resolves to": facts["resolved"], "mask built": facts["mask"],
               "backend consumes": ", ".join(sorted(CONSUMES.get(facts["backend"], {"?"})))}
        for mode in MODES:
            cell = matrix[(matrix.backend == backend) & (matrix["mode"] == mode)]
            if seq_len is not None:
                cell = cell[cell.seq_len == seq_len]
            row[mode] = "not probed" if cell.empty else (
                "ok" if cell.iloc[0].status == "ok" else f"{cell.iloc[0].status}: {cell.iloc[0].error}")
        errors = [f.what for f in findings if f.severity == "error"]
        row["doctor"] = "; ".join(errors) if errors else "no errors"
        rows.append(row)
    return pd.DataFrame(rows)


SETTINGS = {"unset": None, "sdpa": "sdpa", "flex_attention": "flex_attention",
            "simple_flex_attention": "simple_flex_attention"}  # notebook 02's settings table: label -> value set


def setting_configs(config) -> dict[str, object]:
    """``config`` with each of :data:`SETTINGS` set before building: the ``configs`` of :func:`settings_table`."""
    return {label: with_attention(config, impl) for label, impl in SETTINGS.items()}


def speed_ratios(matrix: pd.DataFrame, seq_len: int | None = None) -> pd.DataFrame:
    """Median seconds of each backend that ran (at ``seq_len``, default the matrix's first), relative to eager, per
    mode: how close the race behind :func:`recommend` is."""
    n = matrix.seq_len.iloc[0] if seq_len is None else seq_len
    ran = matrix[(matrix.status == "ok") & (matrix.seq_len == n) & (matrix.backend != "unset")]
    speed = ran.pivot(index="backend", columns="mode", values="seconds")
    return (speed / speed.loc["eager"]).round(2).rename(columns=lambda m: f"{m} (x eager)")


def recommendation_lines(recommended: dict[str, str | None], device: str) -> list[str]:
    """:func:`recommendations` as the lines to set, and, off CUDA, the doctor's unmeasured rule for CUDA."""
    lines = [] if device.startswith("cuda") else [
        "skipped: no CUDA (the CUDA row is not measured on this machine; the doctor's rule for CUDA is "
        f"{SET_ATTN.format(impl='simple_flex_attention')!r})"]
    return lines + [f"{what:15s} -> {setting_line(impl)}" for what, impl in recommended.items()]


def setting_line(impl: str | None) -> str:
    """The line that sets ``impl``: the draft config's attention, or, for eagle3kit's block-sparse training step,
    the session's (the config keeps sdpa)."""
    if impl is None:
        return "no backend ran and matched eager"
    if impl == BLOCK_SPARSE:
        return f'TrainSession(..., attention="{BLOCK_SPARSE}")  # the default on a CPU; the config keeps sdpa'
    return SET_ATTN.format(impl=impl)
