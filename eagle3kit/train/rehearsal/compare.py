"""speculators' trainer beside :class:`~eagle3kit.train.session.TrainSession` on the same run, and two checkpoints
of speculators' trainer against each other (a resumed run against an uninterrupted one).

The session reads the YAML speculators resolved and saved next to its checkpoints (the rehearsal's overrides
included) and trains it as ``ranks`` data-parallel ranks: the same seed, draft, batches per rank, optimizer,
schedule and loss, so the loss per TTT step should match step for step. It trains on speculators' own forward
(``attention="speculators"``, its dense sdpa path), not the block-sparse one a CPU session takes by default: that
one computes the same loss in another order of operations, equal to 1e-5, not bit for bit.

Tolerance (:data:`REL`, :data:`ABS`): both run float32 eager kernels on the CPU, the same operations in the same
order, so they are expected to be bitwise equal. What may differ is the number of threads (torchrun starts each rank
with one; the session runs with the caller's), which changes the order of float32 sums inside matrix products:
about 1e-7 relative per sum (float32's epsilon is 1.2e-7), a few 1e-7 after a handful of AdamW steps, whose
update is normalised by the gradient's own scale. 1e-5 relative leaves a margin of ten or more; anything larger is
a different computation (another batch, draft, LR or loss), not rounding.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pandas as pd

from eagle3kit.train import handoff
from eagle3kit.train.forward import SPECULATORS
from eagle3kit.train.rehearsal.run import Rehearsal
from eagle3kit.train.session import TrainSession

REL = 1e-5
ABS = 1e-8


def session_for(rehearsal: Rehearsal, data_dir: str | os.PathLike | None = None, progress: bool = False,
                device: str = "cpu") -> TrainSession:
    """The session of the run speculators trained (its resolved YAML), as ``rehearsal.ranks`` ranks, starting from
    the YAML's ``from_pretrained`` weights when it has them."""
    from eagle3kit.train.launch import validate_yaml

    config = validate_yaml(rehearsal.resolved_yaml)
    spec = handoff.session_draft(config, device=device)
    # speculators' own forward: the same operations as its trainer, so the two are compared bit for bit
    settings = {**handoff.session_settings(config), "ranks": rehearsal.ranks, "attention": SPECULATORS}
    session = TrainSession(data_dir or config.data.data_path, spec, progress=progress, **settings)
    start = handoff.pretrained_weights(config)
    if start is not None:  # as speculators' from_pretrained: the draft's saved tensors, the verifier's own
        session.model.load_state_dict(start, strict=False)
    return session


def side_by_side(rehearsal: Rehearsal, session: TrainSession | None = None) -> pd.DataFrame:
    """Loss per step and TTT step of speculators' trainer and of the session (trained here for as many steps, when
    not given), their difference and whether it is within ``ABS + REL * |speculators|``."""
    theirs = rehearsal.metrics()
    if theirs.empty:
        raise ValueError(f"speculators' trainer logged no step in {rehearsal.out}; see {rehearsal.log}.")
    if session is None:
        session = session_for(rehearsal)
        session.run(len(theirs))
    return handoff.side_by_side(theirs, session.history_frame(), session.ttt_steps, rel=REL, abs_tol=ABS)


def summary(table: pd.DataFrame) -> dict[str, Any]:
    """Steps compared, the largest |Δloss| per TTT step, and whether every row is within the tolerance."""
    worst = table.groupby("ttt_step")["abs_diff"].max()
    return {"steps": int(table["step"].nunique()), "max_abs_diff": {int(k): float(v) for k, v in worst.items()},
            "within": bool(table["within"].all()), "tolerance": f"{ABS:g} + {REL:g} x |loss|"}


@dataclasses.dataclass
class WeightsDiff:
    """Two checkpoints tensor by tensor: how many, how many differ, the largest difference and where."""

    tensors: int
    differ: int
    max_abs_diff: float
    worst: str
    dtype: str

    @property
    def equal(self) -> bool:
        return self.differ == 0


def weights(a: str | os.PathLike, b: str | os.PathLike) -> WeightsDiff:
    """Compare the trained tensors of two draft folders (``model.safetensors``) in the dtype they were saved in."""
    from safetensors.torch import load_file

    ta, tb = (load_file(str(Path(p) / "model.safetensors")) for p in (a, b))
    if ta.keys() != tb.keys():
        raise ValueError(f"{a} and {b} hold different tensors: {sorted(ta.keys() ^ tb.keys())[:4]}")
    floats = [k for k in ta if ta[k].is_floating_point()]
    diffs = {k: float((ta[k].float() - tb[k].float()).abs().max()) if ta[k].numel() else 0.0 for k in floats}
    worst = max(diffs, key=diffs.get)
    return WeightsDiff(len(diffs), sum(d > 0 for d in diffs.values()), diffs[worst], worst,
                       str(ta[floats[0]].dtype).removeprefix("torch."))


def max_loss_diff(a: pd.DataFrame, b: pd.DataFrame, ttt_steps: int) -> float:
    """The largest |Δloss| over the steps and TTT steps two runs' records share."""
    table = handoff.side_by_side(a, b, ttt_steps, rel=0.0, abs_tol=0.0).dropna()
    return float(table["abs_diff"].max()) if len(table) else float("nan")
