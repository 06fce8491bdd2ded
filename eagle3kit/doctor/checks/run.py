"""Preflight findings for an EAGLE-3 draft: what will fail on this device, why, and the line that fixes it.

``check(config | build | model, batch=None, device=..., training=True)`` never raises on a broken setup: every check
runs guarded, and a check that cannot run becomes a finding itself. The checks themselves live in
:mod:`~eagle3kit.doctor.checks.attention` (mask and backend, loss) and :mod:`~eagle3kit.doctor.checks.model`
(weights, shapes, vocab, batch, head sizes vLLM's CPU build serves); ``check_data_dir`` checks a training-data
directory.
"""

from __future__ import annotations

import torch

from eagle3kit.data.directory import DataDir
from eagle3kit.data.health import bad_files, remake_command
from eagle3kit.data.targets import verify_targets
from eagle3kit.doctor.checks.attention import attention_findings, loss_findings
from eagle3kit.doctor.checks.data import supervision_findings
from eagle3kit.doctor.checks.facts import attention_facts, doctor_subject
from eagle3kit.doctor.checks.model import batch_findings, serving_findings, shape_findings, weight_findings
from eagle3kit.doctor.checks.versions import version_findings
from eagle3kit.doctor.findings import Finding, Guard
from eagle3kit.draft.config import draft_ttt_steps


def check(subject, batch: dict | None = None, device: str = "auto", training: bool = True, loss="auto",
          seq_len: int | None = None, ttt_steps: int | None = None) -> list[Finding]:
    """All findings for an ``Eagle3SpeculatorConfig``, ``DraftBuild`` or ``Eagle3DraftModel`` on ``device``.

    ``loss``: "auto" (eagle3kit picks eager on CPU), "fused", "eager", None (speculators' default: fused) or a
    speculators LossConfig dict. ``seq_len`` defaults to the batch's total_seq_len.
    """
    findings: list[Finding] = []

    guarded = Guard(findings, "speculators' own code failed on this config: check the fields it names")

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        findings.append(Finding("error", f"device {device!r} but CUDA is not available", "torch sees no GPU",
                                "--device cpu", "device"))
    try:
        s = doctor_subject(subject)
    except Exception as exc:
        return findings + [Finding("error", "not a draft config or model", f"{type(exc).__name__}: {exc}",
                                   "pass an Eagle3SpeculatorConfig, a DraftBuild or an Eagle3DraftModel", "subject")]
    if seq_len is None and batch is not None and "input_ids" in batch:
        seq_len = int(batch["input_ids"].shape[-1])
    try:
        steps = ttt_steps or draft_ttt_steps(s.config)
    except Exception:
        steps = 3
    facts: dict = {}
    guarded("attention", lambda: facts.update(attention_facts(s)) or attention_findings(
        facts, device, training, seq_len, steps))
    guarded("loss", lambda: loss_findings(device, training, loss))
    if not isinstance(loss, dict):  # "auto" is fused on CUDA; the version traps of the loss it will run
        guarded("versions", lambda: version_findings(cuda=device.startswith("cuda"),
                                                     loss="fused" if loss in ("auto", "fused", None) else loss))
    guarded("weights", lambda: weight_findings(s))
    guarded("shapes", lambda: shape_findings(s))
    guarded("serving", lambda: serving_findings(s))
    if batch is not None:
        guarded("batch", lambda: batch_findings(s, batch, device))
    return findings


def trainer_findings(dry_run: bool = False) -> list[Finding]:
    """``speculators train`` as it is needs an accelerator (its distributed setup and device placement assume one);
    ``eagle3kit rehearse`` runs it here with the CPU presented as one."""
    if dry_run or torch.accelerator.is_available():
        return []
    return [Finding("warning", "speculators train needs a GPU: this machine has no accelerator",
                    "with LOCAL_RANK set (torchrun) its distributed setup fails ('No accelerator found' or a missing "
                    "driver); without it the trainer moves the model to an integer device, which needs an accelerator",
                    "run the torchrun command on a GPU machine; here, rehearse it with `eagle3kit rehearse --config "
                    "run.yaml --out DIR [--ranks 2] [--fsdp]` (speculators' own trainer, the CPU presented as its "
                    "accelerator)", "trainer")]


def check_data_dir(data_dir, verifier=None, n_samples: int = 2) -> list[Finding]:
    """Check a training-data directory (one ``eagle3kit data`` made, or speculators' pipeline: then ``verifier`` is
    needed): every hidden-state file (one finding per bad file, with the command that remakes it), then the
    last-hidden-state convention with :func:`eagle3kit.data.targets.verify_targets`, then what it supervises
    (:func:`eagle3kit.doctor.checks.data.supervision_findings`: loss mask, template, aux slices, vocab).

    speculators applies ``verifier_norm`` to the stored last state itself, so it must be the pre-norm output of the
    last decoder layer: the targets computed from it must reproduce the verifier's own logits.
    """
    try:  # a directory without a manifest is told the verifier (its files are checked against it)
        data = DataDir.open(data_dir, verifier)
        data.require_verifier()
        found = bad_files(data)
    except Exception as exc:  # no dataset there; no manifest and no verifier; files another verifier made
        return [Finding("error", f"data directory {data_dir} cannot be checked", f"{type(exc).__name__}: {exc}",
                        "pass a data directory and the verifier that made it (--verifier NAME_OR_DIR)", "data_dir")]
    if found and not data.hidden_state_files():  # none at all: a prepared dataset not filled yet
        return [Finding("error", f"data directory {data_dir} has no hidden states", f"its {len(found)} rows have no "
                        "hs_*.safetensors file", remake_command(data), "data_dir")]
    if found:
        fix = remake_command(data)
        return [Finding("error", f"hidden-state file {path} is unusable", why, fix, "data_dir")
                for path, why in found.items()]
    try:
        r = verify_targets(data, verifier, n_samples=n_samples)
    except Exception as exc:  # DataError (wrong verifier), missing files, ...
        return [Finding("error", f"data directory {data_dir} cannot be checked", f"{type(exc).__name__}: {exc}",
                        "eagle3kit data --out DIR --verifier NAME  # make the data with eagle3kit", "data_dir")]
    findings = supervision_findings(data, verifier)
    numbers = (f"targets from the stored last state vs the verifier's logits on {r['tokens']} tokens: argmax agree "
               f"{r['argmax_agree']:.1%}, max |diff| {r['max_abs_diff']:.3g} (tolerance {r['tolerance']})")
    if r["ok"]:
        return [Finding("info", f"data directory {data_dir}: every hidden-state file is usable and the last "
                        "hidden state is pre-norm", numbers, "", "data_dir"), *findings]
    return [Finding("error", f"data directory {data_dir}: stored last hidden state does not give the verifier's "
                    "logits", numbers + "; a normed state would be normed twice by speculators",
                    "store the last decoder layer's output before the final norm, then rebuild the directory",
                    "data_dir"), *findings]
