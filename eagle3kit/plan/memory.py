"""GPU memory of one training rank, part by part, from the draft's shapes (derived; checked against a measured CPU
step by ``tests/test_plan_memory.py`` and against speculators PR 951's loss-only measurement by ``bench/plan.py``).

The accounting is eager autograd's: what each op of speculators' ``Eagle3DraftModel.forward`` keeps for the backward
(HF Llama decoder layer, RMSNorm, DynamicCache growing one chunk per TTT step), all TTT steps alive at once because
the loss of every step is summed before one ``backward()``. The loss over the draft vocabulary, as speculators
implements it (:mod:`speculators.losses`):

* eager ``kl_div``: every step keeps ``log_softmax(logits)`` and ``softmax(targets)`` in fp32 (8 bytes a token x
  vocab entry) and, while it runs, ``kl_div``'s composite (``xlogy(t, t) - t * logp``) adds three more fp32 tensors
  (12 bytes): 20 bytes per entry for one step alone, as PR 951 measured;
* fused (Triton): each step keeps only its logits (saved for the recomputing backward) and the backward writes one
  gradient of the logits' width.

Assumptions (listed in every plan): one packed sequence of ``total_seq_len`` tokens per rank (speculators' batch),
fp32 master weights, gradients and AdamW moments (Muon: one fp32 momentum on 2D weights), activations in the
autocast width (bf16 on GPUs, as speculators trains; fp32 on a CPU), no activation checkpointing; the compiled GPU
forward keeps at most what eager autograd keeps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from eagle3kit.masks.eagle_mask import BLOCK
from eagle3kit.plan.commands import TOTAL_SEQ_LEN
from eagle3kit.plan.shapes import DraftShape

FP32 = 4
LOSS_IMPLEMENTATIONS = ("eager", "fused")
EAGER_KEPT_PER_STEP = 2 * FP32  # log_softmax(logits) and softmax(targets), fp32, kept for the backward
EAGER_TRANSIENT = 3 * FP32  # kl_div's xlogy(t, t), t * logp and their difference, while the last step runs


@dataclass(frozen=True)
class Precision:
    """Widths in bytes: weights/gradients (``param``), activations and logits (``act``), stored hidden states."""

    param: int = FP32
    act: int = 2
    hidden_states: int = 2


GPU_BF16 = Precision()
CPU_FP32 = Precision(act=FP32, hidden_states=FP32)


@dataclass(frozen=True)
class StepSettings:
    """What a training step's memory depends on besides the draft's shapes."""

    total_seq_len: int = TOTAL_SEQ_LEN
    loss_implementation: str = "fused"  # "eager" | "fused"
    optimizer: str = "adamw"  # "adamw" | "muon"
    attention: str = "simple_flex_attention"  # or "sdpa" (dense boolean mask) / "eager"
    precision: Precision = GPU_BF16
    shards: int = 1  # FSDP ranks sharing weights, gradients and optimizer state


def loss_bytes(tokens: int, vocab: int, implementation: str, logits_width: int, ttt_steps: int = 1,
               with_inputs: bool = True) -> int:
    """Peak bytes of the loss over ``ttt_steps`` steps of ``[tokens, vocab]`` logits (speculators' kl_div).

    ``with_inputs=False`` leaves out the logits and targets themselves (PR 951 reports the peak "beyond its inputs").
    """
    entries = tokens * vocab
    if implementation == "eager":
        beyond = entries * (EAGER_KEPT_PER_STEP * ttt_steps + EAGER_TRANSIENT)
        inputs = 2 * entries * logits_width  # the targets and the last step's logits
    elif implementation == "fused":
        beyond = entries * logits_width  # the backward's gradient of the logits (one step at a time)
        inputs = entries * logits_width * (ttt_steps + 1)  # every step's logits (saved) and the targets
    else:
        raise ValueError(f"loss implementation {implementation!r}: use one of {LOSS_IMPLEMENTATIONS}")
    return beyond + (inputs if with_inputs else 0)


def activation_bytes_per_token(d: DraftShape, step: int, width: int, attention: str, tokens: int) -> float:
    """Bytes autograd keeps per token for TTT step ``step`` (0-based): decoder layer(s), final norm, RoPE, mask."""
    h, q, i = d.hidden_size, d.q_dim, d.intermediate_size
    if attention == "simple_flex_attention":
        kv = 2 * d.kv_dim * (step + 1)  # flex takes GQA keys/values as they are: the step's whole cache is saved
    else:  # sdpa/eager with a mask: transformers repeats the KV heads (repeat_kv copies, saved) for every step
        kv = 2 * q * (step + 1)
    lse = d.num_heads * FP32 / width  # the attention's fp32 log-sum-exp
    first = 10 * h + 3 * q + 4 * i + kv + lse  # cat(embeds, hidden), 2 norms, q/k/v input, q, attn out, MLP
    others = (d.num_layers - 1) * (6 * h + 3 * q + 4 * i + kv + lse)
    model = 2 * h + 2 * d.head_dim  # final norm (normalized + output = lm_head input), RoPE cos/sin
    per_token = (first + others + model) * width
    if attention == "sdpa":
        # the dense boolean mask [T, (step + 1) T] the model extends each step, and the additive float mask sdpa
        # makes of it and saves for its backward
        per_token += tokens * (step + 1) * (1 + width)
    elif attention == "eager":
        per_token += tokens * (step + 1) * (width + d.num_heads * width)  # float mask + attention probabilities
    return per_token


def memory_parts(d: DraftShape, s: StepSettings) -> dict[str, float]:
    """Bytes per training rank, by part (the keys are the table's rows)."""
    p, t = s.precision, s.total_seq_len
    if s.optimizer == "muon":
        optimizer = FP32 * d.trainable_2d + 2 * FP32 * (d.trainable - d.trainable_2d)
    else:
        optimizer = 2 * FP32 * d.trainable
    once = (7 * d.hidden_size if d.norm_before_fc else 4 * d.hidden_size) * p.act  # input norm + fc output
    steps = sum(activation_bytes_per_token(d, k, p.act, s.attention, t) for k in range(d.ttt_steps))
    if s.attention != "simple_flex_attention":  # after the last step the dense mask is extended once more (unused)
        steps += t * (d.ttt_steps + 2)  # the diagonal block [T, T] and the extended bool mask [T, (steps + 1) T]
    return {
        "draft weights (trainable)": d.trainable * p.param / s.shards,
        "frozen embedding": d.frozen_embedding * p.param / s.shards,
        "frozen lm_head + verifier lm_head rows": d.frozen_heads * p.param / s.shards,
        "gradients": d.trainable * p.param / s.shards,
        "optimizer state": optimizer / s.shards,
        "batch (hidden states in)": t * (d.n_aux + 1) * d.hidden_size * p.hidden_states,
        "activations (all TTT steps)": t * (once + steps),
        f"logits + loss ({s.loss_implementation})": loss_bytes(t, d.draft_vocab_size, s.loss_implementation, p.act,
                                                              d.ttt_steps),
    }


def activations_per_step(d: DraftShape, s: StepSettings) -> float:
    """Mean activation bytes of one TTT step (the table's 'per TTT step' figure)."""
    return sum(activation_bytes_per_token(d, k, s.precision.act, s.attention, s.total_seq_len)
               for k in range(d.ttt_steps)) * s.total_seq_len / d.ttt_steps


def total_bytes(d: DraftShape, s: StepSettings) -> float:
    return sum(memory_parts(d, s).values())


def largest_fitting_seq_len(d: DraftShape, s: StepSettings, capacity: float, multiple: int = BLOCK) -> int:
    """The largest ``total_seq_len`` (a multiple of ``multiple``, flex's block) whose step fits in ``capacity``
    bytes; 0 when not even one block fits."""
    def fits(n: int) -> bool:
        return total_bytes(d, dataclasses.replace(s, total_seq_len=n * multiple)) <= capacity
    lo, hi = 0, 1
    while fits(hi) and hi < 1 << 20:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * multiple


def checkpoint_bytes(d: DraftShape, optimizer: str = "adamw", precision: Precision = GPU_BF16) -> float:
    """One checkpoint speculators saves: the draft without the verifier lm_head rows (fp32) + the optimizer state."""
    parts = memory_parts(d, StepSettings(optimizer=optimizer, precision=precision))
    lm_head_only = d.draft_vocab_size * d.hidden_size * precision.param  # the verifier's rows are not saved
    return (parts["draft weights (trainable)"] + parts["frozen embedding"] + lm_head_only
            + parts["optimizer state"])
