"""Where eagle3kit computes and in what precision: the device, native bf16, the float dtypes data and training use.

Shared by every stage (data, draft, train, doctor), so it sits at the top level, below all of them.
"""

from __future__ import annotations

import warnings

import torch

from eagle3kit.errors import UserError
from eagle3kit.validate import FLOAT_DTYPES  # noqa: F401  (its home is the rules; imported from here too)


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={device!r} was asked for but CUDA is not available here; use device='cpu' "
                        "(`--device cpu`) or 'auto'.")
    return device


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512-BF16 / AMX, as oneDNN reports it). Without it, bf16 autocast
    is emulated: a 1024x576 @ 576x1536 matmul took 1.9 s in bf16 against 56 ms in float32 on an AVX2-only EPYC."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def native_dtype(device: str) -> str:
    """``"bfloat16"`` where ``device`` computes it natively (CUDA; a CPU with :func:`native_bf16`), else ``"float32"``:
    what ``"native"`` means for the data's hidden states and for training."""
    return "bfloat16" if device.startswith("cuda") or native_bf16() else "float32"


def resolve_dtype(dtype: str, device: str) -> str:
    """The float dtype ``dtype`` names on ``device`` (a resolved one), for data and training alike: ``"auto"`` ->
    float32 on a CPU (exact), bfloat16 on CUDA; ``"native"`` -> :func:`native_dtype`; a float dtype as given."""
    if dtype == "auto":
        return "bfloat16" if device.startswith("cuda") else "float32"
    return native_dtype(device) if dtype == "native" else dtype


def warn_if_bf16_emulated(what: str, fix: str, slowdown: str) -> None:
    """Warn (one plain sentence) that ``what`` computes in bf16 on a CPU that emulates it, ``slowdown`` as measured."""
    if not native_bf16():
        warnings.warn(f"{what} on a CPU without native bf16 (no AVX512-BF16 / AMX): {slowdown}; {fix}.", stacklevel=3)
