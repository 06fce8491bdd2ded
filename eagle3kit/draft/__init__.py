"""Stage 01 — the draft config built from a verifier (notebook 01).

``config``      :class:`DraftSpec` (what a user chooses), ``build_config`` -> :class:`DraftBuild`, attention choice
``model``       speculators' ``Eagle3DraftModel`` from a build (``build_model``), ``save_draft``, ``forward_random``
``idea``        the idea in one figure: a speculative-decoding round and what a draft is made of
``explain``     every field explained, parameter counts, memory footprint, the ``auto`` attention choices
``warm_start``  start the draft from a verifier decoder layer
"""
