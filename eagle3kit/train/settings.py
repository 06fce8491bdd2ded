"""What defines a training run besides the draft and the data: :class:`TrainSettings` (speculators' names and
defaults where it has one), resolved for a device."""

from __future__ import annotations

import dataclasses
import math

from eagle3kit.device import resolve_dtype, warn_if_bf16_emulated


@dataclasses.dataclass
class TrainSettings:
    """Everything besides the draft and the data that defines a run (speculators' names and defaults where they
    have one; ``total_seq_len`` and ``seed`` differ: 8192 and 42 in ``speculators train``)."""

    lr: float = 1e-3
    # 512 tokens a step on a CPU: the recipe lab's `pack-512`, the one lever that beat its base at both 5 and 10 CPU
    # minutes (bench/results/recipe.md). A GPU run (eagle3kit launch) gets speculators' 8192 unless given.
    total_seq_len: int = 512
    seed: int = 0
    weight_decay: float = 0.01
    optimizer: str = "adamw"  # or "muon": Muon on the 2D weights, AdamW on the rest, as speculators trains
    muon_lr: float | None = None  # the Muon group's LR; None: lr (as speculators train)
    epochs: int = 20
    max_steps: int | None = None  # also the LR schedule's horizon, as in speculators
    scheduler_type: str = "linear"  # "linear" | "cosine" | "none"
    warmup_steps: int | None = None  # None: 1% of the schedule's horizon
    loss_fn: str = "kl_div"
    ttt_step_loss_decay: float = 1.0
    train_data_ratio: float = 0.9
    # "auto": float32 on CPU (exact), bf16 on CUDA; "native": bf16 autocast where the hardware has it (native_bf16)
    hidden_states_dtype: str = "auto"
    loss_implementation: str = "auto"  # "auto": eager on CPU (Triton-free), fused on CUDA
    # None: speculators' random init. N: start the draft layer, fc and norm from verifier decoder layer N (-1: the
    # last); see eagle3kit.draft.warm_start. Applies to a new run (a resumed one loads its checkpoint).
    warm_start_layer: int | None = None
    # Data-parallel ranks the run is trained as: each step draws one batch per rank (each rank's sampler) and
    # averages their gradients, as DDP / FSDP do for `torchrun --nproc_per_node=ranks -m speculators.train`.
    ranks: int = 1
    # The training forward: "auto" -> "block_sparse_cpu" on a CPU when the draft's attention takes a dense mask (sdpa,
    # eager): attention only where speculators' BlockMask keeps blocks, lm_head and loss only on rows that carry loss
    # (eagle3kit.train.forward; the same loss and gradients); "speculators": speculators' own forward (its dense sdpa
    # path on a CPU). Never written into the draft's config.json or the launch YAML.
    attention: str = "auto"
    # TTT curriculum: the first fraction of the schedule's steps trains 1 TTT step, the rest the draft's own count
    # (its config, and so vLLM's k, is unchanged). 0: none. speculators' trainer has no such schedule.
    ttt_curriculum: float = 0.0

    def ending(self, packs_per_epoch: int, ranks: int = 1) -> str:
        """Which bound ends this run in speculators' trainer (it stops at ``max_steps`` or after ``epochs``, whichever
        comes first) with ``packs_per_epoch`` packs an epoch shared by ``ranks`` ranks, in words."""
        per_epoch = max(1, math.ceil(packs_per_epoch / ranks))
        where = f"on {ranks} rank{'s' if ranks > 1 else ''}"
        if self.max_steps is None:
            return f"{self.epochs} epochs end the run: {self.epochs * per_epoch} steps {where}"
        epochs = self.max_steps / per_epoch
        if epochs <= self.epochs:
            return (f"max_steps {self.max_steps} ends the run {where}, after {epochs:.1f} epochs of this data "
                    f"(`epochs: {self.epochs}` is only an upper bound)")
        return (f"{where} the {self.epochs} epochs end the run first, at about {self.epochs * per_epoch} of its "
                f"{self.max_steps} steps, before the LR schedule (over max_steps) has decayed: set max_steps to "
                f"{self.epochs * per_epoch} or epochs to {math.ceil(epochs)}")

    def for_ranks(self, packs_per_epoch: int, ranks: int) -> TrainSettings:
        """These settings for speculators' trainer on ``ranks`` ranks, seeing the packs this run sees: each step takes
        one pack a rank, so ``max_steps`` becomes ``max_steps / ranks`` (rounded up), and ``epochs`` the fewest that
        hold those steps, so max_steps (the LR schedule's horizon) ends the run and no surplus epoch adds the step
        speculators takes in each epoch it starts after max_steps (eagle3kit.train.handoff)."""
        if self.max_steps is None:
            return self
        steps = math.ceil(self.max_steps / ranks)
        return dataclasses.replace(self, max_steps=steps,
                                   epochs=math.ceil(steps / max(1, math.ceil(packs_per_epoch / ranks))))

    def resolved(self, device: str) -> TrainSettings:
        cpu = not device.startswith("cuda")
        dtype = resolve_dtype(self.hidden_states_dtype, device)
        impl = self.loss_implementation if self.loss_implementation != "auto" else ("eager" if cpu else "fused")
        if cpu and dtype == "bfloat16":  # faster on CPUs with native bf16, not bit-exact; much slower elsewhere
            warn_if_bf16_emulated("hidden_states_dtype='bfloat16'", "use hidden_states_dtype='auto' (`--hidden-"
                                  "states-dtype auto`)", "autocast emulates it, many times slower than float32")
        return dataclasses.replace(self, hidden_states_dtype=dtype, loss_implementation=impl)
