"""Trained or an initialisation? Decided by measurement on the verifier's own greedy continuations of held-out
prompts, against untrained drafts of the same shape (speculators' initialisation, the same vocab mapping and
verifier-owned weights): speculators' own loss (KL to the verifier, first TTT step) and how often the first draft
token is the verifier's next token. A weight-norm guess cannot tell a short training run from a fresh init; these
can. The loss decides where top-1 agreement cannot (a verifier whose next-token distribution is nearly flat)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import Eagle3DraftModel
from speculators.models.eagle3.data import shift_batch

from eagle3kit.data.hidden_states import extract
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
LOSS_RATIO = 0.8  # trained: held-out loss below this share of the best untrained seed's (seeds differ by ~10%)
SEEDS = (0, 1)  # untrained drafts measured; the lower loss of the two is the baseline


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


@torch.no_grad()
def verifier_states(verifier_model, prompts: list[torch.Tensor], conts: list[list[int]], layers: list[int]
                    ) -> list[torch.Tensor]:
    """The verifier's states of each prompt + continuation (:func:`~eagle3kit.data.hidden_states.extract`:
    ``[T, len(layers) + 1, H]``), computed once for every draft measured on them."""
    return [extract(verifier_model, torch.tensor([p[0].tolist() + c]), layers)[0]
            for p, c in zip(prompts, conts, strict=True)]


@torch.no_grad()
def held_out_loss(verifier_model, draft: Eagle3DraftModel, prompts: list[torch.Tensor], conts: list[list[int]],
                  states: list[torch.Tensor] | None = None) -> float:
    """speculators' eager KL loss of the draft's first TTT step on the continuations (the prompts unsupervised),
    the batch made as speculators trains (``shift_batch``), averaged over the supervised tokens; ``states``: the
    verifier's (:func:`verifier_states`), else computed here."""
    loss_config, total, weight = resolve_loss_config("kl_div", "eager"), 0.0, 0
    if states is None:
        states = verifier_states(verifier_model, prompts, conts, list(draft.config.eagle_aux_hidden_state_layer_ids))
    for prompt, cont, h in zip(prompts, conts, states, strict=True):
        ids = torch.tensor([prompt[0].tolist() + cont])
        mask = torch.zeros(ids.shape[1], dtype=torch.long)
        mask[prompt.shape[1]:] = 1
        batch = shift_batch({"input_ids": ids[0], "hidden_states": h[:, :-1].flatten(1),
                             "verifier_last_hidden_states": h[:, -1], "loss_mask": mask,
                             "lengths": torch.tensor([ids.shape[1]]), "position_ids": torch.arange(ids.shape[1])})
        batch = {k: v[None] for k, v in batch.items() if k != "lengths"}
        batch["document_ids"] = torch.zeros_like(batch["input_ids"])
        _tokens, loss, _metrics = draft(**batch, ttt_steps=1, loss_config=loss_config)
        n = int(batch["loss_mask"].sum())
        total, weight = total + float(loss) * n, weight + n
    return total / weight if weight else float("nan")


@dataclass
class Agreement:
    """The draft and an untrained twin on the same verifier continuations: acceptance, and held-out loss (the
    untrained one: the lowest over :data:`SEEDS`)."""

    draft: ev.Acceptance
    untrained: ev.Acceptance
    draft_loss: float
    untrained_loss: float
    parts: list[ev.Acceptance] = field(default_factory=list)  # the draft's, prompt by prompt
    prompts: list = field(default_factory=list)  # what was measured: BenchPrompts when a named set was given

    @staticmethod
    def first(acc: ev.Acceptance) -> float:
        """How often the first draft token is the verifier's next token."""
        return float(acc.rates()["cumulative"].iloc[0]) if acc.accept_all else float("nan")

    @property
    def tokens(self) -> int:
        return len(self.draft.accept_all)

    @property
    def trained(self) -> bool:
        """The draft's held-out loss is clearly below an untrained draft's (:data:`LOSS_RATIO`), or it agrees with
        the verifier clearly more often (three standard errors of the twin's rate, at least one token's worth)."""
        p, n = self.first(self.untrained), max(self.tokens, 1)
        return (self.draft_loss < LOSS_RATIO * self.untrained_loss
                or self.first(self.draft) > p + 3 * math.sqrt(max(p * (1 - p), 1 / n) / n))

    def numbers(self) -> str:
        return (f"held-out loss (KL to the verifier) {self.draft_loss:.3g} vs {self.untrained_loss:.3g} for an "
                f"untrained draft of the same shape; the first draft token is the verifier's next token "
                f"{self.first(self.draft):.0%} vs {self.first(self.untrained):.0%} of the time ({self.tokens} tokens)")


def measure(draft: Eagle3DraftModel, verifier: Verifier, conversations=None, n_prompts: int = 4,
            max_new_tokens: int = 32, k: int = 1, verifier_model=None) -> Agreement:
    """The draft's and an untrained twin's acceptance on the verifier's greedy continuations of ``n_prompts``
    prompts: held-out ``conversations`` (cut as :func:`~eagle3kit.evaluate.acceptance.chat_prompts` cuts them), a
    named set's :class:`~eagle3kit.evaluate.benchmarks.BenchPrompt` s (whole), else :data:`FALLBACK_PROMPTS`."""
    from eagle3kit.evaluate.benchmarks import BenchPrompt, render

    model = verifier_model if verifier_model is not None else load_model(verifier)
    tok = load_tokenizer(verifier)
    given = list(conversations or FALLBACK_PROMPTS)
    named = given and isinstance(given[0], BenchPrompt)
    prompts = ([torch.tensor([ids]) for ids in render(tok, given[:n_prompts], model)] if named
               else ev.chat_prompts(tok, given, n_prompts))
    conts = ev.continuations(model, prompts, max_new_tokens, progress=False)
    twins = [untrained_twin(draft, seed) for seed in SEEDS]
    # one verifier forward of each sequence for all five measurements (the twins share the draft's aux layers)
    layers = list(draft.config.eagle_aux_hidden_state_layer_ids)
    states = verifier_states(model, prompts, conts, layers)
    aux = {(tuple(p[0].tolist() + c), tuple(layers)): s[None, :, :-1].flatten(2)  # simulate's VerifierStates
           for p, c, s in zip(prompts, conts, states, strict=True)}
    parts = ev.simulate_each(model, draft, prompts, conts, k, progress=False, states=aux)
    return Agreement(ev.merge(parts), ev.simulate(model, twins[0], prompts, conts, k, progress=False, states=aux),
                     held_out_loss(model, draft, prompts, conts, states),
                     min(held_out_loss(model, twin, prompts, conts, states) for twin in twins), parts,
                     given[:n_prompts] if named else [])


def trained_findings(a: Agreement) -> list[Finding]:
    """From the measurement ``a`` (:func:`measure`): an error when the draft agrees with the verifier no more than an
    untrained draft does (speculators issue 1114: a conversion saved the random initialisation, acceptance 0); else
    an info with the two rates."""
    numbers = a.numbers()
    if a.trained:
        return [Finding("info", "the weights are trained", numbers, "", "trained")]
    return [Finding("error", "the draft predicts the verifier no better than an untrained one", numbers +
                    "; the weights are an initialisation (a conversion or export that lost them: "
                    "vllm-project/speculators issue 1114), or the draft vocabulary misses what the verifier writes",
                    "re-export from the trained checkpoint and check the tensor names; `eagle3kit doctor --draft DIR "
                    "--why-tau` measures more", "trained")]
