"""Acceptance length τ of an EAGLE-3 draft: simulated from the draft's TTT forward, and by the real decode loop.

Convention (as in the EAGLE papers and vLLM's "mean acceptance length"): τ is the mean number of tokens a
speculative round commits = accepted draft tokens + 1 bonus token from the verifier. An untrained draft has τ ≈ 1.0;
the maximum is ``k + 1``.

Simulation: the verifier's greedy continuation of a prompt is fed, teacher-forced, through speculators'
``Eagle3DraftModel.forward`` (``ttt_steps=k``), with the batch shifted as speculators trains (aux state of token ``j``
+ token ``j+1`` predicts token ``j+2``). ``draft_tokens[i][j]`` is then the ``i+1``-th draft token of a round that
starts with ``j+2`` committed tokens, so every start position's acceptance length is known from one forward.
Two summaries: per-position acceptance rates and τ over *all* start positions, and τ of the *walk* that visits the
start positions a real decode loop visits (start after the prompt's first token, jump by accepted + 1). The walk is
what :func:`eagle3kit.evaluate.decode.speculative_generate` measures on the same continuation.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from eagle3kit.data.conversations import Conversation, ConversationError
from eagle3kit.data.generate import greedy_replies
from eagle3kit.evaluate.benchmarks import cut_user_turn, held_out_set, template_ids
from eagle3kit.evaluate.decode import aux_hidden_states, greedy_generate, speculative_generate, to_verifier_ids
from eagle3kit.evaluate.defaults import MAX_PROMPT_TOKENS
from eagle3kit.progress import tqdm


@dataclass
class Acceptance:
    """Acceptance of one draft on a set of continuations (all numbers aggregate over prompts)."""

    k: int
    accept_all: list[int] = field(default_factory=list)  # accepted draft tokens at every start with k targets
    walk_accepted: list[int] = field(default_factory=list)  # accepted per round along the decode walk
    walk_tokens: int = 0  # tokens committed by those rounds

    @property
    def tau(self) -> float:
        """τ along the decode walk: committed tokens / rounds (what the decode loop measures)."""
        return self.walk_tokens / len(self.walk_accepted) if self.walk_accepted else float("nan")

    @property
    def tau_all_starts(self) -> float:
        """τ averaged over every start position: 1 + mean accepted draft tokens."""
        return 1.0 + float(np.mean(self.accept_all)) if self.accept_all else float("nan")

    def walk_rates(self) -> list[float]:
        """Per draft position i: the share of the decode walk's rounds that accepted at least i draft tokens, as
        vLLM's counters measure it (accepted at position i / rounds); they sum to the walk's mean accepted tokens."""
        a = np.asarray(self.walk_accepted)
        return [float((a >= i).mean()) if a.size else float("nan") for i in range(1, self.k + 1)]

    def rates(self) -> pd.DataFrame:
        """Per draft position i: P(first i tokens accepted) and P(token i accepted | tokens before it accepted)."""
        a = np.asarray(self.accept_all)
        rows = []
        for i in range(1, self.k + 1):
            reached = (a >= i - 1).sum()
            rows.append({"position": i, "cumulative": float((a >= i).mean()) if a.size else float("nan"),
                         "conditional": float((a >= i).sum() / reached) if reached else float("nan")})
        return pd.DataFrame(rows)


def chat_prompts(tokenizer, conversations: list[Conversation], n: int, max_prompt_tokens: int = MAX_PROMPT_TOKENS
                 ) -> list[torch.Tensor]:
    """Prompt ids ([1, P]) from the first user turn of each conversation, with the chat template.

    Conversations may be ShareGPT records, lists of ``{"role", "content"}`` messages, or plain strings
    (:func:`eagle3kit.data.conversations.prompt_turns` finds the user turn). Its text is cut to ``max_prompt_tokens``
    tokens. The held-out set of :mod:`eagle3kit.evaluate.benchmarks` is made the same way.
    """
    prompts = held_out_set(conversations, n)
    if not prompts:
        raise ConversationError("No conversation had a user turn with text; pass ShareGPT records, message lists "
                                "or strings.")
    return [torch.tensor([template_ids(tokenizer, cut_user_turn(tokenizer, p, max_prompt_tokens).messages)])
            for p in prompts]


def continuations(verifier, prompts: list[torch.Tensor], max_new_tokens: int, eos_token_id=None,
                  progress: bool = True, batch_size: int = 16) -> list[list[int]]:
    """The verifier's greedy continuation of every prompt ([1, P] ids), ending with the eos id that stops it as
    transformers' ``generate`` writes it (None: the model's generation config). Decoded ``batch_size`` prompts at a
    time by :func:`eagle3kit.data.generate.greedy_replies`: ~4x faster than one at a time on 2 cores, and equal to
    batch-1 ``generate`` except at floating-point ties (bench/regenerate.py measures both)."""
    eos = verifier.generation_config.eos_token_id if eos_token_id is None else eos_token_id
    out: list[list[int]] = [[] for _ in prompts]
    replies = greedy_replies(verifier, [p[0].tolist() for p in prompts], max_new_tokens,
                             [] if eos is None else eos, batch_size, keep_eos=True)
    for i, reply in tqdm(replies, total=len(prompts), desc="greedy continuations", disable=not progress):
        out[i] = reply
    return out


VerifierStates = dict  # (sequence ids, aux layer ids) -> the verifier's aux hidden states [1, T, n_aux * H]


@torch.no_grad()
def teacher_forced_draft_tokens(verifier, draft, sequence: torch.Tensor, k: int,
                                states: VerifierStates | None = None) -> torch.Tensor:
    """Draft tokens (verifier ids) of every TTT step for ``sequence`` ([1, T]): a ``[k, T-1]`` tensor.

    Row ``i``, column ``j`` is the draft's guess for token ``j+2+i`` (speculators' shifted batch, teacher forcing).
    ``states`` keeps the verifier's hidden states of each sequence, so that scoring other drafts on the same
    sequences runs the draft alone (the recipe lab, τ while training).
    """
    device = next(draft.parameters()).device
    sequence = sequence.to(device)
    layers = list(draft.config.eagle_aux_hidden_state_layer_ids)
    key = (tuple(sequence[0].tolist()), tuple(layers))
    aux = states.get(key) if states is not None else None
    if aux is None:
        out = verifier(input_ids=sequence, output_hidden_states=True, logits_to_keep=1)  # its states, not its logits
        aux = aux_hidden_states(out.hidden_states, layers)
        if states is not None:
            states[key] = aux
    t = sequence.shape[1] - 1
    steps = draft(hidden_states=aux[:, :-1], input_ids=sequence[:, 1:],
                  document_ids=torch.zeros(1, t, dtype=torch.long, device=device),
                  position_ids=torch.arange(1, t + 1, device=device)[None], ttt_steps=k)
    return torch.stack([to_verifier_ids(draft, s[0]) for s in steps])


class Round(NamedTuple):
    """One speculative round of the decode walk: it starts with ``start`` committed tokens, the draft may propose
    ``room`` tokens (k, fewer near the end: the round leaves room for the verifier's own token), ``accepted`` of
    them are accepted."""

    start: int
    room: int
    accepted: int


def _accepted(draft_tokens: list[list[int]], sequence: list[int], start: int, cap: int) -> int:
    """Draft tokens accepted in a round that starts with ``start`` committed tokens, at most ``cap``."""
    a = 0
    while a < cap and draft_tokens[a][start - 2] == sequence[start + a]:
        a += 1
    return a


def walk(draft_tokens: torch.Tensor, sequence: list[int], prompt_len: int, k: int) -> list[Round]:
    """The rounds a real decode loop takes over ``sequence`` (prompt + greedy continuation): the first round starts
    after the prompt's first generated token (the prefill's), each next one after the accepted tokens + 1."""
    tokens, total, rounds = draft_tokens.tolist(), len(sequence), []
    start = prompt_len + 1  # the first token comes from the prompt's prefill
    while start < total:
        room = min(k, total - start - 1)  # leave room for the bonus token
        rounds.append(Round(start, room, _accepted(tokens, sequence, start, room)))
        start += rounds[-1].accepted + 1
    return rounds


def acceptance_of(draft_tokens: torch.Tensor, sequence: list[int], prompt_len: int, k: int) -> Acceptance:
    """Acceptance lengths from teacher-forced draft tokens on one prompt + greedy continuation."""
    tokens, sequence = draft_tokens.tolist(), [int(t) for t in sequence]
    result = Acceptance(k)
    for start in range(prompt_len + 1, len(sequence) - k + 1):  # starts where all k targets exist
        result.accept_all.append(_accepted(tokens, sequence, start, k))
    for r in walk(draft_tokens, sequence, prompt_len, k):
        result.walk_accepted.append(r.accepted)
        result.walk_tokens += r.accepted + 1
    return result


def merge(parts: list[Acceptance]) -> Acceptance:
    out = Acceptance(parts[0].k)
    for p in parts:
        out.accept_all += p.accept_all
        out.walk_accepted += p.walk_accepted
        out.walk_tokens += p.walk_tokens
    return out


def simulate_each(verifier, draft, prompts: list[torch.Tensor], conts: list[list[int]], k: int,
                  progress: bool = True, states: VerifierStates | None = None) -> list[Acceptance]:
    """Simulated acceptance of each prompt and its greedy continuation (one draft TTT forward per prompt; the
    verifier's forward too, unless ``states`` already holds it)."""
    parts = []
    for prompt, cont in tqdm(list(zip(prompts, conts, strict=True)), desc="simulated acceptance",
                             disable=not progress):
        sequence = prompt[0].tolist() + cont
        tokens = teacher_forced_draft_tokens(verifier, draft, torch.tensor([sequence]), k, states)
        parts.append(acceptance_of(tokens, sequence, prompt.shape[1], k))
    return parts


def simulate(verifier, draft, prompts: list[torch.Tensor], conts: list[list[int]], k: int,
             progress: bool = True, states: VerifierStates | None = None) -> Acceptance:
    """Simulated acceptance over prompts and their greedy continuations, all prompts merged (``states``: as
    :func:`simulate_each`'s, to score several drafts on one verifier forward of each sequence)."""
    return merge(simulate_each(verifier, draft, prompts, conts, k, progress, states))


@dataclass
class DecodeRun:
    tau: float
    rounds: int
    tokens: int
    lossless: int  # prompts whose output equals greedy decoding
    prompts: int
    seconds: float
    plain_seconds: float = 0.0  # plain greedy decoding of the same prompts, one at a time (0: not measured)


def decode(verifier, draft, prompts: list[torch.Tensor], conts: list[list[int]], k: int, eos_token_id=None,
           progress: bool = True, baseline: bool = False) -> DecodeRun:
    """Run the real speculative decode loop on every prompt; check it reproduces the greedy continuation.

    ``baseline``: after each prompt, also time plain greedy decoding of it (transformers' ``generate``, batch 1),
    so the loop's speed is compared with the same work without the draft.
    """
    rounds = tokens = same = 0
    seconds = plain = 0.0
    for prompt, cont in tqdm(list(zip(prompts, conts, strict=True)), desc="speculative decoding",
                             disable=not progress):
        t0 = time.perf_counter()
        res = speculative_generate(verifier, draft, prompt, len(cont), k, eos_token_id)
        seconds += time.perf_counter() - t0
        if baseline:
            t0 = time.perf_counter()
            greedy_generate(verifier, prompt, len(cont), eos_token_id)
            plain += time.perf_counter() - t0
        same += res.tokens == cont
        rounds += res.rounds
        tokens += len(res.tokens) - 1
    return DecodeRun(tokens / rounds if rounds else float("nan"), rounds, tokens, same, len(prompts), seconds, plain)


def summary_table(results: dict[str, Acceptance], decoded: dict[str, DecodeRun] | None = None,
                  prompts: int | None = None) -> pd.DataFrame:
    """One row per draft: τ (walk), τ over all starts, per-position conditional rates, then the decode loop's lossless
    count and its τ; its τ only where it decoded all ``prompts`` the simulation scored (None: it did). On fewer it is
    a correctness check, not a τ to set beside the others."""
    rows = []
    for name, acc in results.items():
        row = {"draft": name, "tau_simulated": round(acc.tau, 3), "tau_all_starts": round(acc.tau_all_starts, 3)}
        for _, r in acc.rates().iterrows():
            row[f"acc_{int(r['position'])}"] = round(r["conditional"], 3)
        if decoded and name in decoded:
            d = decoded[name]
            row.update(lossless=f"{d.lossless}/{d.prompts}")
            if prompts is None or d.prompts >= prompts:
                row.update(tau_decode=round(d.tau, 3))
        rows.append(row)
    return pd.DataFrame(rows)


def rate_label(rate: float) -> str:
    """A bar's label: the rate, "0" for none (a bar of no height), "n/a" where no round reached the position."""
    return "n/a" if np.isnan(rate) else f"{rate:.2f}" if rate else "0"


def plot_acceptance(results: dict[str, Acceptance]):
    """Bar chart: conditional acceptance rate per draft position, one group per draft, each bar labelled with its
    rate (:func:`rate_label`: a rate of 0, an untrained draft's, is a bar of no height; its label shows it)."""
    fig = Figure(figsize=(6.5, 3.2))
    ax = fig.subplots()
    width = 0.8 / max(1, len(results))
    for n, (name, acc) in enumerate(results.items()):
        rates = acc.rates()
        xs = rates["position"] + (n - (len(results) - 1) / 2) * width
        ax.bar(xs, rates["conditional"], width, label=f"{name} (τ over every start {acc.tau_all_starts:.2f})",
               edgecolor="black", linewidth=0.6)
        for x, r in zip(xs, rates["conditional"], strict=True):
            ax.text(x, (0 if np.isnan(r) else r) + 0.02, rate_label(r), ha="center", va="bottom", fontsize=7)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate over every start\n(given earlier ones accepted)")
    ax.set_ylim(0, 1)
    k = max(a.k for a in results.values())
    ax.set_xticks(range(1, k + 1))
    ax.set_xlim(0.5, k + 0.5)  # every group, even one whose rates are all n/a (no bar to scale to)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


def compare(verifier_model, tokenizer, drafts: dict, prompts: list[torch.Tensor], max_new_tokens: int, k: int,
            run_decode: bool = True, progress: bool = True, conts: list[list[int]] | None = None,
            states: VerifierStates | None = None) -> tuple[pd.DataFrame, dict, dict]:
    """Greedy continuations once (or ``conts``), then simulated (and real, with ``run_decode``) acceptance for each
    named draft; ``states`` keeps the verifier's hidden states across drafts."""
    if conts is None:
        conts = continuations(verifier_model, prompts, max_new_tokens, tokenizer.eos_token_id, progress)
    sim = {name: merge(simulate_each(verifier_model, d, prompts, conts, k, progress, states))
           for name, d in drafts.items()}
    real = ({name: decode(verifier_model, d, prompts, conts, k, tokenizer.eos_token_id, progress)
             for name, d in drafts.items()} if run_decode else {})
    return summary_table(sim, real), sim, real
