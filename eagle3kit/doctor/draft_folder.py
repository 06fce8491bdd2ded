"""Check any speculators-format draft folder (an eagle3kit export, a ``speculators train`` output, a downloaded
draft): ``check_draft_folder(path, verifier=None, data_dir=None)`` -> findings; :func:`examine_draft_folder` keeps what
it loaded and measured for the τ verdict. The folder is read by :mod:`eagle3kit.doctor.draft_loader`, a data
directory through :mod:`eagle3kit.doctor.data_facts`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import torch
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.doctor.data_facts import DataFacts, read_data_dir
from eagle3kit.doctor.draft_loader import DraftFolder, load_draft, open_draft, resolve_verifier
from eagle3kit.verifier import Verifier

if TYPE_CHECKING:
    from eagle3kit.doctor.findings import Finding
    from eagle3kit.doctor.trained import Agreement

T = TypeVar("T")


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


def _attempt(findings: list[Finding], check: str, what: str, fix: str, make: Callable[[], T],
             named: bool = True) -> T | None:
    """``make()``, or None with an error finding (``what``, the exception, ``fix``) when it raises: what a later check
    needs and could not have (``named``: the exception's type leads its text)."""
    from eagle3kit.doctor.findings import Finding

    try:
        return make()
    except Exception as exc:  # noqa: BLE001
        findings.append(Finding("error", what, (f"{type(exc).__name__}: {exc}" if named else f"{exc}")[:300], fix,
                                check))
        return None


def examine_draft_folder(path: str | os.PathLike, verifier: str | os.PathLike | None = None,
                         data_dir: str | os.PathLike | None = None, k: int | None = None, measure: bool = True,
                         n_prompts: int = 4, max_new_tokens: int = 32, measure_k: int | None = 1,
                         prompts: list | None = None, before_load: Callable[[Verifier], None] | None = None
                         ) -> DraftCheck:
    """:func:`check_draft_folder`, keeping what it loaded and measured. ``measure_k``: draft positions measured
    (None: the served k); ``prompts``: instead of the data's held-out conversations; ``before_load(verifier)``: called
    once before the verifier's weights are loaded (the CLI states their RAM there, or refuses)."""
    from eagle3kit.doctor import folder_checks as fc
    from eagle3kit.doctor.findings import has_errors
    from eagle3kit.doctor.findings import guarded as findings_guard
    from eagle3kit.doctor.model_checks import serving_findings, shape_findings
    from eagle3kit.doctor.facts import DoctorSubject
    from eagle3kit.doctor.trained import measure as measure_agreement
    from eagle3kit.doctor.trained import trained_findings
    from eagle3kit.doctor.versions import version_findings
    from eagle3kit.draft.config import draft_ttt_steps
    from eagle3kit.verifier import load_model

    folder = open_draft(path)
    findings: list[Finding] = []
    out = DraftCheck(findings, folder)

    guarded = findings_guard(findings, "the folder's config or tensors are not what speculators writes")

    guarded("method", lambda: fc.method_findings(folder))
    guarded("tensors", lambda: fc.nonfinite_findings(folder))
    config = out.config = _attempt(findings, "config", "the draft's config.json does not load as an "
                                   "Eagle3SpeculatorConfig", "re-export the draft with speculators' save_pretrained "
                                   "(eagle3kit: TrainSession.export)",
                                   lambda: Eagle3SpeculatorConfig.from_pretrained(str(folder.path)))
    if config is None:
        return out
    v = out.verifier = _attempt(findings, "verifier", "the verifier cannot be found",
                                "pass --verifier DIR (a local model directory)",
                                lambda: resolve_verifier(folder, verifier))
    if v is None:
        return out
    guarded("layout", lambda: fc.layout_findings(folder, config))
    guarded("shape", lambda: [f for f in shape_findings(DoctorSubject(config, None, v)) if f.check != "vocab"])
    guarded("serving", lambda: serving_findings(DoctorSubject(config, None, v)))
    guarded("vocab", lambda: fc.mapping_file_findings(folder, config))
    guarded("steps", lambda: fc.steps_findings(folder, config, k))
    guarded("context", lambda: fc.context_findings(config, v))
    if data_dir is not None:
        out.data = _attempt(findings, "data", f"data directory {data_dir} cannot be read", "pass a directory made by "
                            "`eagle3kit data`, or by speculators' pipeline with the draft's verifier",
                            lambda: read_data_dir(data_dir, config.draft_vocab_size, v), named=False)
        if out.data is not None:
            guarded("data", lambda: fc.data_findings(folder, config, v, out.data))
    guarded("versions", version_findings)
    if has_errors([f for f in findings if f.check in ("config", "shape", "layout", "vocab")]):
        return out  # the weights would not load, or load into the wrong places: the measurement would mislead
    if before_load is not None and v.has_weights:
        before_load(v)
    out.draft = _attempt(findings, "load", "speculators cannot load the draft",
                         "re-export the draft with speculators' save_pretrained", lambda: load_draft(folder, config, v))
    if out.draft is None:
        return out

    def embedding() -> list:  # the verifier's weights, loaded once: for its embedding here, then the measurement
        out.verifier_model = load_model(v)
        return fc.embedding_findings(folder, v, out.verifier_model)

    if v.has_weights:
        guarded("embedding", embedding)
    if measure and out.verifier_model is not None:
        conversations = prompts or (out.data.conversations if out.data else None)
        steps = measure_k or k or draft_ttt_steps(config)

        def measured() -> list:
            out.agreement = measure_agreement(out.draft, v, conversations, n_prompts, max_new_tokens, steps,
                                              verifier_model=out.verifier_model)
            return trained_findings(out.agreement)

        guarded("trained", measured)
    return out
