"""τ against context length: per bucket of the ``long-context`` set (:mod:`eagle3kit.evaluate.long_context`), the
mean over its prompts with a bootstrap interval (:mod:`eagle3kit.evaluate.scores`); the curve, marked with the
length the draft was trained on and its sliding window; and whether τ falls past the training length."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from eagle3kit.evaluate.conventions import TAU_LABEL
from eagle3kit.evaluate.long_context import PER_BUCKET as FULL_CURVE_PROMPTS
from eagle3kit.evaluate.scores import PromptScore, summarise

FALL_SHARE = 0.75  # past the training length the draft keeps less than this share of its accepted tokens a round
MIN_DROP = 0.05  # ... and τ drops by at least this much: a fall, not noise


def bucket_length(category: str) -> int:
    """``"2k"`` -> 2048, ``"256"`` -> 256 (:func:`eagle3kit.evaluate.long_context.label` read back)."""
    return int(category[:-1]) * 1024 if category.endswith("k") else int(category)


def curve_table(records: list[PromptScore]) -> pd.DataFrame:
    """One row per bucket, shortest first: its length in tokens, prompts, τ, the 95 % interval, pooled τ."""
    table = summarise(records)
    table = table.drop(index="overall", errors="ignore")
    table.insert(0, "tokens", [bucket_length(c) for c in table.index])
    return table.sort_values("tokens")


def plot_context_curve(table: pd.DataFrame, trained_length: int | None = None, sliding_window: int | None = None,
                       title: str = "τ against context length") -> Figure:
    """τ per context length with its 95 % interval; vertical lines at the length the draft was trained on and at its
    sliding window (when known)."""
    fig = Figure(figsize=(6.5, 3.4), layout="constrained")
    ax = fig.subplots()
    x, tau = table["tokens"].to_numpy(), table["tau"].to_numpy()
    err = np.nan_to_num(np.vstack([tau - table["low"].to_numpy(), table["high"].to_numpy() - tau]))
    ax.errorbar(x, tau, yerr=err, marker="o", capsize=4, label="simulated (95 % interval over prompts)")
    for n, (length, what, style) in enumerate(((trained_length, "trained on", "--"),
                                               (sliding_window, "draft sliding window", ":"))):
        if length:
            ax.axvline(length, color=f"C{n + 1}", ls=style, label=f"{what} {length} tokens")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [f"{c}\n({int(p)})" for c, p in zip(table.index, table["prompts"], strict=True)])
    ax.minorticks_off()
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("context length, tokens (prompts)")
    ax.set_ylabel(TAU_LABEL)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside the data, not on it
    return fig


@dataclass(frozen=True)
class Fall:
    """τ on contexts within the training length against τ past it."""

    trained_length: int
    inside: float
    inside_at: int  # the longest length measured within the training length
    past: float  # mean over the prompts of every length measured past it
    past_at: tuple[int, int]  # the shortest and longest of those lengths
    prompts: int = 0  # the fewest prompts any of those lengths held (0: not counted)
    inside_low: float = float("nan")  # the 95 % interval's low end at ``inside_at`` (nan: not given)
    past_high: float = float("nan")  # the highest high end of the intervals past the training length

    @property
    def drops(self) -> bool:
        """τ past the training length keeps less than :data:`FALL_SHARE` of its gain and loses :data:`MIN_DROP`."""
        return self.past - 1 < FALL_SHARE * (self.inside - 1) and self.inside - self.past >= MIN_DROP

    @property
    def separated(self) -> bool:
        """The intervals on the two sides do not overlap, touching at most (one prompt a length has no interval:
        never separated)."""
        return self.prompts != 1 and not self.inside_low < self.past_high  # nan (not given) compares False

    @property
    def falls(self) -> bool:
        """A drop that the prompts' intervals tell from noise: what the doctor's advice fires on."""
        return self.drops and self.separated

    @property
    def _past_lengths(self) -> str:
        first, last = self.past_at
        return f"{first} tokens" if first == last else f"{first} to {last} tokens"

    def describe(self) -> str:
        """Both numbers, whether or not τ falls."""
        few_prompts = 0 < self.prompts < FULL_CURVE_PROMPTS
        verdict = ("falls" if self.falls else
                   "is lower, but within the noise (the intervals on the two sides overlap), so no fall is claimed"
                   if self.drops else "cannot be told to fall or hold" if few_prompts else "holds")
        few = (f" With {self.prompts} prompt(s) a length this is a first look: the table's intervals, resampled from "
               f"so few prompts, are too wide to read much into (`eagle3kit evaluate --bench long-context` takes "
               f"{FULL_CURVE_PROMPTS} a length)."
               if few_prompts else "")
        return (f"{TAU_LABEL} {self.inside:.2f} at {self.inside_at} tokens of context (within the "
                f"{self.trained_length} tokens of the longest conversation it was trained on), {self.past:.2f} at "
                f"{self._past_lengths}: {'on these prompts ' if few else ''}it {verdict} past the training length."
                f"{few}")

    def line(self, sliding_window: int | None = None) -> str:
        """The doctor's sentence when τ falls (empty otherwise): the two lengths, the two τ, what to change."""
        if not self.falls:
            return ""
        window = (f", or keep the draft's sliding window within it (--sliding-window {self.trained_length}; it is "
                  f"{sliding_window})" if sliding_window and sliding_window > self.trained_length else "")
        longest = self.past_at[1]
        return (f"τ falls past the training length: {TAU_LABEL} {self.inside:.2f} at {self.inside_at} tokens of "
                f"context, within the {self.trained_length} the draft was trained at, but {self.past:.2f} at "
                f"{self._past_lengths}. Train on documents as long as the contexts it will serve: conversations "
                f"that long, kept whole (`eagle3kit data --seq-length {longest}` only caps a document; short prompts "
                f"and replies stay short), in packs that hold them (`train --total-seq-len {longest}`){window}.")


def fall(table: pd.DataFrame, trained_length: int) -> Fall | None:
    """τ at the longest length within ``trained_length`` against τ over every length past it (the mean over their
    prompts); None when the table has no length on one side."""
    inside = table[table["tokens"] <= trained_length]
    past = table[(table["tokens"] > trained_length) & (table["prompts"] > 0)]
    if inside.empty or past.empty:
        return None
    a = inside.iloc[-1]
    tau = float((past["tau"] * past["prompts"]).sum() / past["prompts"].sum())
    return Fall(trained_length, float(a["tau"]), int(a["tokens"]), tau,
                (int(past["tokens"].iloc[0]), int(past["tokens"].iloc[-1])),
                int(min(a["prompts"], past["prompts"].min())),
                float(a.get("low", np.nan)), float(past["high"].max()) if "high" in past else float("nan"))
