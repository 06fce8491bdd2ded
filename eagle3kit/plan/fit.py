"""Will a planned run fit? The check ``eagle3kit launch`` runs before it writes anything."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from eagle3kit.outputs import nearest_existing
from eagle3kit.plan import memory
from eagle3kit.plan.gpus import resolve_gpu
from eagle3kit.plan.shapes import draft_shape

DEFAULT_GPU = "H100-80GB"


def _free_bytes(path: str | os.PathLike) -> float:
    """Free bytes on the file system that will hold ``path`` (its nearest existing parent)."""
    return shutil.disk_usage(nearest_existing(Path(path).resolve())).free


def run_problems(build, total_seq_len: int, loss_implementation: str, optimizer: str, epochs: int,
                 out_dir: str | os.PathLike, n_gpus: int = 8, fsdp: bool = False, gpu: str | None = None,
                 attention: str = "simple_flex_attention", disk: bool = True) -> list[str]:
    """Sentences saying what of a speculators run will not fit (GPU memory per rank; with ``disk``, disk for the
    checkpoints it keeps under ``out_dir``); empty when it fits."""
    target = resolve_gpu(gpu or DEFAULT_GPU)
    d = draft_shape(build)
    step = memory.StepSettings(total_seq_len=total_seq_len, loss_implementation=loss_implementation,
                               optimizer=optimizer, attention=attention, shards=n_gpus if fsdp else 1)
    parts = memory.memory_parts(d, step)
    need = sum(parts.values())
    out = []
    if need > target.usable_bytes:
        largest = memory.largest_fitting_seq_len(d, step, target.usable_bytes)
        out.append(f"the planned step needs {need / 1e9:.1f} GB per GPU, more than the {target.usable_bytes / 1e9:.1f} "
                   f"GB usable on a {target.name} (`--gpu` names yours); use --total-seq-len {largest} or less"
                   + (", or the fused loss" if loss_implementation == "eager" else ""))
    checkpoint = memory.checkpoint_bytes(d, optimizer)
    free = _free_bytes(out_dir) if disk else math.inf
    if checkpoint * epochs > free:
        out.append(f"{epochs} checkpoints of {checkpoint / 1e9:.1f} GB each need {checkpoint * epochs / 1e9:.1f} GB "
                   f"under {out_dir}, but {free / 1e9:.1f} GB are free; use fewer --epochs or make room")
    return out
