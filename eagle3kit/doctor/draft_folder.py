"""Open any speculators-format draft folder (an eagle3kit export, a ``speculators train`` output, a downloaded draft)
and check it: ``check_draft_folder(path, verifier=None, data_dir=None)`` -> findings.

What a data directory holds (aux layer ids, vocab mapping, verifier, held-out conversations) is read through one
adapter, :func:`read_data_dir`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file
from speculators import SpeculatorModel
from speculators.models.eagle3 import Eagle3SpeculatorConfig

from eagle3kit.data.loader import held_out_conversations
from eagle3kit.data.directory import DataDir
from eagle3kit.data.vocab import load_mapping
from eagle3kit.draft.config import with_attention
from eagle3kit.errors import UserError
from eagle3kit.logs import quiet
from eagle3kit.verifier import Verifier, resolve

if TYPE_CHECKING:
    from eagle3kit.doctor.findings import Finding
    from eagle3kit.doctor.trained import Agreement

CONFIG = "config.json"
BEST = "checkpoint_best"  # speculators train: a symlink to the best epoch's folder
RUN_FILE = "run.yaml"  # speculators train: the resolved run config, next to the epoch folders


class NotADraftError(UserError):
    """A folder that holds no speculators-format draft."""


@dataclass
class DraftFolder:
    """A draft folder as found on disk: its raw config, its tensors, and the run that trained it when recorded."""

    path: Path
    raw: dict
    tensors: dict[str, torch.Tensor]
    run: dict = field(default_factory=dict)  # speculators' run.yaml (flattened keys), {} when absent


def locate(path: str | os.PathLike) -> Path:
    """The folder holding the draft's config.json: ``path`` itself, or in a ``speculators train`` output folder its
    ``checkpoint_best``, else its last epoch folder."""
    root = Path(path)
    if not root.is_dir():
        raise NotADraftError(f"{root} is not a folder; pass the draft's folder (with config.json and "
                             "model.safetensors).")
    if (root / CONFIG).exists():
        return root
    if (root / BEST / CONFIG).exists():
        return (root / BEST).resolve()
    epochs = sorted((int(p.name), p) for p in root.iterdir() if p.name.isdigit() and (p / CONFIG).exists())
    if epochs:
        return epochs[-1][1]
    raise NotADraftError(f"{root} holds no draft: no config.json (nor a speculators train checkpoint folder); pass "
                         "the folder an export or `speculators train` wrote.")


def _flatten(tree: dict, out: dict | None = None) -> dict:
    out = {} if out is None else out
    for key, value in tree.items():
        _flatten(value, out) if isinstance(value, dict) else out.setdefault(key, value)
    return out


def read_run(draft_dir: Path) -> dict:
    """speculators train's run.yaml (in the draft folder or its parent), flattened to its leaf keys; {} if none."""
    import yaml  # lazy: only speculators outputs have one

    for folder in (draft_dir, draft_dir.parent):
        if (folder / RUN_FILE).exists():
            return _flatten(yaml.safe_load((folder / RUN_FILE).read_text()) or {})
    return {}


def open_draft(path: str | os.PathLike) -> DraftFolder:
    """Read a draft folder's config and tensors; a folder that is not a draft raises :class:`NotADraftError`."""
    import json

    folder = locate(path)
    try:
        raw = json.loads((folder / CONFIG).read_text())
    except json.JSONDecodeError as exc:
        raise NotADraftError(f"{folder / CONFIG} is not JSON ({exc}); it is not a draft's config.") from exc
    if "speculators_model_type" not in raw:
        raise NotADraftError(f"{folder / CONFIG} has no speculators_model_type: not a speculators-format draft "
                             "(convert it with `speculators convert`, or pass the draft's folder).")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise NotADraftError(f"{folder} has a draft config but no *.safetensors weights; copy the whole folder.")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return DraftFolder(folder, raw, tensors, read_run(folder))


def resolve_verifier(folder: DraftFolder, verifier: str | os.PathLike | None) -> Verifier:
    """``verifier`` (a name or a directory), else the one the draft's config names; a :class:`UserError` if it
    cannot be read locally."""
    named = ((folder.raw.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
    wanted = verifier if verifier is not None else named
    if wanted is None:
        raise UserError(f"{folder.path / CONFIG} names no verifier (speculators_config.verifier); pass --verifier.")
    return resolve(wanted)


def load_draft(folder: DraftFolder, config: Eagle3SpeculatorConfig, verifier: Verifier):
    """The draft through speculators' ``SpeculatorModel.from_pretrained``, its verifier-owned weights from
    ``verifier`` (sdpa attention, as the CPU decode loop needs), in float32 like the verifier the doctor runs
    (a bfloat16 folder would not take float32 hidden states)."""
    config = with_attention(config, "sdpa")
    config.speculators_config.verifier.name_or_path = verifier.path
    with quiet():
        return SpeculatorModel.from_pretrained(str(folder.path), config=config).float().eval()


@dataclass
class DataFacts:
    """What the doctor needs of a data directory."""

    verifier: str
    aux_layer_ids: list[int]
    t2d: torch.Tensor | None  # the mapping for the draft's vocab size; None when the draft uses the full vocab
    d2t: torch.Tensor | None
    conversations: list[list[dict]]  # held out of training
    aux_source: str = "manifest"  # or "measured": a directory without a manifest, its aux slices matched to layers


def read_data_dir(data_dir: str | os.PathLike, draft_vocab_size: int | None = None,
                  verifier: Verifier | None = None) -> DataFacts:
    """The one adapter between the doctor and a data directory (its manifest, mapping and held-out conversations).
    A directory without a manifest (speculators' pipeline) is read with ``verifier`` (the draft's) and its aux layers
    are measured: which verifier layer each stored slice is (:func:`eagle3kit.data.supervision.audit_aux`)."""
    from eagle3kit.data.supervision import audit_aux  # lazy: only directories without a manifest need it

    d = DataDir.open(data_dir, None if DataDir.open(data_dir).has_manifest else verifier)
    ref = d.require_verifier()
    aux, source = d.aux_layer_ids, "manifest"
    if not d.has_manifest:
        aux, source = audit_aux(d, ref)["matched"], "measured"
    vocab = d.manifest.verifier.vocab_size if d.has_manifest else resolve(ref).text_config.vocab_size
    t2d = d2t = None
    if draft_vocab_size is not None and draft_vocab_size < vocab:
        t2d, d2t = load_mapping(d, draft_vocab_size, vocab)
    return DataFacts(ref, list(aux), t2d, d2t, held_out_conversations(d), source)


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


def examine_draft_folder(path: str | os.PathLike, verifier: str | os.PathLike | None = None,
                         data_dir: str | os.PathLike | None = None, k: int | None = None, measure: bool = True,
                         n_prompts: int = 4, max_new_tokens: int = 32, measure_k: int | None = 1,
                         prompts: list | None = None, before_load: Callable[[Verifier], None] | None = None
                         ) -> DraftCheck:
    """:func:`check_draft_folder`, keeping what it loaded and measured. ``measure_k``: draft positions measured
    (None: the served k); ``prompts``: instead of the data's held-out conversations; ``before_load(verifier)``: called
    once before the verifier's weights are loaded (the CLI states their RAM there, or refuses)."""
    from eagle3kit.doctor import folder_checks as fc  # lazy: the checks import the verifier's and data's stages
    from eagle3kit.doctor.findings import Finding, has_errors
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
    try:
        config = out.config = Eagle3SpeculatorConfig.from_pretrained(str(folder.path))
    except Exception as exc:
        findings.append(Finding("error", "the draft's config.json does not load as an Eagle3SpeculatorConfig",
                                f"{type(exc).__name__}: {exc}"[:300], "re-export the draft with speculators' "
                                "save_pretrained (eagle3kit: TrainSession.export)", "config"))
        return out
    try:
        v = out.verifier = resolve_verifier(folder, verifier)
    except Exception as exc:
        findings.append(Finding("error", "the verifier cannot be found", f"{type(exc).__name__}: {exc}"[:300],
                                "pass --verifier DIR (a local model directory)", "verifier"))
        return out
    guarded("layout", lambda: fc.layout_findings(folder, config))
    guarded("shape", lambda: [f for f in shape_findings(DoctorSubject(config, None, v)) if f.check != "vocab"])
    guarded("serving", lambda: serving_findings(DoctorSubject(config, None, v)))
    guarded("vocab", lambda: fc.mapping_file_findings(folder, config))
    guarded("steps", lambda: fc.steps_findings(folder, config, k))
    guarded("context", lambda: fc.context_findings(config, v))
    if data_dir is not None:
        try:
            out.data = read_data_dir(data_dir, config.draft_vocab_size, v)
        except Exception as exc:
            findings.append(Finding("error", f"data directory {data_dir} cannot be read", f"{exc}"[:300],
                                    "pass a directory made by `eagle3kit data`, or by speculators' pipeline with "
                                    "the draft's verifier", "data"))
        if out.data is not None:
            guarded("data", lambda: fc.data_findings(folder, config, v, out.data))
    guarded("versions", version_findings)
    if has_errors([f for f in findings if f.check in ("config", "shape", "layout", "vocab")]):
        return out  # the weights would not load, or load into the wrong places: the measurement would mislead
    if before_load is not None and v.has_weights:
        before_load(v)
    try:
        out.draft = load_draft(folder, config, v)
    except Exception as exc:
        findings.append(Finding("error", "speculators cannot load the draft", f"{type(exc).__name__}: {exc}"[:300],
                                "re-export the draft with speculators' save_pretrained", "load"))
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
