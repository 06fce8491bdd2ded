"""One training step, opened up: forward hooks on the draft's own modules (speculators' ``Eagle3DraftModel``) record
what each call received and returned while :meth:`~eagle3kit.train.session.TrainSession.step` ran, TTT step by TTT
step, beside that step's loss for each TTT step: the shapes are the real step's, and, where it trained on the CPU's
block-sparse path, speculators' dense forward on the same batch beside them (what a GPU computes).
:func:`ttt_loop` prints the loop itself, from the installed speculators' source."""

from __future__ import annotations

import ast
import contextlib
import inspect
import statistics
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from eagle3kit.train.forward import speculators_forward

# the draft's modules a step calls, in the order of a TTT step, and what each does there
ROLES = {
    "fc": "the verifier's aux hidden states (concatenated) projected to one hidden vector a position",
    "verifier_lm_head": "the targets: the verifier's own next-token distribution at every position (no gradient)",
    "embed_tokens": "the token each position reads at this TTT step: token i + s (teacher forcing)",
    "layers.0": "the draft's decoder layer over [embedding, hidden state], under the EAGLE-3 mask",
    "norm": "the final norm",
    "lm_head": "the draft's logits over its vocab",
}


@dataclass
class Anatomy:
    """The calls of one training step (``calls``: TTT step, module, role, shapes), its record and its batch."""

    calls: pd.DataFrame
    record: dict
    batch: dict | None = None

    def dense(self) -> pd.DataFrame:
        """The calls with speculators' dense shapes only (what a GPU computes), as ``input`` / ``output``; the calls
        as they are where the step ran speculators' own forward."""
        if "dense input" not in self.calls:
            return self.calls
        return (self.calls[["TTT step", "module", "role", "dense input", "dense output"]]
                .rename(columns={"dense input": "input", "dense output": "output"}))

    def cpu_line(self) -> str | None:
        """Where the step computed fewer rows than the dense forward: per module, the rows it computed of the
        dense forward's (None where the step was speculators' own)."""
        if "dense input" not in self.calls:
            return None

        def rows(shape: str) -> int:
            dims = [int(d) for d in shape.split("×")]
            return dims[-2] if len(dims) >= 2 else dims[-1]

        said = []
        for module in dict.fromkeys(self.calls["module"]):
            calls = self.calls[self.calls["module"] == module]
            mine = sorted({rows(x) for x in calls["this step's output"]})
            dense = rows(calls["dense output"].iloc[0])
            if mine != [dense]:
                said.append(f"`{module}` on {' / '.join(map(str, mine))} of {dense} rows")
        return ("This CPU's block-sparse step computed " + ", ".join(said) + " (the same loss and gradients)."
                if said else "This CPU's step computed every row the dense forward does.")

    def losses(self, ttt_steps: int) -> str:
        """The step's loss as the sum it is: one KL term a TTT step."""
        parts = [self.record.get(f"loss_{s}") for s in range(ttt_steps)]
        if any(p is None for p in parts):
            return f"loss {self.record['loss']:.3f}"
        terms = " + ".join(f"{p:.3f}" for p in parts)
        return (f"step {self.record['step']}: loss {self.record['loss']:.3f} = {terms} (one KL divergence from the "
                f"verifier's distribution a TTT step, over the tokens the loss mask keeps)")


def _shape(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "×".join(str(d) for d in value.shape)
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return _shape(value[0])
    return ""


@contextlib.contextmanager
def _recording(model) -> Iterator[list[dict]]:
    """Forward hooks on :data:`ROLES`' modules of ``model`` while the block runs: each call's shapes, in order."""
    modules = dict(model.named_modules())
    calls: list[dict] = []
    ttt = {"step": -1}

    def hook(name: str):
        def record(_module, args, output):
            if name == "embed_tokens":
                ttt["step"] += 1
            calls.append({"TTT step": "" if ttt["step"] < 0 else ttt["step"], "module": name, "role": ROLES[name],
                          "input": _shape(args[0]) if args else "", "output": _shape(output)})
        return record

    handles = [modules[name].register_forward_hook(hook(name)) for name in ROLES if name in modules]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def open_step(session) -> Anatomy:
    """Take the session's next step with hooks on :data:`ROLES`' modules; each call's shapes, in order. Where the
    session trains with another forward than speculators' own (the block-sparse CPU path), speculators' dense forward
    then runs once more on the same batch, without a gradient, so each call shows the shapes a GPU computes (``dense
    input``, ``dense output``) beside the ones this step computed."""
    batch = session.peek_batch()
    with _recording(session.model) as calls:
        record = session.step()
    frame = pd.DataFrame(calls)
    if session.forward is not speculators_forward:
        with _recording(session.model) as dense, torch.no_grad():
            speculators_forward(session.model, batch, **session.step_kwargs())
        dense_frame = pd.DataFrame(dense)
        if list(dense_frame["module"]) == list(frame["module"]):  # the same calls, in the same order
            frame.insert(3, "dense input", dense_frame["input"])
            frame.insert(4, "dense output", dense_frame["output"])
            frame = frame.rename(columns={"input": "this step's input", "output": "this step's output"})
    return Anatomy(frame, record, batch)


def path_seconds(session, batch: dict, repeats: int = 3) -> dict[str, float]:
    """Seconds of one forward + backward on ``batch`` by speculators' dense forward and by the session's own, in the
    session's precision, interleaved (load from elsewhere hits both alike), the median of ``repeats`` each; the
    gradients are cleared after, so no weight moves and the next step is unchanged."""
    paths = {"speculators' dense forward": speculators_forward, f"the session's ({session.attention})": session.forward}
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeats):
        for name, forward in paths.items():
            session.model.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            with session.autocast():
                loss, _ = forward(session.model, batch, **session.step_kwargs())
            loss.backward()
            seconds[name].append(time.perf_counter() - t0)
    session.model.zero_grad(set_to_none=True)
    return {name: statistics.median(v) for name, v in seconds.items()}


def path_line(seconds: dict[str, float]) -> str:
    """:func:`path_seconds` in one line, with the ratio of the first path to the second."""
    (dense_name, dense), (own_name, own) = seconds.items()
    return (f"forward + backward on this batch (medians, interleaved): {dense_name} {dense:.2f} s, {own_name} "
            f"{own:.2f} s: {dense / own:.2f}x")


def ttt_loop(forward: object | None = None) -> str:
    """The TTT loop of ``forward`` (default: the installed speculators' ``Eagle3DraftModel.forward``) as its own
    source, comments and line breaks inside a statement removed (``ast.unparse``), under a line naming where it is."""
    if forward is None:
        from speculators.models.eagle3 import Eagle3DraftModel

        forward = Eagle3DraftModel.forward
    lines, first = inspect.getsourcelines(forward)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    loop = next((n for n in ast.walk(tree) if isinstance(n, ast.For) and getattr(n.target, "id", "") == "ttt_step"),
                None)
    if loop is None:
        raise ValueError(f"{forward.__qualname__} has no `for ttt_step in ...` loop")
    top = sys.modules[forward.__module__.split(".")[0]]  # the file named from its package: no folder of this machine
    path = Path(inspect.getsourcefile(forward)).relative_to(Path(top.__file__).parent.parent)
    where = f"{path}, lines {first + loop.lineno - 1}-{first + loop.end_lineno - 1}"
    return f"# {forward.__module__}.{forward.__qualname__} ({where})\n{ast.unparse(loop)}"


def step_loop() -> str:
    """The optimizer step around the forward, as :class:`~eagle3kit.train.session.TrainSession` runs it
    (:func:`eagle3kit.train.loop.train_step`: zero_grad, forward and backward per rank's batch, clipping at 1.0, the
    optimizers' and schedulers' step; speculators' ``Trainer`` does the same): its own source, docstring removed."""
    from eagle3kit.train.loop import train_step

    tree = ast.parse(textwrap.dedent(inspect.getsource(train_step)))
    fn = tree.body[0]
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(getattr(fn.body[0], "value", None), ast.Constant):
        fn.body = fn.body[1:]  # the docstring
    for arg in fn.args.args:  # the signature on one short line: the types are in the source
        arg.annotation = None
    fn.returns = None
    return f"# {train_step.__module__}.train_step\n{ast.unparse(tree)}"
