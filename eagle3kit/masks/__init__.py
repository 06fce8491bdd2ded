"""Stage 03 — the EAGLE-3 BlockMask at token, block and TTT-step level (notebook 03).

``eagle_mask``  ``build_mask(lengths, total_seq_len, ttt_steps)`` -> :class:`EagleMask` (speculators' mask functions)
``pooling``     counting attended pairs tile by tile (block tables decoded, hits pooled)
``stats``       statistics per TTT step, dense-mask equivalence across backends
``plots``       token heatmap, block map, statistics: functions that return a Figure
``explorer``    the interactive widget over those plot functions
"""
