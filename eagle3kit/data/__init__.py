"""Stage 04 — training data from the verifier in speculators' on-disk format (notebook 04).

``conversations``  ShareGPT / JSONL conversations, chat template and assistant loss mask
``loops``          a reply that loops on one sentence (greedy decoding's rut), told by its repeated word 4-grams
``layouts``        document lengths for notebook 03's masks: ShareGPT conversations through the chat template, packed
``generate``       batched greedy decoding: many replies per forward, rows stopping on their own
``regenerate``     self-distillation: the verifier writes the replies
``regenerate_vllm`` the same replies written by vLLM's CPU build, offline or served (+ speculators'
                   regenerate-responses), as speculators' rows
``regenerate_worker`` the offline route's standalone script (the vLLM environment's python: vllm and stdlib only)
``hidden_states``  verifier hidden states as vLLM hands them to speculators, one file per sample
``dataset``        ``build_dataset``: conversations -> a resumable speculators data directory
``manifest``       ``eagle3kit_data.json``: the verifier's identity, aux layers, the request, counts
``directory``      ``DataDir``: one data directory, its manifest read once (format, paths, verifier, compatibility);
                   one rule for a directory without one (speculators' pipeline): read from files, told the rest
``draft_spec``     ``spec_for_data``: the draft's verifier, aux layers and vocab as a data directory says (inferred
                   here once, for train, launch and the session)
``fill``           hidden states for a dataset ``speculators prepare-data`` made (no manifest, as speculators leaves it)
``health``         every hidden-state file checked, each bad one named with the command that remakes it
``loader``         packed batches as ``speculators train`` makes them, held-out prompts
``vocab``          token frequencies, the d2t / t2d draft-vocab mapping, ``build_for_data`` (the draft with it)
``targets``        the pre-norm proof (``verify_targets``)
``breakages``      reported pipeline bugs replayed on a real directory (the broken artifacts of tests and benches)
``supervision``    what a directory supervises, measured: loss mask vs the chat template, aux slices, vocab mapping
``agreement``      eagle3kit's loss mask against speculators' prepare-data mask, token for token
``plots``          hidden-state norms, vocab coverage, a packed batch
``loss_mask_plot`` the loss mask drawn over the text of a conversation or a packed batch
"""
