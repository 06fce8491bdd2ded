"""The command that runs a speculators TrainConfig YAML on the GPUs (``eagle3kit launch`` and the plan print it), and
the packed length a GPU run defaults to: speculators' own, read from its ``TrainConfig`` schema."""

from __future__ import annotations

import os
import re
import shlex

from speculators.train.config import TrainConfig

from eagle3kit.errors import UserError

TOTAL_SEQ_LEN: int = TrainConfig().flatten()["total_seq_len"]  # `speculators train`'s default packed length


def check_rendezvous(nodes: int, rdzv_endpoint: str | None) -> None:
    """Refuse a multi-node run without a rendezvous endpoint, a malformed one, or one given to a single node."""
    if nodes < 1:
        raise UserError(f"--nodes {nodes}: use an integer >= 1 (machines that each run --gpus ranks).")
    if nodes > 1 and not rdzv_endpoint:
        raise UserError(f"--nodes {nodes} needs --rdzv-endpoint HOST:PORT, an address of the first node that every "
                        "node reaches (e.g. `--rdzv-endpoint node0:29500`).")
    if nodes == 1 and rdzv_endpoint:
        raise UserError("--rdzv-endpoint joins several nodes; one node rendezvouses by itself (--standalone): drop "
                        "it, or pass --nodes N.")
    if rdzv_endpoint and not re.fullmatch(r"[^\s:]+:\d+", rdzv_endpoint):
        raise UserError(f"--rdzv-endpoint {rdzv_endpoint}: write it HOST:PORT (e.g. `node0:29500`).")


def torchrun_command(yaml_path: str | os.PathLike, n_gpus: int = 8, fsdp: bool = False, nodes: int = 1,
                     rdzv_endpoint: str | None = None) -> str:
    """The command that runs the YAML with speculators' distributed trainer: ``n_gpus`` ranks on each of ``nodes``
    nodes (one node: ``--standalone``; several: a c10d rendezvous at ``rdzv_endpoint``, the same command on each)."""
    check_rendezvous(nodes, rdzv_endpoint)
    where = ["--standalone"] if nodes == 1 else [f"--nnodes={nodes}", "--rdzv-backend=c10d",
                                                 f"--rdzv-endpoint={rdzv_endpoint}"]
    parts = ["torchrun", *where, f"--nproc_per_node={n_gpus}", "-m", "speculators.train", "--config", str(yaml_path)]
    if fsdp:
        parts.append("--fsdp-shard")  # FSDP2 parameter sharding (needs torchrun)
    return shlex.join(parts)
