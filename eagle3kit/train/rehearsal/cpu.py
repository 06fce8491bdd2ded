"""Present this machine's CPU to speculators' trainer as its accelerator, so ``speculators.train`` runs here unchanged.

speculators 0.9.0 chooses its device through ``torch.accelerator`` and, on a CUDA build without a GPU, gets CUDA (the
build's accelerator), which it cannot use. :func:`present_cpu` changes what those few calls answer, in the one process
that runs the trainer (:mod:`eagle3kit.train.rehearsal.entry`), and only when no accelerator is available: nothing of
speculators is copied or edited. Each piece names what in speculators needs it (:data:`PIECES`). On a GPU it does
nothing and the trainer runs as it would on the cluster.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist

CPU = torch.device("cpu")

PIECES: dict[str, str] = {
    "torch.accelerator.current_accelerator -> cpu":
        "distributed.maybe_setup_distributed picks the process-group backend for it (gloo, not nccl); Trainer uses "
        "its type for torch.autocast",
    "torch.accelerator.current_accelerator(check_available=True) -> None":
        "cli.main ends with torch.<device>.empty_cache(), which the CPU has no need for",
    "torch.accelerator.is_available -> False (unchanged)":
        "dataloader pins each batch when it is True (pinning needs CUDA); Trainer's step timer reads device memory",
    "torch.accelerator.set_device_index -> no-op":
        "maybe_setup_distributed selects device LOCAL_RANK before it starts the process group",
    "checkpointer.get_current_device -> 'cpu'":
        "SingleGPUCheckpointer loads a checkpoint to resume onto '<accelerator>:<index>' ('cpu:0' is no device name "
        "to safetensors)",
    "torch.accelerator.synchronize -> no-op": "Trainer's step timer synchronizes the accelerator around each phase",
    "dist.init_process_group(device_id=<int>) -> no device_id":
        "maybe_setup_distributed binds the group to device_id=LOCAL_RANK, an accelerator index; gloo takes none",
    "trainer.get_local_rank -> cpu":
        "Trainer moves the model and every batch to local_rank, an int, which torch reads as a CUDA device",
    "distributed.fully_shard(mesh=CPU mesh)":
        "apply_fully_sharded lets FSDP2 build its default mesh on the build's accelerator (CUDA); give it the CPU's",
}


def needed() -> bool:
    """True when no accelerator is available: speculators' trainer only runs here with the CPU presented."""
    return not torch.accelerator.is_available()


def present_cpu() -> list[str]:
    """Install the pieces (once per process) when :func:`needed`; return their names (empty on a GPU)."""
    if not needed() or getattr(torch.accelerator, "_eagle3kit_cpu", False):
        return []
    import speculators.train.checkpointer as spec_checkpointer
    import speculators.train.distributed as spec_dist
    import speculators.train.trainer as spec_trainer

    acc = torch.accelerator
    acc.current_accelerator = lambda check_available=False: None if check_available else CPU
    acc.is_available = lambda: False  # current_accelerator() alone would make it True
    acc.set_device_index = lambda device, /: None
    acc.synchronize = lambda device=None, /: None
    dist.init_process_group = _without_int_device(dist.init_process_group)
    spec_trainer.get_local_rank = lambda: CPU
    spec_checkpointer.get_current_device = lambda: "cpu"
    spec_dist.fully_shard = _on_cpu_mesh(spec_dist.fully_shard)
    acc._eagle3kit_cpu = True
    return list(PIECES)


def _without_int_device(init):
    @functools.wraps(init)
    def wrapper(*args: Any, device_id=None, **kwargs: Any):
        return init(*args, device_id=None if isinstance(device_id, int) else device_id, **kwargs)
    return wrapper


def _on_cpu_mesh(fully_shard):
    @functools.wraps(fully_shard)
    def wrapper(module, *args: Any, mesh=None, **kwargs: Any):
        return fully_shard(module, *args, mesh=_cpu_mesh(dist.get_world_size()) if mesh is None else mesh, **kwargs)
    return wrapper


@functools.cache
def _cpu_mesh(world_size: int):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world_size,))
