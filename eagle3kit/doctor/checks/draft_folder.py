"""Check any speculators-format draft folder (an eagle3kit export, a ``speculators train`` output, a downloaded
draft): ``check_draft_folder(path, verifier=None, data_dir=None)`` -> findings; :func:`examine_draft_folder` keeps what
it loaded and measured for the τ verdict. The folder is read by :mod:`eagle3kit.doctor.checks.draft_loader`, a data
directory through :mod:`eagle3kit.doctor.checks.data_facts`; each check runs under one
:class:`~eagle3kit.doctor.findings.Guard`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.doctor.checks import folder as fc
from eagle3kit.doctor.checks.data_facts import DataFacts, read_data_dir
from eagle3kit.doctor.checks.draft_loader import DraftFolder, load_draft, open_draft, resolve_verifier
from eagle3kit.doctor.checks.facts import DoctorSubject
from eagle3kit.doctor.checks.model import serving_findings, shape_findings
from eagle3kit.doctor.checks.trained import Agreement, trained_findings
from eagle3kit.doctor.checks import trained  # called as trained.measure: one name a spy can wrap
from eagle3kit.doctor.checks.versions import version_findings
from eagle3kit.doctor.findings import Finding, Guard, has_errors
from eagle3kit.draft.config import draft_ttt_steps
from eagle3kit import verifier as verifiers  # verifiers.load_model: likewise
from eagle3kit.verifier import Verifier

REEXPORT = "re-export the draft with speculators' save_pretrained (eagle3kit: TrainSession.export)"
BLOCKING = ("config", "shape", "layout", "vocab")  # errors that forbid loading the weights (or measuring them)


@dataclass
class DraftCheck:
    """What one pass over a draft folder found and loaded, shared with the τ verdict (nothing loaded or measured
    twice): the findings, the draft and verifier models, the data's facts and the one measurement."""

    findings: list[Finding]
    folder: DraftFolder
    config: Eagle3SpeculatorConfig | None = None
    verifier: Verifier | None = None
    draft: SpeculatorModel | None = None  # None when its config, shapes or layout forbid loading it
    verifier_model: torch.nn.Module | None = None  # loaded once, for the embedding check and the measurement
    data: DataFacts | None = None
    agreement: Agreement | None = None  # None when not measured


def check_draft_folder(path: str | os.PathLike, verifier: str | os.PathLike | None = None,
                       data_dir: str | os.PathLike | None = None, k: int | None = None, measure: bool = True,
                       n_prompts: int = 4, max_new_tokens: int = 32) -> list:
    """Every check of a draft folder, each guarded (a check that cannot run is a finding itself).

    ``verifier``: a name or directory (default: the one the config names). ``data_dir``: also compare the aux layer
    ids and vocab mapping with the data's, and take the held-out prompts from it. ``k``: the
    served speculative tokens (default: the config's). ``measure``: decide "trained or
    an initialisation" from the draft's agreement with the verifier against an untrained draft of the same shape.
    A folder that is not a draft raises :class:`NotADraftError`.
    """
    return examine_draft_folder(path, verifier, data_dir, k, measure, n_prompts, max_new_tokens).findings


def _file_checks(folder: DraftFolder, config: Eagle3SpeculatorConfig, v: Verifier, k: int | None
                 ) -> list[tuple[str, Callable[[], list[Finding]]]]:
    """The checks of the folder's files against its config and verifier, by name, in the order they run."""
    subject = DoctorSubject(config, None, v)
    return [("layout", lambda: fc.layout_findings(folder, config)),
            ("shape", lambda: [f for f in shape_findings(subject) if f.check != "vocab"]),
            ("serving", lambda: serving_findings(subject)),
            ("vocab", lambda: fc.mapping_file_findings(folder, config)),
            ("steps", lambda: fc.steps_findings(folder, config, k)),
            ("context", lambda: fc.context_findings(config, v))]


def examine_draft_folder(path: str | os.PathLike, verifier: str | os.PathLike | None = None,
                         data_dir: str | os.PathLike | None = None, k: int | None = None, measure: bool = True,
                         n_prompts: int = 4, max_new_tokens: int = 32, measure_k: int | None = 1,
                         prompts: list | None = None, before_load: Callable[[Verifier], None] | None = None
                         ) -> DraftCheck:
    """:func:`check_draft_folder`, keeping what it loaded and measured. ``measure_k``: draft positions measured
    (None: the served k); ``prompts``: instead of the data's held-out conversations; ``before_load(verifier)``: called
    once before the verifier's weights are loaded (the CLI states their RAM there, or refuses).

    The checks, in order: the folder's method fields and tensors; its config and verifier (what the rest needs);
    :func:`_file_checks`; the data directory's facts against the draft; the version traps; then, unless an error
    forbids loading, the draft loaded, its embedding against the verifier's and the trained-or-not measurement."""
    folder = open_draft(path)
    out = DraftCheck([], folder)
    guard = Guard(out.findings, "the folder's config or tensors are not what speculators writes")
    guard("method", lambda: fc.method_findings(folder))
    guard("tensors", lambda: fc.nonfinite_findings(folder))
    config = out.config = guard.need("config", "the draft's config.json does not load as an Eagle3SpeculatorConfig",
                                     REEXPORT, lambda: Eagle3SpeculatorConfig.from_pretrained(str(folder.path)))
    if config is None:
        return out
    v = out.verifier = guard.need("verifier", "the verifier cannot be found", "pass --verifier DIR (a local model "
                                  "directory)", lambda: resolve_verifier(folder, verifier))
    if v is None:
        return out
    for name, check in _file_checks(folder, config, v, k):
        guard(name, check)
    if data_dir is not None:
        out.data = guard.need("data", f"data directory {data_dir} cannot be read", "pass a directory made by "
                              "`eagle3kit data`, or by speculators' pipeline with the draft's verifier",
                              lambda: read_data_dir(data_dir, config.draft_vocab_size, v), named=False)
        if out.data is not None:
            guard("data", lambda: fc.data_findings(folder, config, v, out.data))
    guard("versions", version_findings)
    if has_errors([f for f in out.findings if f.check in BLOCKING]):
        return out  # the weights would not load, or load into the wrong places: the measurement would mislead
    if before_load is not None and v.has_weights:
        before_load(v)
    out.draft = guard.need("load", "speculators cannot load the draft", REEXPORT, lambda: load_draft(folder, config, v))
    if out.draft is not None and v.has_weights:
        guard("embedding", lambda: _embedding(out))
    if measure and out.verifier_model is not None:
        guard("trained", lambda: _measured(out, prompts, n_prompts, max_new_tokens, measure_k or k))
    return out


def _embedding(out: DraftCheck) -> list[Finding]:
    """The verifier's weights, loaded once: for its embedding here, then the measurement."""
    out.verifier_model = verifiers.load_model(out.verifier)
    return fc.embedding_findings(out.folder, out.verifier, out.verifier_model)


def _measured(out: DraftCheck, prompts: list | None, n_prompts: int, max_new_tokens: int, k: int | None
              ) -> list[Finding]:
    """Trained or an initialisation, measured on the prompts (else the data's held-out conversations)."""
    conversations = prompts or (out.data.conversations if out.data else None)
    out.agreement = trained.measure(out.draft, out.verifier, conversations, n_prompts, max_new_tokens,
                                      k or draft_ttt_steps(out.config), verifier_model=out.verifier_model)
    return trained_findings(out.agreement)
