"""Stage 03 — the EAGLE-3 BlockMask at token, block and TTT-step level (notebook 03).

``eagle_mask``  ``build_mask(lengths, total_seq_len, ttt_steps)`` -> :class:`EagleMask` (speculators' mask functions)
``pooling``     counting attended pairs tile by tile (block tables decoded, hits pooled)
``stats``       statistics per TTT step, dense-mask equivalence across backends (``equivalence``: full and windowed)
``refusals``    bad layouts refused in one sentence (``verdicts``)
``plots``       token heatmap, block map, statistics: functions that return a Figure; regions (``around``, ``corner``)
``explorer``    the interactive widget over those plot functions
``tiny``        the mask in miniature (8 tokens, 2 documents, 3 TTT steps), labelled, and the sentence that reads it
"""
