"""Acceptance length τ as each tool counts it, side by side, with the conversions.

A speculative round proposes ``k`` draft tokens; the verifier keeps the longest agreeing prefix (``a`` tokens) and
adds one token of its own, the *bonus*. Per draft position ``i`` let ``c_i`` be the conditional acceptance rate
(token ``i`` accepted given tokens ``< i`` were) and ``p_i = c_1 ... c_i`` the cumulative one. Then

* eagle3kit, the EAGLE papers, vLLM ("mean acceptance length"): τ = 1 + E[a] = 1 + Σ p_i  (with the bonus);
* speculators 0.9.0 ``eal`` (``speculators.models.metrics.compute_accepted_length_counts``, its DFlash/DSpark
  metric): the leading run of correct slots + 1, i.e. τ (with the bonus: "vLLM's convention");
* speculators' EAGLE-3 training metrics ``full_acc_i`` are the cumulative rates p_i, so Σ full_acc_i = τ − 1;
* SpecForge ``simulated_acc_len`` = c_1 + c_1 c_2 + ... = Σ p_i = τ − 1 (without the bonus).

So a SpecForge number of 2.5 is τ = 3.5 here and in vLLM.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from speculators.models.metrics import compute_accepted_length_counts

from eagle3kit.evaluate.acceptance import Acceptance

# How τ is labelled wherever eagle3kit prints or draws it (the bonus token counted, as above).
TAU_LABEL = "τ (bonus token counted)"
TAU_CONVENTION = ("τ = accepted draft tokens + 1 token of the verifier's own per round (its correction of the first "
                  "rejected draft token, or the bonus token after all k were accepted), as vLLM's mean acceptance "
                  "length and the EAGLE papers count it; SpecForge's simulated acceptance length leaves that token "
                  "out (= τ − 1)")


def tau_from_conditional(conditional: list[float]) -> float:
    """eagle3kit's τ (with the bonus token) from per-position conditional acceptance rates."""
    return 1.0 + float(np.cumprod(conditional).sum()) if len(conditional) else 1.0


def specforge_simulated_acc_len(conditional: list[float]) -> float:
    """SpecForge's ``simulated_acc_len``: acc_0 + acc_0·acc_1 + ... (no bonus token) = τ − 1."""
    return float(np.cumprod(conditional).sum()) if len(conditional) else 0.0


def speculators_eal(accepted: list[int], k: int) -> float:
    """speculators' expected accepted length, computed by its own ``compute_accepted_length_counts`` (with bonus).

    ``accepted``: draft tokens accepted per round (0..k); each round is one block of ``k`` draft slots.
    """
    runs = torch.tensor(accepted, dtype=torch.long)[:, None]
    correct = torch.arange(k)[None, :] < runs
    total, blocks = compute_accepted_length_counts(correct, torch.ones_like(correct))
    return float(total / blocks)


def table(acc: Acceptance, full_acc: list[float] | None = None) -> pd.DataFrame:
    """The same acceptance measured once, stated in each convention, with the conversion to eagle3kit's τ.

    ``acc``: simulated acceptance (:func:`eagle3kit.evaluate.acceptance.simulate`). Its first row is τ along the
    decode walk (rounds as vLLM runs them: what its counters measure); the rest count every start position, which
    also starts rounds where no walk would, so they differ from the first by that alone.
    ``full_acc``: speculators' training metrics ``full_acc_i`` of a step, when given.
    """
    conditional = acc.rates()["conditional"].fillna(0.0).tolist()
    walk, starts, batch = "held-out, decode walk", "held-out, every start", "last training batch (teacher-forced)"
    rows = [
        ("eagle3kit τ along the decode walk (vLLM's rounds)", "tokens committed / rounds", acc.tau, True, walk),
        ("eagle3kit τ over every start position (EAGLE papers)", "1 + mean accepted draft tokens",
         acc.tau_all_starts, True, starts),
        ("eagle3kit τ from per-position rates", "1 + Σ_i c_1…c_i", tau_from_conditional(conditional), True, starts),
        ("speculators eal", "leading run of correct slots + 1 (compute_accepted_length_counts)",
         speculators_eal(acc.accept_all, acc.k) if acc.accept_all else float("nan"), True, starts),
        ("SpecForge simulated_acc_len", "Σ_i c_1…c_i", specforge_simulated_acc_len(conditional), False, starts),
    ]
    if full_acc is not None:
        rows.append(("speculators EAGLE-3 Σ full_acc_i (training batch)", "Σ_i p_i (cumulative accuracies)",
                     float(sum(full_acc)), False, batch))
    frame = pd.DataFrame(rows, columns=["convention", "definition", "value", "counts the bonus token", "counted on"])
    frame["as eagle3kit's τ"] = frame["value"] + (~frame["counts the bonus token"]).astype(float)  # + the bonus
    return frame.round({"value": 3, "as eagle3kit's τ": 3})
