"""Published measurements a planner must reproduce (the one home of these figures), and the rows comparing them with
the formulas of :mod:`eagle3kit.plan.disk` and :mod:`eagle3kit.plan.memory`.

* speculators' tutorial: about 268 MB of hidden states per 8192-token sample for Llama-3.1-8B (hidden 4096, three aux
  layers + the last, bf16);
* speculators PR 951: speculators' own kl_div loss alone on bf16 ``[1, 8192, 151936]`` logits and targets (no model,
  so no hidden size enters) peaks 23.2 GB beyond its inputs eager and 2.3 GB fused; the figures match GiB
  (2.3 GiB is exactly one bf16 gradient of the logits);
* SafeAILab/EAGLE issue 30: ShareGPT 68K at hidden 4096 took 740 GB. EAGLE (1/2) stored one hidden state per token
  (the last layer's, fp16) with ``input_ids`` and ``loss_mask`` (int64); the token count is not published:
  :data:`EAGLE_TOKENS_PER_CONVERSATION` is assumed. ``bench/plan.py`` also counts ShareGPT V3 here (SmolLM2's
  tokenizer, cut at EAGLE's 2048 tokens): about 1,500 tokens a conversation, which would give ~15% more than 740 GB
  (or 7% more if the 740 were GiB, as ``du -h`` prints them); EAGLE used V4.3 with Vicuna's tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.plan import disk, memory

GIB = 1024**3
TOLERANCE = 0.15
SPECULATORS_SAMPLE_BYTES = 268e6
PR951_TOKENS, PR951_VOCAB = 8192, 151936
PR951_EAGER_BYTES, PR951_FUSED_BYTES = 23.2 * GIB, 2.3 * GIB
EAGLE_CONVERSATIONS, EAGLE_HIDDEN, EAGLE_BYTES = 68_000, 4096, 740e9
EAGLE_TOKENS_PER_CONVERSATION = 1300  # assumed: ShareGPT V4.3 turns cut at 2048 tokens (bench/plan.py measures V3's)


@dataclass(frozen=True)
class Check:
    """One published figure against the prediction for the same settings."""

    name: str
    published: float
    predicted: float
    source: str
    assumption: str = ""

    @property
    def ratio(self) -> float:
        return self.predicted / self.published

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= TOLERANCE


def eagle_bytes(tokens_per_conversation: float = EAGLE_TOKENS_PER_CONVERSATION) -> float:
    """EAGLE's stored data for ShareGPT 68K: one fp16 hidden state + int64 input_ids and loss_mask per token."""
    per_token = disk.hidden_state_bytes_per_token(EAGLE_HIDDEN, 1, 2) + 2 * disk.INT64
    return EAGLE_CONVERSATIONS * tokens_per_conversation * per_token


def published_checks(eagle_tokens_per_conversation: float = EAGLE_TOKENS_PER_CONVERSATION) -> list[Check]:
    """The published points, each with the formula's prediction."""
    sample = 8192 * disk.hidden_state_bytes_per_token(4096, 4, 2)
    return [
        Check("speculators: hidden states per 8192-token sample, Llama-3.1-8B", SPECULATORS_SAMPLE_BYTES, sample,
              "speculators tutorial"),
        Check("PR 951: eager kl_div peak beyond inputs, 8192 x 151936 bf16", PR951_EAGER_BYTES,
              memory.loss_bytes(PR951_TOKENS, PR951_VOCAB, "eager", 2, 1, with_inputs=False),
              "vllm-project/speculators PR 951", "the loss alone, one step; GB read as GiB"),
        Check("PR 951: fused kl_div peak beyond inputs, 8192 x 151936 bf16", PR951_FUSED_BYTES,
              memory.loss_bytes(PR951_TOKENS, PR951_VOCAB, "fused", 2, 1, with_inputs=False),
              "vllm-project/speculators PR 951", "the loss alone, one step; GB read as GiB"),
        Check("EAGLE issue 30: ShareGPT 68K at hidden 4096", EAGLE_BYTES, eagle_bytes(eagle_tokens_per_conversation),
              "SafeAILab/EAGLE issue 30",
              f"{eagle_tokens_per_conversation:,.0f} tokens per conversation; one fp16 state + int64 ids and mask"),
    ]
