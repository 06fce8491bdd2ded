"""Stage 06 — acceptance length, export, and serving in vLLM (notebook 06).

``acceptance``  tau simulated (teacher-forced) and by the decode loop, side by side
``decode``      a short, lossless chain speculative decode loop (HF verifier + speculators draft)
``defaults``    the evaluation defaults ``evaluate`` and ``vllm-check`` share (prompts, lengths, k)
``benchmarks``  the named prompt sets (MT-bench, HumanEval, a math set, held-out), read offline, rendered
``scores``      τ per benchmark category: per-prompt records, mean with a bootstrap interval, pooled, plot, JSON
``fates``       every reply token's fate in the simulated decode walk (accepted at a depth, corrected, bonus)
``token_classes`` where the draft fails, counted by token class (word starts, numbers, punctuation, code, vocab)
``vocab_cap``   the draft vocab's cap on τ counted as each notebook counts it, and the lab's vocab rows on its size
``token_page``  the fates as HTML: a prompt's reply marked token by token, the class summary, a self-contained page
``token_viewer`` the prompt picker widget over the token view, ``SetViews`` (views computed on demand; notebook 07)
``scored``      what a run scored, per set (prompts, ids, continuations, records, vLLM's counts): 06 writes it, 07 reads
``verifier_states`` the verifier's hidden states of what a run scored, kept beside it (06 writes them, 07 reads)
``long_context`` the ``long-context`` prompt set (held-out ShareGPT histories by context length), replies + states
``context_curve`` τ against context length: per bucket with intervals, the curve, the fall past the training length
``summary``     what notebook 06 reports: a draft on a named set beside its held-out prompts, stability, summary
``recipes``     what the recipe lab (bench/recipe.py) measured: τ per CPU minute per lever, the frontier, its plot
``conventions`` τ as eagle3kit, speculators and SpecForge count it, with the conversions
``round_speed`` from τ to speed by a speculation round's cost: the speedup arithmetic, measured step costs, tokens/s
                side by side only when alike
``export``      reload an exported draft with speculators, the vLLM serve command
``vllm``        the draft in real vLLM (its own environment, subprocesses only): :mod:`eagle3kit.evaluate.vllm`
"""
