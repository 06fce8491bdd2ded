"""What the probe's matrix concludes: the recommended backends (and the lines to set), the speed race behind them,
one cell's row, and notebook 02's settings table (settings x outcomes).

Both read the rows of :func:`eagle3kit.doctor.probe.matrix.probe`; nothing is written in advance.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.doctor.checks.attention import CONSUMES, SET_ATTN
from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.checks.facts import attention_facts
from eagle3kit.doctor.probe.matrix import MODES
from eagle3kit.draft.config import resolve_attention, with_attention


NOISE_FLOOR = 0.05  # a race closer than this share of the default's seconds is noise on a busy machine
NOISE_MULTIPLE = 2.0  # a win must beat this many times the noise: two or three repeats a cell understate the spread
WARM_UP_SHARE = 0.5  # repeats further apart than this share of their median: the first one paid a compile / warm-up


@dataclass(frozen=True)
class Race:
    """The speed race behind one recommendation: the fastest backend that ran and matched eager, the default the
    auto rule picks (:func:`eagle3kit.draft.config.resolve_attention`), and whether the one beats the other by more
    than :data:`NOISE_MULTIPLE` times the noise (the larger of the two cells' repeat spreads, at least
    :data:`NOISE_FLOOR` of the default's time)."""

    fastest: str | None
    default: str | None  # None: the default did not run and match eager
    margin: float = 0.0  # seconds the fastest saves over the default (the default fastest: over the runner-up)
    noise: float = 0.0
    runner_up: str | None = None  # the default fastest: the next backend that ran and matched eager

    @property
    def winner(self) -> str | None:
        """What to set: the fastest when it beats the default by more than :data:`NOISE_MULTIPLE` times the noise,
        else the default."""
        if self.default is None or self.fastest == self.default:
            return self.fastest
        return self.fastest if self.margin > NOISE_MULTIPLE * self.noise else self.default

    def sentence(self) -> str:
        """Why :attr:`winner`, in words, with the margin and the noise it was weighed against."""
        if self.fastest is None:
            return "no backend ran and matched eager"
        if self.runner_up is not None:
            race = (f"{self.fastest}, the default, was the fastest that ran and matched eager; the next, "
                    f"{self.runner_up}, took {self.margin:.3f} s more a step against a noise of {self.noise:.3f} s")
            return race + (f": a margin over {NOISE_MULTIPLE:g}x the noise" if self.margin > NOISE_MULTIPLE * self.noise
                           else f": within {NOISE_MULTIPLE:g}x the noise, so the two tie and the default stays")
        if self.default is None or self.fastest == self.default:
            return f"{self.fastest} was the only backend that ran and matched eager"
        race = f"{self.fastest} beat {self.default} by {self.margin:.3f} s a step against a noise of {self.noise:.3f} s"
        if self.winner == self.fastest:
            return f"{race}: a margin over {NOISE_MULTIPLE:g}x the noise"
        return (f"both train; {self.default} stays ({race}: within {NOISE_MULTIPLE:g}x the noise, no speed "
                "claim)")


def _matched(matrix: pd.DataFrame, training: bool) -> pd.DataFrame:
    """The rows (first length) that ran and matched eager; a training row without draft tokens (eagle3kit's
    block-sparse step takes no argmax) is matched by its loss."""
    mode = "forward+backward" if training else "forward"
    first_len = matrix.seq_len.iloc[0]
    rows = matrix[(matrix["mode"] == mode) & (matrix.seq_len == first_len) & (matrix.status == "ok")]
    tokens = rows.token_agreement.fillna(1.0 if training else 0.0)
    good = rows[(rows.backend == "eager") | ((rows.max_abs_dloss.fillna(1.0) < 1e-4) & (tokens >= 0.999))]
    return good[good.backend != "unset"].sort_values("seconds")


def race(matrix: pd.DataFrame, training: bool = True, device: str = "cpu") -> Race:
    """The :class:`Race` of the backends that ran and matched eager (with gradients when ``training``)."""
    good = _matched(matrix, training)
    if good.empty:
        return Race(None, None)
    fastest = good.iloc[0]
    default = resolve_attention("auto", device, training).implementation
    if default not in set(good.backend):
        return Race(str(fastest.backend), None)
    stays = good[good.backend == default].iloc[0]
    if fastest.backend == default and len(good) > 1:  # the default won: by how much over the next
        runner = good.iloc[1]
        return Race(default, default, float(runner.seconds - stays.seconds), _noise(stays, runner), str(runner.backend))
    return Race(str(fastest.backend), default, float(stays.seconds - fastest.seconds), _noise(stays, fastest))


def _noise(stays: pd.Series, other: pd.Series) -> float:
    """The larger of the two cells' repeat spreads, at least :data:`NOISE_FLOOR` of the default's seconds."""
    spreads = [float(x) for x in (other.get("spread"), stays.get("spread")) if x is not None and x == x]
    return max([*spreads, NOISE_FLOOR * float(stays.seconds)])


@dataclass(frozen=True)
class WarmUp:
    """A cell whose repeats lie further apart than :data:`WARM_UP_SHARE` of their median: one call was far slower
    than the other(s), so a median of few repeats may be that call. A flex kernel (``resolved``) compiles on its first
    call; any other cell's slow call is a warm-up or a busy machine. ``warm``: another cell of the same mode and length
    whose backend resolved to the same kernel, faster (it ran after the compile, in the same worker), with its
    seconds; None where there is none."""

    label: str  # "backend · mode"
    resolved: str
    seconds: float
    spread: float
    warm: str | None = None
    warm_seconds: float | None = None

    @property
    def compiles(self) -> bool:
        """Whether the kernel compiles on its first call (flex attention's)."""
        return "flex" in self.resolved

    def line(self) -> str:
        why = ("the first call compiles the flex kernel" if self.compiles else
               "one call was far slower than the other(s): a first call's warm-up, or a busy machine")
        said = f"{self.label}: {self.seconds:.2f} s, its repeats {self.spread:.2f} s apart: {why}"
        if self.warm is None:
            return said
        return f"{said}; the same kernel, run warm as `{self.warm}`, took {self.warm_seconds:.2f} s"


def warm_ups(matrix: pd.DataFrame) -> dict[int, WarmUp]:
    """The cells (by row index) whose first call's cost shows in their median (:class:`WarmUp`)."""
    if "spread" not in matrix or "resolved" not in matrix:
        return {}
    ran = matrix[(matrix.status == "ok") & matrix.seconds.notna() & matrix.spread.notna()]
    found = {}
    for i, r in ran[ran.spread > WARM_UP_SHARE * ran.seconds].iterrows():
        same = ran[(ran.index != i) & (ran.resolved == r.resolved) & (ran["mode"] == r["mode"])
                   & (ran.seq_len == r.seq_len) & (ran.seconds < r.seconds)]
        warm = same.sort_values("seconds").iloc[0] if len(same) else None
        found[int(i)] = WarmUp(f"{r.backend} · {r['mode']}", str(r.resolved), float(r.seconds), float(r.spread),
                               None if warm is None else str(warm.backend),
                               None if warm is None else float(warm.seconds))
    return found


def recommend(matrix: pd.DataFrame, training: bool = True, device: str = "cpu") -> str | None:
    """The backend to set (:attr:`Race.winner`); None if none ran and matched eager."""
    return race(matrix, training, device).winner


def recommendations(matrix: pd.DataFrame, device: str) -> dict[str, str | None]:
    """The measured recommendation for training and inference on ``device`` (the probe ran only there)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return {f"{kind} training": recommend(matrix, True, kind),
            f"{kind} inference": recommend(matrix, False, kind)}


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
    mode: how close the race behind :func:`recommend` is; where a median carries a first call's cost
    (:func:`warm_ups`, e.g. flex attention's compile), a last column names those modes, so the ratio is not read as
    the kernel's speed."""
    n = matrix.seq_len.iloc[0] if seq_len is None else seq_len
    ran = matrix[(matrix.status == "ok") & (matrix.seq_len == n) & (matrix.backend != "unset")]
    speed = ran.pivot(index="backend", columns="mode", values="seconds")
    ratios = (speed / speed.loc["eager"]).round(2).rename(columns=lambda m: f"{m} (x eager)")
    slow = [matrix.loc[i] for i in warm_ups(matrix) if i in ran.index]
    if slow:
        ratios[FIRST_CALL] = [", ".join(r["mode"] for r in slow if r.backend == b) for b in ratios.index]
    return ratios


FIRST_CALL = "median carries a first call (compile or warm-up) in"


def recommendation_lines(recommended: dict[str, str | None], device: str,
                         matrix: pd.DataFrame | None = None) -> list[str]:
    """:func:`recommendations` as the lines to set, and, off CUDA, the doctor's unmeasured rule for CUDA; with the
    ``matrix``, each line says why (:meth:`Race.sentence`: a speed claim only where the margin beats the noise)."""
    lines = [] if device.startswith("cuda") else [
        "skipped: no CUDA (the CUDA row is not measured on this machine; the doctor's rule for CUDA is "
        f"{SET_ATTN.format(impl='simple_flex_attention')!r})"]
    kind = "cuda" if device.startswith("cuda") else "cpu"
    for what, impl in recommended.items():
        lines.append(f"{what:15s} -> {setting_line(impl)}")
        if matrix is not None:
            lines.append(f"{'':15s}    why: {race(matrix, what.endswith('training'), kind).sentence()}")
        if kind == "cpu" and what.endswith("training") and impl not in (None, BLOCK_SPARSE):
            lines.append(f"{'':15s}    the training step over that config: TrainSession's {BLOCK_SPARSE} (its default "
                         "on a CPU: the same loss and gradients, only the blocks the mask keeps; notebook 05)")
    return lines


def setting_line(impl: str | None) -> str:
    """The line that sets ``impl``: the draft config's attention, or, for eagle3kit's block-sparse training step,
    the session's (the config keeps sdpa)."""
    if impl is None:
        return "no backend ran and matched eager"
    if impl == BLOCK_SPARSE:
        return f'TrainSession(..., attention="{BLOCK_SPARSE}")  # the default on a CPU; the config keeps sdpa'
    return SET_ATTN.format(impl=impl)
