"""Trained or an initialisation? Decided by measurement: the draft's agreement with the verifier's own greedy
continuations against an untrained draft of the same shape (speculators' initialisation, the same vocab mapping and
verifier-owned weights). A weight-norm guess cannot tell a short training run from a fresh init; agreement can."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.doctor.findings import Finding
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.logs import quiet
from eagle3kit.verifier import Verifier, load_model, load_tokenizer

# Prompts when no data directory is given: plain questions, rendered with the verifier's chat template.
FALLBACK_PROMPTS = ("What is the capital of France, and what is it known for?",
                    "Write a short Python function that reverses a string.",
                    "Explain in two sentences why the sky is blue.",
                    "Give me three tips for a good night's sleep.",
                    "What is the difference between a list and a tuple in Python?",
                    "Summarise the plot of Romeo and Juliet in a few lines.")


def untrained_twin(draft: Eagle3DraftModel, seed: int = 0) -> Eagle3DraftModel:
    """A draft of the same config, as speculators initialises it: random draft weights, the same vocab mapping,
    the verifier-owned weights loaded from the verifier the config names."""
    torch.manual_seed(seed)
    twin = Eagle3DraftModel(copy.deepcopy(draft.config))
    if getattr(draft, "use_draft_vocab", False):
        twin.load_vocab_mappings(draft.t2d, draft.d2t)
    with quiet():
        twin.load_verifier_weights()
    return twin.eval()


@dataclass
class Agreement:
    """The draft and its untrained twin on the same verifier continuations (one TTT forward each)."""

    draft: ev.Acceptance
    untrained: ev.Acceptance

    @staticmethod
    def first(acc: ev.Acceptance) -> float:
        """How often the first draft token is the verifier's next token."""
        return float(acc.rates()["cumulative"].iloc[0]) if acc.accept_all else float("nan")

    @property
    def tokens(self) -> int:
        return len(self.draft.accept_all)

    @property
    def trained(self) -> bool:
        """The draft agrees with the verifier clearly more often than its untrained twin (three standard errors of
        the twin's rate, at least one token's worth)."""
        p, n = self.first(self.untrained), max(self.tokens, 1)
        return self.first(self.draft) > p + 3 * math.sqrt(max(p * (1 - p), 1 / n) / n)


def measure(draft: Eagle3DraftModel, verifier: Verifier, conversations=None, n_prompts: int = 4,
            max_new_tokens: int = 32, k: int = 1, verifier_model=None) -> Agreement:
    """The draft's and an untrained twin's acceptance on the verifier's greedy continuations of ``n_prompts``
    prompts (held-out ``conversations``, else :data:`FALLBACK_PROMPTS`)."""
    model = verifier_model if verifier_model is not None else load_model(verifier)
    tok = load_tokenizer(verifier)
    prompts = ev.chat_prompts(tok, list(conversations or FALLBACK_PROMPTS), n_prompts)
    conts = ev.continuations(model, prompts, max_new_tokens, progress=False)
    return Agreement(ev.simulate(model, draft, prompts, conts, k, progress=False),
                     ev.simulate(model, untrained_twin(draft), prompts, conts, k, progress=False))


def trained_findings(draft: Eagle3DraftModel, verifier: Verifier, conversations=None, n_prompts: int = 4,
                     max_new_tokens: int = 32) -> list[Finding]:
    """An error when the draft agrees with the verifier no more than an untrained draft does (speculators issue
    1114: a conversion saved the random initialisation, acceptance 0); else an info with the two rates."""
    a = measure(draft, verifier, conversations, n_prompts, max_new_tokens)
    numbers = (f"the first draft token is the verifier's next token {a.first(a.draft):.0%} of the time vs "
               f"{a.first(a.untrained):.0%} for an untrained draft of the same shape ({a.tokens} tokens)")
    if a.trained:
        return [Finding("info", "the weights are trained", numbers, "", "trained")]
    return [Finding("error", "the draft predicts the verifier no better than an untrained one", numbers +
                    "; the weights are an initialisation (a conversion or export that lost them: "
                    "vllm-project/speculators issue 1114), or the draft vocabulary misses what the verifier writes",
                    "re-export from the trained checkpoint and check the tensor names; `eagle3kit doctor --draft DIR "
                    "--why-tau` measures more", "trained")]
