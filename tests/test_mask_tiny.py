"""Notebook 03's miniature: the sentence is read off speculators' mask, and it changes when the mask does."""

from __future__ import annotations

from matplotlib.figure import Figure

from eagle3kit.masks.tiny import plot_tiny, seen, sees, tiny_mask


def test_query_5_at_step_2_sees_its_document_and_its_own_guesses():
    mask = tiny_mask()
    assert seen(mask, 5, 2) == {0: [3, 4, 5], 1: [5], 2: [5]}
    assert sees(mask).startswith("Query 5 at step 2 sees:\n- block 0: tokens 3, 4, 5 (")
    # numbered as notebook 01 numbers TTT: step s reads the states step s - 1 produced
    assert "- block 2: position 5 only (the key of TTT step 2, made from the hidden state step 1 produced" in sees(mask)
    assert len(sees(mask).splitlines()) == 4  # a head line and a bullet a block
    assert seen(mask, 2, 0) == {0: [0, 1, 2]}  # document 0's last token: nothing of document 1
    fig = plot_tiny(mask)
    assert isinstance(fig, Figure) and len(fig.axes[0].get_xticks()) == 8 * 3


def test_the_sentence_follows_the_layout():
    other = tiny_mask((6, 2))  # query 5 is now the last token of document 0
    assert seen(other, 5, 1) == {0: [0, 1, 2, 3, 4, 5], 1: [5]}
    assert "document 0" in sees(other, 5, 1)
