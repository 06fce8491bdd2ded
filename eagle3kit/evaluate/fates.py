"""Every reply token's fate in the simulated decode walk: accepted from the draft (at which depth), the verifier's own
token after a rejection (with what the draft proposed instead), the bonus token, or the prefill's first token.

The fates come from the very rounds :func:`eagle3kit.evaluate.acceptance.walk` takes, the walk ``evaluate`` scores:
a prompt's accepted tokens and rounds counted from its fates are its :class:`~eagle3kit.evaluate.scores.PromptScore`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from eagle3kit.evaluate.acceptance import VerifierStates, teacher_forced_draft_tokens, walk
from eagle3kit.evaluate.benchmarks import BenchPrompt
from eagle3kit.progress import tqdm

FIRST = "first"  # the prefill's token: before the first round, no draft was asked
ACCEPTED = "accepted"  # proposed by the draft and accepted (depth 1..k within its round)
CORRECTED = "corrected"  # the verifier's own token where the draft's proposal was rejected
BONUS = "bonus"  # the verifier's own token after every proposal of the round was accepted
KINDS = (FIRST, ACCEPTED, CORRECTED, BONUS)


@dataclass(frozen=True)
class Fate:
    """One reply token: its verifier id, its fate, the depth it was accepted at (0 unless accepted), what the draft
    proposed instead (corrected tokens only) and its round (-1: the prefill's token)."""

    token: int
    kind: str
    depth: int = 0
    proposed: int | None = None
    round: int = -1


def fates_of(draft_tokens: torch.Tensor, sequence: list[int], prompt_len: int, k: int) -> list[Fate]:
    """The fate of every token of ``sequence[prompt_len:]`` (the reply) along the decode walk."""
    sequence = [int(t) for t in sequence]
    if len(sequence) <= prompt_len:
        return []
    out = [Fate(sequence[prompt_len], FIRST)]
    for n, r in enumerate(walk(draft_tokens, sequence, prompt_len, k)):
        out += [Fate(sequence[r.start + i], ACCEPTED, i + 1, round=n) for i in range(r.accepted)]
        end = r.start + r.accepted  # the verifier's own token closes the round
        if r.accepted < r.room:  # the draft's next proposal was checked and rejected
            out.append(Fate(sequence[end], CORRECTED, proposed=int(draft_tokens[r.accepted, r.start - 2]), round=n))
        else:
            out.append(Fate(sequence[end], BONUS, round=n))
    return out


@dataclass
class PromptView:
    """One prompt, its reply and every reply token's fate; with vLLM's per-request acceptance where it ran."""

    id: str
    category: str
    prompt_ids: list[int]
    fates: list[Fate]
    k: int
    vllm_histogram: list[int] | None = None  # rounds by accepted draft tokens, from vLLM's per-request metrics
    vllm_output: list[int] | None = None  # vLLM's output with the draft
    extra: dict = field(default_factory=dict)

    @property
    def reply(self) -> list[int]:
        return [f.token for f in self.fates]

    @property
    def rounds(self) -> int:
        """Speculative rounds: each ends with exactly one token of the verifier's own (corrected or bonus)."""
        return sum(f.kind in (CORRECTED, BONUS) for f in self.fates)

    @property
    def accepted(self) -> int:
        return sum(f.kind == ACCEPTED for f in self.fates)

    @property
    def tau(self) -> float:
        """1 + accepted / rounds: the bonus token counted (vLLM's mean acceptance length)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else float("nan")

    def histogram(self) -> list[int]:
        """Rounds by accepted draft tokens (0..k), the shape of vLLM's per-request histogram."""
        per_round = Counter(f.round for f in self.fates if f.kind == ACCEPTED)
        counts = Counter(per_round.get(f.round, 0) for f in self.fates if f.kind in (CORRECTED, BONUS))
        return [counts.get(j, 0) for j in range(self.k + 1)]

    def by_depth(self) -> list[int]:
        """Accepted tokens at draft depth 1..k."""
        depths = Counter(f.depth for f in self.fates if f.kind == ACCEPTED)
        return [depths.get(d, 0) for d in range(1, self.k + 1)]

    @property
    def vllm_tau(self) -> float | None:
        h = self.vllm_histogram
        if not h or not sum(h):
            return None
        return 1.0 + sum(j * n for j, n in enumerate(h)) / sum(h)

    @property
    def vllm_counts_agree(self) -> bool | None:
        """vLLM's rounds by accepted tokens equal the simulation's (None: vLLM did not run)."""
        if self.vllm_histogram is None:
            return None
        mine, theirs = self.histogram(), list(self.vllm_histogram)
        width = max(len(mine), len(theirs))
        return mine + [0] * (width - len(mine)) == theirs + [0] * (width - len(theirs))

    @property
    def vllm_same_output(self) -> bool | None:
        """vLLM's output with the draft equals the reply simulated here (None: vLLM did not run)."""
        return None if self.vllm_output is None else list(self.vllm_output) == self.reply


def views_of(verifier, draft, prompts: list[BenchPrompt], ids: list[list[int]], conts: list[list[int]], k: int,
             states: VerifierStates | None = None, progress: bool = False,
             vllm: tuple[list[list[int]], list[list[int]]] | None = None) -> list[PromptView]:
    """Each prompt's view: the draft's teacher-forced tokens on prompt + continuation (one draft forward; the
    verifier's too unless ``states`` holds it), walked as ``evaluate`` walks them. ``vllm``: (per-request
    histograms, outputs with the draft) of the same prompts, shown beside."""
    views = []
    for i, (p, prompt, cont) in enumerate(tqdm(list(zip(prompts, ids, conts, strict=True)), desc="token fates",
                                               disable=not progress)):
        sequence = [*prompt, *cont]
        tokens = teacher_forced_draft_tokens(verifier, draft, torch.tensor([sequence]), k, states)
        views.append(PromptView(p.id, p.category, list(prompt), fates_of(tokens, sequence, len(prompt), k), k,
                                vllm[0][i] if vllm else None, list(vllm[1][i]) if vllm else None))
    return views


def same_counts(views: list[PromptView], records: list) -> int:
    """How many views count exactly the rounds and accepted tokens of the matching per-prompt records
    (:class:`~eagle3kit.evaluate.scores.PromptScore`: what ``evaluate`` and notebook 06 scored)."""
    return sum((v.rounds, v.accepted) == (r.rounds, r.accepted) for v, r in zip(views, records, strict=True))


def beside_its_set(records: list, index: int) -> str:
    """One shown prompt's τ beside its set's (``records``: the set's per-prompt scores): pooled over all rounds (06's
    headline count), the median prompt's, and how many lie below it, so that one example is not read as the set."""
    taus = [r.tau for r in records if r.rounds]
    mine = records[index].tau if records[index].rounds else float("nan")
    if not taus or mine != mine:
        return "this prompt took no round: nothing to compare"
    below = sum(t < mine for t in taus)
    where = ("an easy one" if below >= 0.75 * len(taus) else "a hard one" if below <= 0.25 * len(taus)
             else "near the middle")
    pooled = 1 + sum(r.accepted for r in records) / sum(r.rounds for r in records)
    return (f"this prompt's τ {mine:.3f} against the set's {pooled:.3f} (simulated, all rounds pooled: notebook 06's "
            f"simulated τ of the set; the median prompt {float(np.median(taus)):.3f}) over {len(taus)} prompts: above "
            f"{below} of them, {where}")


def typical(records: list, replies: list[str]) -> int:
    """The prompt to show first: the one whose τ is nearest the set's median among those whose reply does not loop
    (:func:`eagle3kit.data.loops.loops`' measure; a greedy rut is easy to draft and typical of nothing), the
    earlier on a tie; ``records``: the set's per-prompt scores, ``replies``: the text each was scored on."""
    from eagle3kit.data.loops import LOOP_SHARE, repetition

    taus = [r.tau for r in records if r.rounds]
    if not taus:
        return 0
    middle = float(np.median(taus))
    return min(range(len(records)), key=lambda i: (repetition(replies[i]) > LOOP_SHARE, not records[i].rounds,
                                                   abs(records[i].tau - middle) if records[i].rounds else 0.0, i))
