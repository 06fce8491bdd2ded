"""Why is my τ low? From a draft folder + a data directory (or prompts): acceptance per draft position on the
verifier's own continuations, the untrained baseline, the draft's agreement with the verifier on the dataset's text
against on the verifier's continuations, served k against the trained TTT steps, and τ past the length the draft was
trained at against τ within it (:mod:`eagle3kit.doctor.tau.context`), as a short verdict that ends with what that
acceptance buys when served (:mod:`eagle3kit.plan.serving_speed`: vLLM on one GPU, batch 1).

``why_low_tau(draft_dir, verifier=None, data_dir=None, prompts=None)`` -> :class:`TauReport` (``.table()``,
``.verdict``, and the folder's ``.findings`` from the same pass: one load, one measurement); the CLI:
``eagle3kit doctor --draft DIR --why-tau [--data DIR] [--k N]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd
import torch

from eagle3kit.data.conversations import prompt_turns, turns_of
from eagle3kit.doctor.checks.draft_folder import examine_draft_folder
from eagle3kit.doctor.checks.draft_loader import sliding_window
from eagle3kit.doctor.checks.folder import trained_steps
from eagle3kit.doctor.checks.trained import Agreement
from eagle3kit.doctor.findings import Finding
from eagle3kit.doctor.tau.context import context_fall
from eagle3kit.draft.config import draft_ttt_steps
from eagle3kit.evaluate import acceptance as ev
from eagle3kit.evaluate.context_curve import Fall
from eagle3kit.plan import serving_speed
from eagle3kit.verifier import Verifier, load_tokenizer

SPEED_GPU = "H100-80GB"  # where the verdict's speed line serves the draft (eagle3kit plan --gpu for another)
SHIFT = 0.15  # agreement on the dataset's text this much above agreement on the verifier's own text: a shift
VERIFIER_LIKE = 0.5  # the verifier predicts at least this share of a dataset's reply tokens when it wrote them
BENCH_PROMPTS = 16  # --why-tau --bench: prompts of the named set measured (two a category on MT-bench)
NOT_MEASURED = ("τ was not measured: the folder's errors above (its config, shapes, layout, vocabulary, or the "
                "draft or verifier not loading) would make the measurement mislead; fix them first.")


@dataclass
class TextAgreement:
    """On the dataset's replies (teacher-forced): how often the draft's first token is the verifier's next token,
    how often the verifier's next token is the dataset's, over ``tokens`` reply tokens."""

    draft_vs_verifier: float
    verifier_vs_text: float
    tokens: int


@dataclass
class TauReport:
    k: int
    trained_steps: int | None
    agreement: Agreement | None  # the draft and its untrained twin on the verifier's greedy continuations
    text: TextAgreement | None  # on the dataset's replies (None without a data directory)
    verdict: list[str] = field(default_factory=list)
    speed: serving_speed.SpeedPlan | None = None  # this acceptance served by vLLM on one SPEED_GPU at batch 1
    findings: list[Finding] = field(default_factory=list)  # the folder's, from the same pass (examine_draft_folder)
    bench: str | None = None  # the named prompt set measured on (None: held-out or built-in prompts)
    context: Fall | None = None  # τ within the training length against τ past it (None: not measurable)

    def category_table(self) -> pd.DataFrame:
        """With a named set: the draft's τ per category (mean over prompts, 95 % interval) from the same
        measurement."""
        if self.agreement is None or not self.agreement.prompts:
            return pd.DataFrame()
        from eagle3kit.evaluate import scores

        records = scores.from_simulation(self.agreement.prompts, self.agreement.parts)
        return scores.display_table(scores.score_table({"draft": records})).reset_index()

    def table(self) -> pd.DataFrame:
        """τ and the acceptance rate per draft position (given the earlier ones accepted), draft and untrained."""
        if self.agreement is None:
            return pd.DataFrame()
        return ev.summary_table({"draft": self.agreement.draft, "untrained draft": self.agreement.untrained})


def text_agreement(verifier_model, tokenizer, draft, conversations, n: int, max_tokens: int) -> TextAgreement:
    """Teacher-forced on the first reply of ``n`` conversations (prompt with the chat template + the reply text)."""
    same = right = total = 0
    for conversation in conversations[:n]:
        turns, prompt = turns_of(conversation), prompt_turns(conversation)
        reply = next((t["content"] for t in turns[len(prompt or []):] if t["role"] == "assistant"), None)
        if not prompt or not reply:
            continue
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"][0].tolist()
        start = len(ids)
        ids += tokenizer(reply, add_special_tokens=False)["input_ids"][:max_tokens]
        seq = torch.tensor([ids])
        with torch.no_grad():
            nxt = verifier_model(input_ids=seq).logits[0].argmax(-1)  # nxt[j] predicts token j + 1
        guess = ev.teacher_forced_draft_tokens(verifier_model, draft, seq, 1)[0]  # guess[j] predicts token j + 2
        for t in range(max(start, 2), len(ids)):
            same += int(guess[t - 2]) == int(nxt[t - 1])
            right += int(nxt[t - 1]) == ids[t]
            total += 1
    return TextAgreement(same / total if total else float("nan"), right / total if total else float("nan"), total)


def verdict(k: int, steps: int | None, agreement: Agreement, text: TextAgreement | None) -> list[str]:
    """The short verdict: each line one reason τ is low (or why it is what it is), with what to do."""
    first = Agreement.first(agreement.draft)
    out = [f"τ {agreement.draft.tau:.2f} of a possible {k + 1} (untrained draft: {agreement.untrained.tau:.2f}); "
           f"the first draft token is accepted {first:.0%} of the time; held-out loss {agreement.draft_loss:.3g} "
           f"(untrained: {agreement.untrained_loss:.3g})."]
    if not agreement.trained:
        out.append("The draft predicts the verifier no better than an untrained draft: its weights are an "
                   "initialisation or were lost on export (run `eagle3kit doctor --draft DIR`).")
    if steps is not None and k > steps:
        out.append(f"Served k={k} but trained for {steps} TTT steps: positions {steps + 1}..{k} were never trained; "
                   f"serve k <= {steps} or train with --ttt-steps {k}.")
    if text is not None and text.draft_vs_verifier - first > SHIFT and text.verifier_vs_text < VERIFIER_LIKE:
        out.append(f"Trained on text the verifier would not write: the verifier predicts only "
                   f"{text.verifier_vs_text:.0%} of the dataset's reply tokens; on that text the draft matches the "
                   f"verifier {text.draft_vs_verifier:.0%} of the time, on the verifier's own replies {first:.0%}. "
                   "Regenerate the replies with the verifier (`eagle3kit regenerate`), then rebuild the data.")
    if len(out) == 1:
        out.append("Nothing is miswired: τ is what this much training gives; more data and steps raise it.")
    return out


def speed_line(plan: serving_speed.SpeedPlan) -> str:
    """What the measured acceptance buys when served, in one sentence."""
    return (f"Served by vLLM on one {plan.gpu} at batch {plan.batch} with k={plan.k}, τ {plan.tau:.2f} would decode "
            f"at {plan.speedup:.2f}x plain speed (predicted; the draft pays above τ {plan.break_even:.2f}, at most "
            f"{plan.best:.2f}x): `eagle3kit plan --verifier ... --tau {plan.tau:.2f}` for another GPU or batch.")


def lever_lines(tau: float, break_even: float) -> list[str]:
    """Below the τ at which the draft pays: the lever the recipe lab measured strongest at both its budgets (its
    summary ships with eagle3kit), with its effect, and what more minutes bought; nothing when the draft pays."""
    from eagle3kit.evaluate.recipes import frontier_line, read_lab, strongest_lever

    if tau >= break_even:
        return []
    lab = read_lab()
    line = strongest_lever(lab)
    lines = [f"τ {tau:.2f} is below the {break_even:.2f} at which this draft pays. {line}"] if line else []
    return lines + [scale] if (scale := frontier_line(lab.frontier, beside=lab.beside)) else lines


def why_low_tau(draft_dir: str | os.PathLike, verifier: str | os.PathLike | None = None,
                data_dir: str | os.PathLike | None = None, prompts: list | None = None, k: int | None = None,
                n_prompts: int | None = None, max_new_tokens: int = 48,
                before_load: Callable[[Verifier], None] | None = None, bench: str | None = None) -> TauReport:
    """Check the draft folder and measure why its τ is what it is, in one pass: the folder's findings (their
    "trained" judged from this one measurement) and the verdict. ``prompts``: conversations or strings (default: the
    data directory's held-out conversations, else built-in questions); ``k``: the served k (default: the config's);
    ``before_load``: as :func:`~eagle3kit.doctor.checks.draft_folder.examine_draft_folder`'s. A folder whose errors
    forbid
    the measurement gives a report without one (``agreement`` None), its verdict saying so. ``bench``: measure on
    that named set (:mod:`eagle3kit.evaluate.benchmarks`), ``n_prompts`` of it (default :data:`BENCH_PROMPTS`, the
    categories in turn, each prompt whole) instead of the held-out prompts (default 8)."""
    if bench is not None:
        from eagle3kit.evaluate.benchmarks import load_set

        prompts = load_set(bench, n_prompts or BENCH_PROMPTS)
    n_prompts = n_prompts or (BENCH_PROMPTS if bench else 8)
    c = examine_draft_folder(draft_dir, verifier, data_dir, k, True, n_prompts, max_new_tokens, measure_k=None,
                             prompts=prompts, before_load=before_load)
    steps = trained_steps(c.folder)
    if c.agreement is None:
        return TauReport(k or 0, steps, None, None, [NOT_MEASURED], findings=c.findings)
    k = k or draft_ttt_steps(c.config)
    v, config, data = c.verifier, c.config, c.data
    text = (text_agreement(c.verifier_model, load_tokenizer(v), c.draft, data.conversations, n_prompts,
                           max_new_tokens) if data is not None and data.conversations else None)
    plan = serving_speed.predict(v.path or v.name, SPEED_GPU, 1, k,
                           acceptance=c.agreement.draft.rates()["cumulative"].fillna(0.0).tolist(),
                           draft_vocab_size=config.draft_vocab_size,
                           num_layers=config.transformer_layer_config.num_hidden_layers)
    lines = verdict(k, steps, c.agreement, text) + [speed_line(plan)] + lever_lines(plan.tau, plan.break_even)
    if bench is not None:
        lines[0] = f"On {bench} ({len(c.agreement.prompts)} prompts, whole; per category above): " + lines[0]
    context = context_fall(c.folder.path, c.draft, c.verifier_model, load_tokenizer(v), k,
                           data_dir if data is not None and data.aux_source == "manifest" else None)
    if context is not None:
        lines.append(context.line(sliding_window(config)) or context.describe())
    return TauReport(k, steps, c.agreement, text, lines, plan, c.findings, bench, context)
