"""The overfit check: train the draft on one conversation, then decode that conversation with it.

SpecForge recommends it before a long run. The conversation is the verifier's own greedy reply to one prompt, so the
tokens the draft trains on are the tokens the decode loop (:func:`eagle3kit.evaluate.decode.speculative_generate`)
will meet. A draft wired correctly (aux hidden states, pre-norm targets, d2t/t2d, the TTT mask) learns it in a few
dozen steps and then has as many draft tokens accepted as it learned (τ close to ``k + 1`` once memorised). A draft that
cannot overfit one sample has a wiring bug, and more data will not fix it.

The verdict is relative to the conversation, because τ alone depends on it (a repetitive reply is learned only part
way): ``passed`` when the draft learned it (training accuracy at TTT step 0 >= ``LEARNED``) and the decode loop
accepts >= ``threshold`` x the draft tokens a round its own training accuracy predicts (``full_acc_0 + full_acc_1 +
full_acc_2``: speculators' ``full_acc_i`` is already cumulative, the share of positions whose draft tokens 0..i were
all right).
One conversation cannot show aux states from the wrong layer, nor (on SmolLM2) most of an all-zero d2t; ``eagle3kit
doctor --data`` checks those. Healthy and miswired setups measured: ``bench/results/overfit_verdict.md``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from eagle3kit.data import conversations as conv
from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.directory import DataDir
from eagle3kit.draft.config import DraftSpec
from eagle3kit.evaluate.acceptance import chat_prompts
from eagle3kit.evaluate.decode import greedy_generate, speculative_generate
from eagle3kit.logs import quiet
from eagle3kit.masks.eagle_mask import round_up_to_block
from eagle3kit.train.session import TrainSession
from eagle3kit.verifier import load_model, load_tokenizer, resolve

CONVERSATION = "conversation.jsonl"  # the one conversation: a ShareGPT prompt and the verifier's greedy reply


LEARNED = 0.5  # training accuracy at TTT step 0 below which the draft did not learn its one conversation


@dataclass
class OverfitResult:
    """What the overfit check measured; ``passed`` when the draft learned its conversation (training accuracy at TTT
    step 0 >= ``LEARNED``) and the decode loop accepts at least ``threshold`` x the draft tokens per round that this
    training accuracy predicts (:attr:`expected_accepted`)."""

    k: int
    steps: int
    tau: float
    accepted: list[int]  # draft tokens accepted per decode round
    lossless: bool  # the decode loop's output equals the verifier's greedy reply
    losses: list[float] = field(default_factory=list)
    full_acc: list[float] = field(default_factory=list)  # per TTT step, at the last training step
    reply_tokens: int = 0
    seconds: float = 0.0
    threshold: float = 0.6
    data_dir: str = ""

    @property
    def mean_accepted(self) -> float:
        return float(np.mean(self.accepted)) if self.accepted else 0.0

    @property
    def expected_accepted(self) -> float:
        """Draft tokens per round the training accuracy predicts: the sum of speculators' ``full_acc_i``, each already
        cumulative (the share of positions whose draft tokens 0..i were all right, as a round accepts token i only
        when every one before it is): what this conversation allows the draft as trained."""
        return float(np.sum(self.full_acc))

    @property
    def learned(self) -> bool:
        return bool(self.full_acc) and self.full_acc[0] >= LEARNED

    @property
    def passed(self) -> bool:
        return self.learned and self.mean_accepted >= self.threshold * self.expected_accepted

    @property
    def predicted_words(self) -> str:
        """How the predicted draft tokens a round are counted, with this run's accuracies."""
        terms = " + ".join(f"{a:.3f}" for a in self.full_acc)
        return (f"training predicts {self.expected_accepted:.2f} (the shares of positions whose first 1, 2, "
                f"{len(self.full_acc)} draft tokens were all right: {terms})")

    @property
    def message(self) -> str:
        head = (f"overfit check: τ {self.tau:.2f} of a possible {self.k + 1} after {self.steps} steps on one "
                f"conversation ({self.reply_tokens} reply tokens; loss {self.losses[0]:.3f} -> {self.losses[-1]:.3f}"
                f"; training accuracy per TTT step, cumulative {', '.join(f'{a:.2f}' for a in self.full_acc)}; decode "
                f"{'equals' if self.lossless else 'DIFFERS FROM'} greedy)")
        if self.passed:
            return head + (f": passed, the decode loop accepts {self.mean_accepted:.2f} draft tokens a round where "
                           f"{self.predicted_words}: the draft is wired to learn.")
        if not self.learned:
            return (head + f": FAILED, the draft did not learn its one conversation (training accuracy at TTT step 0 "
                    f"below {LEARNED}). A draft that cannot overfit one sample most likely has a wiring bug: check the "
                    "loss mask, the attention mask and the learning rate, or train more steps.")
        return (head + f": FAILED, the decode loop accepts {self.mean_accepted:.2f} draft tokens a round where "
                f"{self.predicted_words}; it needs >= {self.threshold:.0%} of that: the draft "
                "learned states the verifier does not give when serving, or its tokens are mapped wrong. Check the "
                "d2t/t2d mapping, and the data with `eagle3kit doctor --data DIR`, before a long run.")


def one_conversation(verifier, out_dir: str | os.PathLike, reply_tokens: int = 64, max_prompt_tokens: int = 64,
                     seed: int = 0, source: str | os.PathLike | None = None, draft_vocab_size: int | None = None,
                     verifier_model=None) -> Path:
    """A data directory of one conversation: a prompt (ShareGPT, chosen by ``seed``) and the verifier's greedy reply.

    The reply is the verifier's own, so that decoding the prompt later walks through exactly the trained tokens.
    """
    return _one_conversation(verifier, out_dir, reply_tokens, max_prompt_tokens, seed, source, draft_vocab_size,
                             verifier_model)[0]


def _one_conversation(verifier, out_dir, reply_tokens, max_prompt_tokens, seed, source, draft_vocab_size,
                      verifier_model) -> tuple[Path, torch.Tensor, list[int]]:
    """:func:`one_conversation`, and the prompt's token ids and the greedy reply's (the overfit check decodes them:
    generated once)."""
    v = resolve(verifier)
    out = Path(out_dir)
    tokenizer = load_tokenizer(v)
    model = verifier_model if verifier_model is not None else load_model(v)
    first = next(t for t in map(conv.prompt_turns, conv.ordered(conv.read(source), seed)) if t)
    user = first[-1]["content"]
    ids = tokenizer(user, add_special_tokens=False)["input_ids"][:max_prompt_tokens]
    turns = [*first[:-1], {"role": "user", "content": tokenizer.decode(ids)}]
    prompt = chat_prompts(tokenizer, [turns], 1, max_prompt_tokens)[0]
    reply = greedy_generate(model, prompt, reply_tokens, tokenizer.eos_token_id)
    text = tokenizer.decode(reply, skip_special_tokens=True)
    if not text.strip():
        raise ValueError(f"The verifier's greedy reply to conversation seed {seed} is empty; try another seed.")
    out.mkdir(parents=True, exist_ok=True)
    conv.write_jsonl(out / CONVERSATION, [[*turns, {"role": "assistant", "content": text}]])
    length = prompt.shape[1] + reply_tokens + 16  # the reply re-tokenized, plus the end-of-turn marker
    build_dataset(v, out / "data", n_conversations=1, seq_length=length, seed=seed, held_out=0,
                  source=out / CONVERSATION, draft_vocab_size=draft_vocab_size, progress=False, overwrite=True,
                  verifier_model=model)
    return out / "data", prompt, reply


def overfit(verifier="smollm2", out_dir: str | os.PathLike = "overfit", steps: int = 40, k: int = 3,
            lr: float = 3e-3, reply_tokens: int = 64, max_prompt_tokens: int = 64, seed: int = 0,
            warm_start_layer: int | None = -1, draft_vocab_size: int | None = 1024, threshold: float = 0.6,
            source: str | os.PathLike | None = None, spec: DraftSpec | None = None,
            progress: bool = True, prepare: Callable[[DataDir], None] | None = None) -> OverfitResult:
    """Train a fresh draft for ``steps`` steps on one conversation, then decode its prompt with ``k`` draft tokens.

    ``draft_vocab_size`` (capped at the verifier's vocab) keeps steps cheap; the one conversation's tokens fit in it.
    ``spec``: the draft's shape (layers, arch, aux layers ...) to check; its verifier, ttt_steps and vocab are set here.
    ``prepare``: called with the one-conversation data directory before training (tests break it there the way a
    miswired pipeline would).
    """
    t0 = time.perf_counter()
    v = resolve(verifier)
    tokenizer = load_tokenizer(v)
    with quiet():
        model = load_model(v)
    vocab = min(draft_vocab_size, v.text_config.vocab_size) if draft_vocab_size else None
    made, prompt, reply = _one_conversation(v, out_dir, reply_tokens, max_prompt_tokens, seed, source, vocab, model)
    data = DataDir(made)
    if prepare is not None:
        prepare(data)
    packed = round_up_to_block(data.seq_length + 1)
    spec = dataclasses.replace(spec or DraftSpec(), verifier=v.path, ttt_steps=k, draft_vocab_size=vocab)
    session = TrainSession(data, spec, progress=progress, lr=lr, seed=seed, max_steps=steps,
                           total_seq_len=packed, train_data_ratio=1.0,
                           scheduler_type="none", warm_start_layer=warm_start_layer)
    records = session.run(steps)
    draft = session.model.eval()
    decoded = speculative_generate(model, draft, prompt, len(reply), k, tokenizer.eos_token_id)
    last = records[-1]
    return OverfitResult(
        k=k, steps=len(records), tau=decoded.tau, accepted=decoded.accepted, lossless=decoded.tokens == reply,
        losses=[r["loss"] for r in records], full_acc=[last[f"full_acc_{i}"] for i in range(k)],
        reply_tokens=len(reply), seconds=time.perf_counter() - t0, threshold=threshold, data_dir=str(data))


def plot_overfit(result: OverfitResult) -> Figure:
    """Loss per step, and draft tokens accepted per decode round against the ``k`` possible."""
    fig = Figure(figsize=(9, 3))
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(range(1, len(result.losses) + 1), result.losses)
    ax1.set_yscale("log")
    ax1.set(xlabel="step", ylabel="loss (log)", title="training on one conversation")
    ax2.bar(range(1, len(result.accepted) + 1), result.accepted, color="tab:green")
    ax2.axhline(result.k, color="grey", ls="--", lw=1, label=f"k = {result.k}")
    ax2.set(xlabel="decode round", ylabel="draft tokens accepted", ylim=(0, result.k + 0.5),
            title=f"decode loop on that conversation: τ = {result.tau:.2f}")
    ax2.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
