"""The doctor's checks: each a function subject -> findings, run guarded (:class:`eagle3kit.doctor.findings.Guard`).

``run``           ``check(subject)`` -> findings for a config, build or model; ``check_data_dir``; ``trainer_findings``
``facts``         what a draft config, build or model says about attention (set value, resolution, mask kind, measured)
``attention``     mask vs backend, flex on CPU, BlockMask length and memory, fused loss; ``SET_ATTN``, ``CONSUMES``
``model``         loaded weights, shapes and aux ids against the verifier, vocab mapping, batch, vLLM head sizes
``versions``      version traps decided from version numbers (fused loss under compile, transformers floor)
``data``          what a data directory supervises: loss mask, template, aux slices, vocab (``supervision_findings``)
``draft_folder``  ``check_draft_folder(DIR)``: any speculators-format draft folder (``doctor --draft``), as a list of
                  checks; ``examine_draft_folder`` keeps what it loaded and measured for the τ verdict
``draft_loader``  a draft folder read from disk: found, its config and tensors, its verifier, the model loaded
``folder``        a folder's method fields, tensors, saved vocab mapping, embedding, k vs TTT steps, context, data
``data_facts``    what a draft folder's check needs of a data directory (``read_data_dir`` -> ``DataFacts``)
``trained``       trained or an initialisation, by measurement against untrained drafts of the same shape
``ram``           the verifier's float32 RAM, stated before the doctor loads it, refused when short
``rehearsal``     a rehearsal of speculators' trainer: its YAML and save path before, its records and log after
"""
