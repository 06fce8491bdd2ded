"""Stage 02 — the doctor: each integration mistake, why, and its fix; the crash-isolated probe (notebook 02).

``checks``            ``check(subject)`` -> findings (every check guarded); ``check_data_dir``; ``trainer_findings``
``attention_checks``  mask vs backend, flex on CPU, BlockMask length and memory, fused loss; ``SET_ATTN``, ``CONSUMES``
``model_checks``      loaded weights, shapes and aux ids against the verifier, vocab mapping, batch, vLLM head sizes
``draft_folder``      ``check_draft_folder(DIR)``: any speculators-format draft folder (``doctor --draft``);
                      ``examine_draft_folder`` keeps what it loaded and measured for the tau verdict
``draft_loader``      a draft folder read from disk: found, its config and tensors, its verifier, the model loaded
``data_facts``        what a draft folder's check needs of a data directory (``read_data_dir`` -> ``DataFacts``)
``ram``               the verifier's float32 RAM, stated before the doctor loads it, refused when short
``folder_checks``     a folder's method fields, tensors, saved vocab mapping, embedding, k vs TTT steps, context, data
``trained``           trained or an initialisation, by measurement against untrained drafts of the same shape
``versions``          version traps decided from version numbers (fused loss under compile, transformers floor)
``low_tau``           ``why_low_tau(DIR)``: why a draft's tau is low, as a short verdict (``doctor --draft --why-tau``)
``context_tau``       ``context_fall``: does tau fall past the length the draft was trained at (``--why-tau``)
``data_checks``       what a data directory supervises: loss mask, template, aux slices, vocab (``check_data_dir``)
``rehearsal_checks``  a rehearsal of speculators' trainer: its YAML and save path before, its records and log after
``findings``          :class:`Finding` and its table / terminal renderings
``facts``             what a draft config, build or model says about attention (set value, resolution, mask kind)
``probe``             the measured backend matrix, each cell in a subprocess
``probe_worker``      what runs in that subprocess: one cell built, run and timed
``probe_cache``       cells measured once, read back when asked again with the same setting (the key, honestly)
``attention_replay``  the seed's attention failure replayed step by step, the doctor's prediction beside each (02)
``live``              catalogue rows broken live on the seed replay's draft: forgotten verifier weights, an odd length
``verdict``           what the matrix concludes: ``recommend``, ``recommendations``, ``probe_row``, ``settings_table``,
                      ``speed_ratios``, ``recommendation_lines``
``plots``             ``plot_timings(matrix)`` -> Figure
``catalogue``         docs/failures.md, the failure catalogue: ``catalogue_rows``, ``catalogue_frame``, ``demonstrate``
"""
