"""The command that runs a speculators TrainConfig YAML on the GPUs (``eagle3kit launch`` and the plan print it)."""

from __future__ import annotations

import os
import shlex


def torchrun_command(yaml_path: str | os.PathLike, n_gpus: int = 8, fsdp: bool = False) -> str:
    """The command that runs the YAML on ``n_gpus`` GPUs of one node with speculators' distributed trainer."""
    parts = ["torchrun", "--standalone", f"--nproc_per_node={n_gpus}", "-m", "speculators.train",
             "--config", str(yaml_path)]
    if fsdp:
        parts.append("--fsdp-shard")  # FSDP2 parameter sharding (needs torchrun)
    return shlex.join(parts)
