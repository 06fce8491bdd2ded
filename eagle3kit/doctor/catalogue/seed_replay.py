"""The seed's attention failure (docs/failures.md: the notebooks this project started from), replayed step by step:
each step run for real, its error caught, the doctor's prediction beside it.

The story: a hand-built ``LlamaConfig`` leaves ``_attn_implementation`` unset, so speculators builds the draft for
flex attention (a ``BlockMask``). speculators picks the mask builder when the model is built, so switching the
layers to ``"sdpa"`` afterwards hands sdpa a BlockMask. The fix is an attention implementation chosen *before*
building (flex on a GPU, sdpa on a CPU). The 0.9.0 twist: transformers' own ``"flex_attention"`` (the old fix) now
gets a dense mask; it is run through the probe's subprocess, because it can kill the process.

Every step uses the same weights and the same packed batch (:func:`eagle3kit.doctor.probe.worker.make_batch`), and
compares with eager attention. Nothing is written in advance: statuses, errors and Δ loss are measured.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import pandas as pd
import torch
from speculators.losses import resolve_loss_config
from speculators.models.eagle3 import Eagle3DraftModel
from torch.nn.attention.flex_attention import BlockMask
from transformers import LlamaConfig

from eagle3kit.device import resolve_device
from eagle3kit.doctor.checks.attention import recommended_attention
from eagle3kit.doctor.checks.facts import mask_kind
from eagle3kit.doctor.checks.run import check
from eagle3kit.doctor.findings import Finding, format_findings, has_errors
from eagle3kit.doctor.probe import matrix as probe
from eagle3kit.doctor.probe.worker import first_line, make_batch
from eagle3kit.draft.config import build_config, set_attention, with_attention
from eagle3kit.logs import quiet

SAME = 1e-4  # |Δ loss| below this, with every draft token equal, counts as "same numbers as eager"


@dataclass
class SeedStep:
    """One step of the replay: what the user did, what the doctor said first, and what really happened."""

    title: str
    did: str  # the line the user ran
    predicted: list[Finding] = field(default_factory=list)  # the doctor's errors and warnings, before running
    status: str = "ok"  # "ok" | "error" | "crashed" | "timeout" | "skipped"
    outcome: str = ""  # the error's first line, or the numbers
    mask: str = ""  # the mask the draft built
    max_abs_dloss: float | None = None  # vs eager, same weights and batch
    token_agreement: float | None = None

    @property
    def failed(self) -> bool:
        """It raised, died, hung, or ran with numbers that differ from eager."""
        wrong = self.max_abs_dloss is not None and (self.max_abs_dloss >= SAME or (self.token_agreement or 0) < 1)
        return self.status not in ("ok", "skipped") or wrong

    @property
    def caught(self) -> bool | None:
        """The doctor predicted it: an error finding exactly when the step fails; None where the step did not run
        here (a skipped step proves nothing either way)."""
        return None if self.status == "skipped" else has_errors(self.predicted) == self.failed

    def render(self) -> str:
        """The step as text: doctor first, then the run."""
        doctor = format_findings(self.predicted) if self.predicted else "no errors or warnings"
        numbers = "" if self.max_abs_dloss is None else (
            f" | vs eager: max |Δ loss| {self.max_abs_dloss:.2e}, draft tokens equal {self.token_agreement:.1%}")
        return (f"### {self.title}\n>>> {self.did}\n--- the doctor, before running:\n{doctor}\n"
                f"--- what happened: {self.status.upper()} {self.outcome}{numbers}\n    mask built: {self.mask}")


def hand_built_config(build):
    """The seed's draft config: the draft's decoder config written by hand as a ``LlamaConfig``, attention unset."""
    tl = build.config.transformer_layer_config
    layer = LlamaConfig(
        vocab_size=tl.vocab_size, hidden_size=tl.hidden_size, intermediate_size=tl.intermediate_size,
        num_hidden_layers=1, num_attention_heads=tl.num_attention_heads, num_key_value_heads=tl.num_key_value_heads,
        head_dim=tl.head_dim, rms_norm_eps=tl.rms_norm_eps, max_position_embeddings=tl.max_position_embeddings,
        rope_parameters=tl.rope_parameters,
    )
    config = copy.deepcopy(build.config)
    config.transformer_layer_config = layer
    return config


def describe_mask(mask) -> str:
    """One line about the mask a draft built (kind, shape, and for a BlockMask its blocks and sparsity)."""
    if isinstance(mask, BlockMask):
        return (f"BlockMask {tuple(mask.shape)} in {mask.BLOCK_SIZE[0]}-token blocks, {mask.sparsity():.0f}% of "
                "blocks skipped")
    return f"{mask_kind(mask)} tensor {tuple(mask.shape)}"


class SeedReplay:
    """The four steps of the seed on ``verifier``; ``steps()`` runs them all, each one caught."""

    def __init__(self, verifier: str = "smollm2", seq_len: int = 256, ttt_steps: int = 3, seed: int = 0,
                 device: str = "auto"):
        self.verifier, self.seq_len, self.ttt_steps, self.seed = verifier, seq_len, ttt_steps, seed
        self.device = resolve_device(device)
        self.build = build_config(verifier=verifier, ttt_steps=ttt_steps, attn_implementation="eager",
                                  device=self.device)
        self.config = hand_built_config(self.build)  # the seed's: _attn_implementation is None
        tl = self.config.transformer_layer_config
        self.batch = make_batch(seq_len, len(self.build.aux_layer_ids), tl.hidden_size, tl.vocab_size, seed,
                                self.device)
        self.loss_config = resolve_loss_config("kl_div", "eager")
        torch.manual_seed(seed)
        reference = self._fresh("eager")
        with quiet():
            reference.load_verifier_weights()
        self.weights = {k: v.detach().clone() for k, v in reference.state_dict().items()}
        self.reference = self._run(reference, grad=False)

    # ------------------------------------------------------------------------------------------- pieces
    def _fresh(self, implementation: str | None) -> Eagle3DraftModel:
        return Eagle3DraftModel(with_attention(self.config, implementation))

    def model(self, implementation: str | None) -> Eagle3DraftModel:
        """The draft built from the hand-built config with ``implementation`` set *before* building (shared weights)."""
        model = self._fresh(implementation)
        model.load_state_dict(self.weights)
        return model.to(self.device)

    def built_mask(self, model):
        """The mask ``model`` builds for the replay's batch (speculators' own mask function)."""
        return model._build_attn_mask(self.batch["document_ids"][0], self.seq_len, self.device)  # noqa: SLF001

    def mask_of(self, model) -> str:
        return describe_mask(self.built_mask(model))

    def mask_picture(self, implementation: str | None = None) -> str:
        """The mask the draft builds for ``implementation``, drawn block by block (BlockMask) or summarised."""
        mask = self.built_mask(self.model(implementation))
        if not isinstance(mask, BlockMask):
            return describe_mask(mask)
        return "\n".join(line for line in mask.to_string().splitlines() if not line.startswith("("))  # (batch, head)

    def _run(self, model, grad: bool) -> tuple[float, list[list[int]]]:
        model.train(grad)
        with torch.set_grad_enabled(grad), quiet():  # flex's "use torch.compile" warning is not the reader's
            tokens, loss, _ = model(**self.batch, ttt_steps=self.ttt_steps, loss_config=self.loss_config)
            if grad:
                loss.backward()
        return float(loss.detach()), [t[0].tolist() for t in tokens]

    def _doctor(self, subject, training: bool = True) -> list[Finding]:
        found = check(subject, device=self.device, training=training, loss="eager", seq_len=self.seq_len,
                      ttt_steps=self.ttt_steps)
        return [f for f in found if f.severity != "info" and f.check != "serving"]  # the step runs, nothing serves

    def _attempt(self, step: SeedStep, model, grad: bool) -> SeedStep:
        """Run one draft step (with gradients when ``grad``); fill ``step`` with the error or the numbers vs eager."""
        try:
            loss, tokens = self._run(model, grad)
        except Exception as exc:  # the point of the replay: the real error, caught and shown
            step.status, step.outcome = "error", first_line(exc)
            return step
        ref_loss, ref_tokens = self.reference
        pairs = [(a, b) for x, y in zip(tokens, ref_tokens, strict=True) for a, b in zip(x, y, strict=True)]
        step.max_abs_dloss = abs(loss - ref_loss)
        step.token_agreement = sum(a == b for a, b in pairs) / len(pairs)
        step.outcome = f"a {'training' if grad else 'no-grad'} step ran: loss {loss:.4f}"
        return step

    # ------------------------------------------------------------------------------------------- the steps
    def unset(self) -> SeedStep:
        """1 · the seed's config: attention unset. speculators resolves it to flex and builds a BlockMask."""
        step = SeedStep("1 · the hand-built config, attention unset", "draft = Eagle3DraftModel(config)  "
                        "# config.transformer_layer_config = LlamaConfig(...), _attn_implementation None",
                        self._doctor(self.config))
        model = self.model(None)
        step.mask = self.mask_of(model)
        self._attempt(step, model, grad=False)
        forward = step.outcome
        if step.status == "ok":
            step.max_abs_dloss = step.token_agreement = None
            self._attempt(step, model, grad=True)
            step.outcome = f"{forward}; then the training step: {step.outcome}"
        return step

    def switch_to_sdpa(self) -> SeedStep:
        """2 · what the seed's user did: switch the built draft's layers to sdpa (the mask builder stays flex)."""
        model = self.model(None)
        set_attention(model.config, "sdpa")  # the user's line, after building
        step = SeedStep("2 · switch the built draft to sdpa",
                        'draft.config.transformer_layer_config._attn_implementation = "sdpa"', self._doctor(model))
        step.mask = self.mask_of(model)
        return self._attempt(step, model, grad=True)

    def fix(self) -> SeedStep:
        """3 · the fix: the implementation for this device chosen before building (flex on CUDA, sdpa on CPU)."""
        impl = recommended_attention(self.device, training=True)
        config = with_attention(self.config, impl)
        step = SeedStep(f"3 · the fix on {self.device}: {impl!r} set before building",
                        f'config.transformer_layer_config._attn_implementation = "{impl}"; '
                        "draft = Eagle3DraftModel(config)", self._doctor(config))
        model = self.model(impl)
        step.mask = self.mask_of(model)
        return self._attempt(step, model, grad=True)

    def gpu_fix(self) -> SeedStep | None:
        """On a CPU machine, the GPU half of the fix (flex attention) cannot run: a visible skipped step."""
        if self.device.startswith("cuda"):
            return None
        return SeedStep("3b · the fix on a GPU: 'simple_flex_attention'",
                        'config.transformer_layer_config._attn_implementation = "simple_flex_attention"',
                        status="skipped", outcome="no CUDA on this machine")

    def hf_flex(self, timeout_s: float = 120, draft_vocab_size: int | None = None, repeats: int = 1,
                cache_dir: str | os.PathLike | None = None) -> SeedStep:
        """4 · the 0.9.0 twist: transformers' "flex_attention" gets a dense mask; run in the probe's subprocess
        (``draft_vocab_size``: the probe's cheaper draft over the first N ids; the crash does not depend on it).
        ``repeats`` and ``cache_dir`` as the matrix's (:func:`probe.probe`): its two cells are then the matrix's own,
        kept there for it to read back."""
        config = with_attention(self.config, "flex_attention")
        step = SeedStep("4 · the 0.9.0 twist: transformers' 'flex_attention' (the old fix)",
                        'config.transformer_layer_config._attn_implementation = "flex_attention"',
                        self._doctor(config, training=False))
        cells = [probe.Cell(b, "forward", self.seq_len, self.ttt_steps, repeats) for b in ("eager", "flex_attention")]
        results = probe.run_cells(cells, self.verifier, self.device, self.seed, timeout_s, progress=False,
                                  draft_vocab_size=draft_vocab_size, cache_dir=cache_dir)
        row = probe.compare(cells, results).iloc[1]
        step.status, step.mask = row.status, row["mask"]
        step.outcome = (f"in the probe's worker process: {row.error}" if row.status != "ok"
                        else "in the probe's worker process, a no-grad step ran")
        if row.status == "ok":
            step.max_abs_dloss, step.token_agreement = row.max_abs_dloss, row.token_agreement
        return step

    def steps(self, timeout_s: float = 120) -> list[SeedStep]:
        return [s for s in (self.unset(), self.switch_to_sdpa(), self.fix(), self.gpu_fix(), self.hf_flex(timeout_s))
                if s is not None]


def table(steps: list[SeedStep]) -> pd.DataFrame:
    """The replay in one table: predicted by the doctor, what happened, and whether the doctor was right (a step
    that did not run on this machine says so)."""
    return pd.DataFrame([{"step": s.title, "doctor predicts": "; ".join(f.what for f in s.predicted
                                                                          if f.severity == "error") or "no errors",
                          "status": s.status, "outcome": s.outcome, "mask built": s.mask,
                          "doctor right": {True: "yes", False: "NO", None: "not run here"}[s.caught]}
                         for s in steps])
