"""Stage 04 — training data from the verifier in speculators' on-disk format (notebook 04).

``conversations``  ShareGPT / JSONL conversations, chat template and assistant loss mask
``regenerate``     self-distillation: the verifier writes the replies
``hidden_states``  verifier hidden states as vLLM hands them to speculators, one file per sample
``dataset``        ``build_dataset``: conversations -> a resumable speculators data directory
``manifest``       the directory's verifier identity, aux layers and settings
``vocab``          token frequencies and the d2t / t2d draft-vocab mapping
``targets``        the pre-norm proof (``verify_targets``)
``plots``          loss mask over text, hidden-state norms, vocab coverage
"""
