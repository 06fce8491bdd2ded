"""Published (τ, speed) measurements of EAGLE-3 drafts, with and without the draft in the same setting: the one home
of these figures, which :mod:`eagle3kit.plan.serving_speed` derives its engine overheads from and is checked against.

Each point is data with its source (figures read from the thread or page, not copied text). ``draft_steps`` is ``k``
for chain drafting (vLLM) and ``--speculative-num-steps`` for SGLang's trees; ``verify_tokens`` is ``k + 1`` for a
chain and ``--speculative-num-draft-tokens`` for a tree (tokens the verifier checks per sequence and round).

* vllm-project/vllm issue 20780 (2025-07): Llama-3.1-8B-Instruct with ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``, vLLM V1,
  MT-bench, batch 1, k = 2..7: mean acceptance length and TPOT; plain TPOT 7.07 ms. The issue does not restate the GPU;
  its author's runs of the same script in vllm PR 16937 and PR 17202 are on one H100 (plain 133 tokens/s, TPOT 7.5 ms).
* sgl-project/sglang PR 4247 (2025-03): the same verifier and draft, SGLang with CUDA graphs, one H100, MT-bench
  (80 questions), ``--speculative-num-steps 8``: 378.57 tokens/s at acceptance length 5.39; the tree's top-k and draft
  tokens are not stated there (SGLang's defaults were 4 and 8; the verify cost at batch 1 barely depends on them).
  Plain SGLang on one H100, same benchmark: 158.34 tokens/s (SGLang's speculative-decoding docs, "Performance
  Highlights", which list 373.25 tokens/s with EAGLE-3).
* sgl-project/sglang PR 4716 (2025-03): Llama-3.3-70B-Instruct with ``yuhuili/EAGLE3-LLaMA3.3-Instruct-70B``, 8 x H100
  (TP 8), batch 1 (``--cuda-graph-max-bs 1``), steps 8, top-k 8, 64 draft tokens, MT-bench: 88.61 tokens/s without,
  234.54 with, acceptance length 5.88. (That draft's hidden size differs from the verifier's, the PR says; the plan
  shapes it like speculators' default.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedPoint:
    """One published measurement: the same prompts decoded with and without an EAGLE-3 draft."""

    name: str
    source: str
    verifier: str  # an eagle3kit preset with the verifier's shape
    engine: str  # "vllm" | "sglang"
    gpu: str  # an eagle3kit.plan.gpus name
    tp: int  # GPUs the verifier is split over (tensor parallel)
    batch: int
    draft_steps: int  # k (chain) / num_steps (tree)
    verify_tokens: int  # k + 1 (chain) / num_draft_tokens (tree)
    tau: float  # mean acceptance length, the bonus token counted
    plain_tokens_per_s: float  # per sequence
    draft_tokens_per_s: float
    note: str = ""

    @property
    def speedup(self) -> float:
        return self.draft_tokens_per_s / self.plain_tokens_per_s

    @property
    def plain_step_s(self) -> float:
        return 1.0 / self.plain_tokens_per_s

    @property
    def round_s(self) -> float:
        """One speculative round: τ tokens at the measured rate."""
        return self.tau / self.draft_tokens_per_s


VLLM_20780_PLAIN_TPOT_MS = 7.07
VLLM_20780 = {2: (2.36, 4.32), 3: (2.79, 4.09), 4: (3.08, 4.05), 5: (3.32, 4.13), 6: (3.46, 4.20), 7: (3.54, 4.29)}
"""k -> (acceptance length, TPOT ms) of EAGLE-3 in vllm issue 20780's table."""


def vllm_20780() -> list[SpeedPoint]:
    """vllm issue 20780's k sweep (Llama-3.1-8B, one H100 as its author's other runs, batch 1)."""
    return [SpeedPoint(f"vLLM, Llama-3.1-8B, k={k}", "vllm-project/vllm issue 20780", "llama-3.1-8b", "vllm",
                       "H100-80GB", 1, 1, k, k + 1, tau, 1e3 / VLLM_20780_PLAIN_TPOT_MS, 1e3 / tpot,
                       "GPU as in the author's PR 16937/17202 runs")
            for k, (tau, tpot) in VLLM_20780.items()]


SGLANG_POINTS = [
    SpeedPoint("SGLang, Llama-3.1-8B, tree, steps 8", "sgl-project/sglang PR 4247 + SGLang docs", "llama-3.1-8b",
               "sglang", "H100-80GB", 1, 1, 8, 8, 5.39, 158.34, 378.57,
               "plain from SGLang's docs (same benchmark); top-k and draft tokens not stated (defaults 4 / 8)"),
    SpeedPoint("SGLang, Llama-3.3-70B, TP 8, tree, steps 8", "sgl-project/sglang PR 4716", "llama-3.3-70b", "sglang",
               "H100-80GB", 8, 1, 8, 64, 5.88, 88.61, 234.54, "top-k 8, 64 draft tokens; the draft's hidden size "
               "differs from the verifier's (the plan's draft is speculators' default shape)"),
]


def published_points() -> list[SpeedPoint]:
    return [*vllm_20780(), *SGLANG_POINTS]
