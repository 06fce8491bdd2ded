"""Named GPUs: memory, memory bandwidth and dense bf16 tensor throughput from the vendors' spec sheets (the one home
of these numbers).

Dense means without 2:4 sparsity (spec sheets print the sparse figure first, twice as large). Memory is the nominal
capacity; :data:`USABLE_FRACTION` of it is planned for (CUDA context, allocator fragmentation, NCCL buffers).
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle3kit.errors import UserError

USABLE_FRACTION = 0.9  # of a GPU's nominal memory a plan fills at most


@dataclass(frozen=True)
class GPU:
    """A GPU as a plan sees it: nominal memory (GB, 1e9 bytes), dense bf16 TFLOPS, memory bandwidth (TB/s)."""

    name: str
    memory_gb: float
    bf16_tflops: float
    source: str
    bandwidth_tbs: float

    @property
    def usable_bytes(self) -> float:
        return self.memory_gb * 1e9 * USABLE_FRACTION


GPUS: dict[str, GPU] = {g.name: g for g in (
    GPU("H100-80GB", 80, 989, "NVIDIA H100 SXM datasheet: 1,979 TFLOPS bf16 with sparsity, 80 GB HBM3, 3.35 TB/s",
        3.35),
    GPU("H200", 141, 989, "NVIDIA H200 SXM datasheet: 1,979 TFLOPS bf16 with sparsity, 141 GB HBM3e, 4.8 TB/s", 4.8),
    GPU("A100-80GB", 80, 312, "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, 80 GB HBM2e, 2,039 GB/s (SXM)", 2.039),
    GPU("A100-40GB", 40, 312, "NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, 40 GB HBM2, 1,555 GB/s", 1.555),
    GPU("L40S", 48, 362, "NVIDIA L40S datasheet: 733 TFLOPS bf16 with sparsity, 48 GB GDDR6, 864 GB/s", 0.864),
    GPU("B200", 180, 2250, "NVIDIA HGX B200 datasheet: 4.5 PFLOPS bf16 with sparsity per GPU, 180 GB HBM3e, 8 TB/s",
        8.0),
    GPU("RTX-4090", 24, 165, "NVIDIA Ada whitepaper: 165 TFLOPS bf16 (fp32 accumulate) dense, 24 GB GDDR6X, "
        "1,008 GB/s", 1.008),
)}


def resolve_gpu(name: str) -> GPU:
    """A named GPU (case-insensitive); a clear error listing the names otherwise."""
    for key, gpu in GPUS.items():
        if key.lower() == str(name).lower():
            return gpu
    raise UserError(f"Unknown GPU {name!r}; use one of {', '.join(GPUS)} (e.g. `--gpu H100-80GB`).")
