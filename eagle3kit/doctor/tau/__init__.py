"""The τ verdict: why a trained draft's acceptance length is what it is, from one pass over its folder.

``verdict``  ``why_low_tau(DIR)``: acceptance per position, the untrained baseline, the data's text against the
             verifier's own, k vs TTT steps, as a short verdict (``doctor --draft --why-tau``)
``context``  ``context_fall``: does τ fall past the length the draft was trained at (``--why-tau``)
"""
