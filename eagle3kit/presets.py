"""Named parameter presets for the notebooks: ``ci`` (small budgets, real SmolLM2), ``demo`` (`make demo`) and ``full``
(the demo with the recipe lab's point whose draft pays on an H100; not part of `make test`).

A notebook parameter named like a field of :class:`DraftSpec` or :class:`TrainSettings` (``verifier``, ``ttt_steps``,
``lr``, ``total_seq_len`` ...) starts from that field's default (:func:`typed_defaults`); ``NOTEBOOKS[nn][preset]``
holds only what a preset sets otherwise. The runner passes a notebook only the names its ``parameters`` cell declares,
plus ``workdir`` (the run's shared folder). Notebooks 05 and 06 train on notebook 04's data; without it they share
one small set whose size has one home, :data:`eagle3kit.notebook.SMALL_DATA`.

``demo`` and ``full`` fit the CPU they run on: a CPU without native bf16 (AVX2 only) keeps hidden states and training
in float32 and takes about twice as long a step, so there each reads its values under ``"<preset>@float32"`` over its
own (the lab's shorter points); the minutes and τ each reaches on either kind of CPU are in docs/demo.md.
"""

from __future__ import annotations

import dataclasses

from eagle3kit.errors import UserError

NAMES = ("ci", "demo", "full")
BASED_ON = {"full": "demo"}  # a preset that only changes some values of another: the rest come from it
FLOAT32_CPU = "@float32"  # the suffix of a preset's values for a CPU without native bf16

CI_PACK, FLOAT32_PACK = 384, 1024  # tokens a packed batch where not TrainSettings' default: 04 shows 05's packs

NOTEBOOKS: dict[str, dict[str, dict[str, object]]] = {
    "01": {
        "ci": {"forward_tokens": 128},
        "demo": {"forward_tokens": 256},
    },
    "02": {
        "ci": {"seq_len": 128, "probe_timeout": 120, "repeats": 2, "draft_vocab_size": 4096},
        "demo": {"seq_len": 256, "probe_timeout": 300, "repeats": 2, "draft_vocab_size": 2048},
    },
    "03": {
        "ci": {"n_documents": 24, "total_seq_len": 3072, "sliding_window": 256,
               "long_seq_len": 4096, "check_seq_len": 1024},
        "demo": {"n_documents": 64, "total_seq_len": 8192, "sliding_window": 1024,
                 "long_seq_len": 16384, "check_seq_len": 2048},
    },
    "04": {
        "ci": {"n_conversations": 12, "seq_length": 384, "draft_vocab_size": 4096, "held_out": 4, "batch_size": 4,
               "dtype": "float32", "regenerate_tokens": 16, "regenerate_engine": "transformers",
               "total_seq_len": CI_PACK},
        # demo: the recipe lab's 5-minute point with twice its replies at fewer epochs (`pack-512` + `more-data`,
        # bench/recipe.py; its context's frontier_presets), which beat the frontier's own 5-minute point on both prompt
        # sets (3x the replies did not, at 4): the verifier writes 512 replies of <= 96 tokens to user turns cut to 128
        # tokens (vLLM's CPU build where `make vllm` installed it), a 2048-token draft vocab, hidden states in bf16
        # ("native"). full:
        # on a CPU with native bf16, the lab's 15-minute point with twice its replies at fewer epochs (`pack-512` +
        # `more-data`: 1536 replies, 3737 steps; its context's frontier_presets), which beat the frontier's own
        # 15-minute point on both prompt sets; scored on 64 held-out prompts, not 16 (a steadier τ). Where the CPU has
        # no native bf16: the lab's `less-data` row at 5 minutes for the demo, `pack-512` for full. What each costs and
        # reaches: docs/demo.md.
        "demo": {"n_conversations": 512, "seq_length": 1024, "draft_vocab_size": 2048, "held_out": 16,
                 "batch_size": 4, "dtype": "native", "regenerate_tokens": 96, "regenerate_prompt_tokens": 128},
        "full": {"n_conversations": 1536, "held_out": 64},
        "demo@float32": {"n_conversations": 128, "total_seq_len": FLOAT32_PACK},
        "full@float32": {"n_conversations": 256, "total_seq_len": 512},
    },
    "05": {
        "ci": {"total_seq_len": CI_PACK, "max_steps": 40, "warm_start_layer": -1,
               "first_steps": 2, "run_steps": 3, "n_gpus": 8, "overfit_steps": 40, "overfit_reply_tokens": 64,
               "rehearse_ranks": 1, "rehearse_steps": 3, "tau_every": 2},
        # demo training budget, shared with 06 (which resumes this session): 3 + 570 steps here + 574 in 06 = the
        # steps of the lab's 5-minute point with twice the replies, 512 tokens a step, bf16 autocast ("native"), from
        # the verifier's last layer (eagle3kit.draft.warm_start), at TrainSettings' lr; live τ every 150 steps (a
        # measurement costs about ten steps). full: the steps of the lab's 15-minute point with twice the replies.
        # Without native bf16: `less-data`'s 241 steps of 1024 tokens for the demo, `pack-512`'s for full.
        "demo": {"max_steps": 1147, "warm_start_layer": -1, "hidden_states_dtype": "native",
                 "first_steps": 3, "run_steps": 570, "n_gpus": 8, "overfit_steps": 40, "overfit_reply_tokens": 64,
                 "rehearse_ranks": 2, "rehearse_steps": 3, "tau_every": 150},
        "full": {"max_steps": 3737, "run_steps": 1865},
        "demo@float32": {"total_seq_len": FLOAT32_PACK, "max_steps": 241, "run_steps": 118},
        "full@float32": {"total_seq_len": 512, "max_steps": 1306, "run_steps": 650},
    },
    "06": {
        "ci": {"resume_from_05": True, "train_steps": 3, "n_prompts": 2, "max_new_tokens": 24,
               "max_prompt_tokens": 64, "k": 0, "vllm_check": False, "n_bench_prompts": 8, "tau_every": 2},
        # demo: `make demo` installs vLLM's CPU build first (`make vllm`), so the export is checked in real vLLM, on
        # the 16 held-out prompts and MT-bench's 80 first turns (vLLM's per-request counters; simulating the 80 too is
        # left to `eagle3kit evaluate --bench mt-bench`, its cost in docs/demo.md); the decode loop, one prompt at a
        # time, proves the output unchanged on one prompt (vLLM on all of them), the untrained draft's left out.
        "demo": {"resume_from_05": True, "train_steps": 574, "n_prompts": 16, "n_decode_prompts": 1,
                 "decode_untrained": False,
                 "max_new_tokens": 64, "bench_simulated": False,
                 "max_prompt_tokens": 128, "k": 0, "vllm_check": True, "tau_every": 150},
        "full": {"train_steps": 1869, "n_prompts": 64},
        "demo@float32": {"train_steps": 120},
        "full@float32": {"train_steps": 653},
    },
    "07": {
        # reuses 06's draft and replies: only the views it shows, the class counts and the context curve cost time
        "ci": {"n_class_prompts": 2, "context_per_bucket": 1, "context_longest": 1024, "context_new_tokens": 16,
               "fallback_steps": 3, "fallback_prompts": 2, "max_new_tokens": 16},
        # demo: 8 prompts of each set counted by class; 3 long-context prompts at 256 and 1k tokens, past the draft's
        # training length (its longest document) and within its 2048-token window; 2k would cost the verifier twice
        # these prompts' tokens again, past 07's budget (docs/scoring.md holds the curve to 8k, bench/long_context.py)
        "demo": {"n_class_prompts": 8, "context_per_bucket": 3, "context_longest": 1024},
    },
}


def typed_defaults() -> dict[str, object]:
    """The defaults of the draft and training fields a notebook parameter can take (``None`` and lists left out:
    notebook parameters are strings and numbers). Imported here: ``--help`` reads :data:`NAMES` without torch."""
    from eagle3kit.draft.config import DraftSpec
    from eagle3kit.train.session import TrainSettings

    fields = [f for cls in (DraftSpec, TrainSettings) for f in dataclasses.fields(cls)]
    return {f.name: f.default for f in fields if isinstance(f.default, (str, int, float)) and f.default is not None}


def cpu_suffix() -> str:
    """``""`` on a CPU with native bf16 (or a GPU machine), :data:`FLOAT32_CPU` on one without it."""
    from eagle3kit.device import native_bf16

    return "" if native_bf16() else FLOAT32_CPU


def parameters(preset: str, notebook: str, suffix: str | None = None) -> dict[str, object]:
    """What the preset sets for notebook ``nn`` beyond :func:`typed_defaults`, on this CPU (``suffix`` None:
    :func:`cpu_suffix`; ``""`` or :data:`FLOAT32_CPU` to ask for one kind)."""
    if preset not in NAMES:
        raise UserError(f"Unknown preset {preset!r}; use one of {', '.join(NAMES)} "
                        f"(e.g. eagle3kit run-notebooks --preset {NAMES[0]}).")
    suffix = cpu_suffix() if suffix is None else suffix
    table = NOTEBOOKS.get(notebook, {})
    own = {**table.get(preset, {}), **(table.get(preset + suffix, {}) if suffix else {})}
    return {**parameters(BASED_ON[preset], notebook, suffix), **own} if preset in BASED_ON else own
