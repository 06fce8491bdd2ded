"""The GPU hand-off that closes notebook 06: the commands, in order, that take the user's own verifier and
conversations from a plan to a served draft (speculators' trainer under torchrun does the training)."""

from __future__ import annotations

import os
from pathlib import Path

from eagle3kit.plan.commands import torchrun_command

RUN_YAML = "RUN_YAML"  # a placeholder for the user's $RUN/run.yaml (a shell variable, written unquoted)
LAUNCH_05 = "launch_05"  # notebook 05's launch folder: its run.yaml is what torchrun runs on the GPUs


def handoff(workdir: str | os.PathLike, s06: dict, n_gpus: int = 8) -> list[tuple[str, str]]:
    """The GPU hand-off for the user's own verifier and conversations, in order, as (command, what it gives): plan,
    data, doctor, YAML, a rehearsal, speculators' trainer under torchrun, the doctor on its checkpoint, serving.
    Notebook 05 ran the same launch and rehearsal on this run's SmolLM2 data (its YAML: ``launch_05/run.yaml``)."""
    verifier, gpu = s06.get("plan_verifier", "llama-3.1-8b"), s06.get("plan_gpu", "H100-80GB")
    rehearsed = (f" (notebook 05 rehearsed its `{LAUNCH_05}/run.yaml`)"
                 if (Path(workdir) / LAUNCH_05 / "run.yaml").exists() else "")
    best = "$RUN/checkpoints/checkpoint_best"
    return [(f"eagle3kit plan --verifier $VERIFIER --gpu {gpu} --gpus {n_gpus}",
             f"disk, GPU memory and hours, before anything runs (this run planned `{verifier}`)"),
            ("the `eagle3kit data ...` line `plan` printed, with `--source chats.jsonl --out $DATA`",
             "the verifier's hidden states of your conversations, at the plan's lengths"),
            ("eagle3kit doctor --data $DATA", "the data checked before a GPU-hour is spent"),
            (f"eagle3kit launch --data $DATA --out $RUN --gpus {n_gpus} --fsdp --gpu {gpu}",
             "speculators' TrainConfig YAML, checked to fit, and the torchrun line (`--fsdp`: FSDP2 sharding)"),
            ("eagle3kit rehearse --config $RUN/run.yaml --out $RUN/rehearsal --ranks 2 --fsdp --steps 2 --compare",
             f"a few steps of speculators' trainer on CPU ranks, beside eagle3kit's{rehearsed}"),
            (torchrun_command(RUN_YAML, n_gpus, fsdp=True).replace(RUN_YAML, "$RUN/run.yaml"),
             "the real run: the line `launch` printed"),
            (f"eagle3kit doctor --draft {best} --data $DATA --why-tau", "why its τ is what it is"),
            (f"vllm serve {best}", "serve it")]


def handoff_table(rows: list[tuple[str, str]]) -> str:
    """:func:`handoff` as a Markdown table: step, command, what it gives."""
    lines = ["| step | command | what it gives |", "|---|---|---|"]
    return "\n".join(lines + [f"| {i} | {c if c.startswith('the ') else f'`{c}`'} | {what} |"
                               for i, (c, what) in enumerate(rows, 1)])
