"""Stage 04 — training data from the verifier in speculators' on-disk format (notebook 04).

``conversations``  ShareGPT / JSONL conversations, chat template and assistant loss mask
``layouts``        document lengths for notebook 03's masks: ShareGPT conversations through the chat template, packed
``generate``       batched greedy decoding: many replies per forward, rows stopping on their own
``regenerate``     self-distillation: the verifier writes the replies
``hidden_states``  verifier hidden states as vLLM hands them to speculators, one file per sample
``dataset``        ``build_dataset``: conversations -> a resumable speculators data directory
``manifest``       the directory's verifier identity, aux layers and settings
``vocab``          token frequencies, the d2t / t2d draft-vocab mapping, ``build_for_data`` (the draft with it)
``targets``        the pre-norm proof (``verify_targets``)
``health``         is a data directory usable: every hidden-state file checked, each bad one named
``loader``         reading a data directory: packed batches, held-out prompts
``loss_mask_plot`` the loss mask drawn over the text of a conversation or a packed batch
``plots``          loss mask over text, hidden-state norms, vocab coverage
"""
