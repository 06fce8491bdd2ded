"""Time for data generation and training from FLOPs, at a stated utilisation of the GPUs' dense bf16 throughput.

Data generation: one verifier forward per token (2 x active parameters, plus causal attention over the sample).
Training, per token and epoch: every TTT step runs the draft forward and backward (6 x trainable parameters, 4 x the
frozen lm_head: forward and the gradient of its input, causal attention x 3) and the verifier lm_head once (targets).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.plan.shapes import DraftShape, VerifierShape

DATA_UTILISATION = 0.4  # of dense bf16 peak: a batched forward pass
TRAIN_UTILISATION = 0.3  # of dense bf16 peak: one packed sequence per rank, a small draft, a large vocabulary


@dataclass(frozen=True)
class Throughput:
    """The GPUs the run gets: how many, their dense bf16 TFLOPS each, and the fraction of it that is used."""

    n_gpus: int
    tflops: float
    utilisation: float

    @property
    def flops_per_s(self) -> float:
        return self.n_gpus * self.tflops * 1e12 * self.utilisation


def data_generation_flops_per_token(v: VerifierShape, mean_tokens: float) -> float:
    """One verifier forward of a token: weights, and causal attention over half the sample on average."""
    return 2 * v.active_params + 2 * v.num_layers * v.hidden_size * mean_tokens


def training_flops_per_token(d: DraftShape, mean_tokens: float) -> float:
    """Forward + backward of every TTT step for one token, and the verifier lm_head's targets once."""
    head = d.hidden_size * d.draft_vocab_size
    attention = 3 * 2 * d.num_layers * d.q_dim * mean_tokens  # causal QK^T and AV, forward + backward
    return d.ttt_steps * (6 * d.trainable + 4 * head + attention) + 2 * head


def seconds(flops: float, throughput: Throughput) -> float:
    return flops / throughput.flops_per_s
