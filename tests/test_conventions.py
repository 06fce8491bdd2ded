"""τ conventions: the same acceptance stated as eagle3kit/vLLM, speculators and SpecForge count it."""

from __future__ import annotations

import pytest
import torch

from eagle3kit.evaluate.acceptance import Acceptance, acceptance_of
from eagle3kit.evaluate.conventions import (
    specforge_simulated_acc_len,
    speculators_eal,
    table,
    tau_from_conditional,
)


def test_specforge_counts_without_the_bonus_token():
    # SpecForge's own example: acc = [0.8, 0.4] -> simulated_acc_len 0.8 + 0.8 * 0.4 = 1.12
    assert specforge_simulated_acc_len([0.8, 0.4]) == pytest.approx(1.12)
    assert tau_from_conditional([0.8, 0.4]) == pytest.approx(2.12)
    assert tau_from_conditional([]) == 1.0 and specforge_simulated_acc_len([]) == 0.0


def test_speculators_eal_is_tau_with_the_bonus():
    # rounds accepting 0, 3 and 1 of k = 3 draft tokens commit 1, 4 and 2 tokens
    assert speculators_eal([0, 3, 1], 3) == pytest.approx(7 / 3)


def test_the_table_converts_one_measurement_consistently():
    sequence = list(range(40))
    draft = torch.tensor([[t + 2 if t % 3 else -1 for t in range(39)],  # first draft token right 2/3 of the time
                          [t + 3 if t % 2 else -1 for t in range(39)],
                          [t + 4 for t in range(39)]])
    acc: Acceptance = acceptance_of(draft, sequence, prompt_len=4, k=3)
    whole = table(acc, full_acc=[0.5, 0.25, 0.1]).set_index("convention")
    frame = whole["value"]
    # each row also stated as eagle3kit's τ (the bonus token added where a convention leaves it out), on what it counted
    assert (whole["as eagle3kit's τ"] - whole["value"]).round(6).tolist() == [0, 0, 0, 0, 1, 1]
    assert whole["counted on"].iloc[-1] == "last training batch (teacher-forced)"
    tau = acc.tau_all_starts
    assert 1.0 < tau < 4.0
    # the first row is the decode walk's τ (vLLM's rounds), apart from every start position's by the walk alone
    assert frame.iloc[0] == pytest.approx(acc.tau, abs=5e-4)
    assert frame.index[0].startswith("eagle3kit τ along the decode walk")
    assert frame["eagle3kit τ over every start position (EAGLE papers)"] == pytest.approx(tau, abs=5e-4)
    assert frame["eagle3kit τ from per-position rates"] == pytest.approx(tau, abs=5e-4)
    assert frame["speculators eal"] == pytest.approx(tau, abs=5e-4)
    assert frame["SpecForge simulated_acc_len"] == pytest.approx(tau - 1, abs=5e-4)
    assert frame["speculators EAGLE-3 Σ full_acc_i (training batch)"] == pytest.approx(0.85)
