"""Checks of a draft folder's files (:class:`~eagle3kit.doctor.checks.draft_loader.DraftFolder`): the method fields the
engines read, the tensors (names, shapes, finite), the saved vocab mapping, the frozen embedding, served k against
the trained TTT steps, the draft's context length, and the data the draft was trained on."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.train.config.schema import LossArgs

from eagle3kit.doctor.checks.facts import DoctorSubject
from eagle3kit.doctor.checks.model import vocab_findings
from eagle3kit.doctor.findings import Finding
from eagle3kit.draft.config import draft_ttt_steps
from eagle3kit.verifier import Verifier, load_model

EAGLE3 = "eagle3"
OPTIONAL = ("embed_tokens.weight",)  # speculators loads it from the verifier when a folder leaves it out
REEXPORT = "re-export the draft with speculators' save_pretrained (eagle3kit: TrainSession.export / save_draft)"


def method_findings(folder) -> list[Finding]:
    """The fields vLLM and SGLang read to pick the draft's method: an EAGLE-3 draft named anything else is served
    with one hidden state instead of three."""
    raw, out = folder.raw, []
    spec = raw.get("speculators_config") or {}
    named = {"speculators_model_type": raw.get("speculators_model_type"), "speculators_config.algorithm":
             spec.get("algorithm"), "architectures": raw.get("architectures")}
    wrong = [f"{k}={v!r}" for k, v in named.items() if not _is_eagle3(k, v)]
    if wrong:
        out.append(Finding("error", f"the draft does not say it is EAGLE-3: {', '.join(wrong)}",
                           "vLLM and SGLang pick the method from these fields; an EAGLE-3 draft served as EAGLE gets "
                           "one hidden state where its fc expects three, and the accept length is 1.0 "
                           "(sgl-project/sglang PR 21272)",
                           'set "speculators_model_type": "eagle3", speculators_config.algorithm "eagle3" and '
                           '"architectures": ["Eagle3DraftModel"]; serve with method eagle3 (SGLang: '
                           "--speculative-algorithm EAGLE3)", "method"))
    methods = spec.get("proposal_methods") or []
    if not methods or int(methods[0].get("speculative_tokens") or 0) < 1:
        out.append(Finding("error", "speculators_config.proposal_methods names no speculative_tokens >= 1",
                           "vLLM reads the served k from the first proposal method", REEXPORT, "method"))
    return out


def _is_eagle3(key: str, value) -> bool:
    if key == "architectures":  # SGLang looks for "Eagle3" in the architecture name
        return isinstance(value, list) and any(EAGLE3 in str(x).lower() for x in value)
    return str(value).lower() == EAGLE3


def nonfinite_findings(folder) -> list[Finding]:
    """Tensors holding NaN or Inf (a float16 overflow, a broken conversion)."""
    bad = [name for name, t in folder.tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    return [Finding("error", f"tensors with NaN/Inf values: {bad[:5]}", "every draft token computed through them is "
                    "garbage (float16 overflows where bfloat16 does not)", "re-export in bfloat16 or float32 from "
                    "a finite model", "tensors")] if bad else []


def expected_tensors(config: Eagle3SpeculatorConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of what speculators' model for ``config`` saves (built on the meta device)."""
    with torch.device("meta"):
        model = Eagle3DraftModel(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith("verifier_")}


def layout_findings(folder, config: Eagle3SpeculatorConfig) -> list[Finding]:
    """The folder's tensors against the model its config builds: a missing one stays at its random initialisation,
    an unexpected one is ignored, a wrong shape does not load."""
    want, have = expected_tensors(config), {k: tuple(t.shape) for k, t in folder.tensors.items()}
    out = []
    missing = sorted(set(want) - set(have) - set(OPTIONAL) - {"d2t", "t2d"})
    unexpected = sorted(set(have) - set(want) - {"d2t", "t2d"})
    if missing:
        out.append(Finding("error", f"{len(missing)} weights missing from the folder: {missing[:4]}",
                           "a weight the model expects but the folder lacks keeps its random initialisation and the "
                           "draft proposes garbage; engines fail to load it or accept nothing "
                           "(vllm-project/speculators issue 1114, vllm-project/vllm issue 54526)", REEXPORT, "layout"))
    if unexpected:
        out.append(Finding("error", f"{len(unexpected)} weights the config has no place for: {unexpected[:4]}",
                           "they are ignored on load: a flag such as fc_norm / norm_before_fc lost from config.json, "
                           "or tensors named by another trainer", "write the flags the weights need into config.json, "
                           "or rename the tensors to speculators' names", "layout"))
    shapes = [f"{k} {have[k]} (config: {want[k]})" for k in sorted(set(want) & set(have)) if have[k] != want[k]]
    if shapes:
        out.append(Finding("error", f"tensor shapes do not fit the config: {shapes[:3]}",
                           "config.json was edited or belongs to another draft; the weights do not load", REEXPORT,
                           "layout"))
    return out


def mapping_file_findings(folder, config: Eagle3SpeculatorConfig) -> list[Finding]:
    """A reduced draft vocab needs d2t and t2d saved, d2t not all zeros, the two consistent."""
    vocab, draft = config.transformer_layer_config.vocab_size, config.draft_vocab_size
    if draft >= vocab:
        return vocab_findings(DoctorSubject(config, None, None)) if draft > vocab else []
    t2d, d2t = folder.tensors.get("t2d"), folder.tensors.get("d2t")
    if t2d is None or d2t is None:
        lost = [n for n, t in (("d2t", d2t), ("t2d", t2d)) if t is None]
        return [Finding("error", f"draft vocab {draft} < verifier vocab {vocab} but {' and '.join(lost)} not saved",
                        "without d2t an engine reads draft id i as verifier id i (the first N ids) and acceptance "
                        "collapses, with no error (NVIDIA-NeMo/Automodel PR 2447)",
                        "model.load_vocab_mappings(t2d, d2t) before save_pretrained (eagle3kit: the data "
                        "directory's d2t-N.npy / t2d-N.npy)", "vocab")]
    if d2t.numel() and not d2t.any():
        return [Finding("error", f"d2t is all zeros for a {draft}-token draft vocab",
                        "every draft id i is read as verifier id i, the first N ids, not the frequent tokens the "
                        "draft was trained on (SafeAILab/EAGLE issue 222)",
                        "save the mapping the draft was trained with: model.load_vocab_mappings(t2d, d2t)", "vocab")]
    return vocab_findings(DoctorSubject(config, SimpleNamespace(t2d=t2d, d2t=d2t), None))


def embedding_findings(folder, verifier: Verifier, verifier_model=None) -> list[Finding]:
    """The saved (frozen) embedding must be the verifier's: the draft reads the verifier's tokens through it
    (``verifier_model``: the verifier already loaded, else it is loaded here)."""
    saved = folder.tensors.get("embed_tokens.weight")
    if saved is None:
        return []
    model = verifier_model if verifier_model is not None else load_model(verifier)
    theirs = model.get_input_embeddings().weight.detach()
    if saved.shape != theirs.shape:
        return []  # layout_findings names the shape
    diff = (saved.float() - theirs.to(saved.dtype).float()).abs().max().item()
    if diff <= 1e-3 * max(theirs.abs().max().item(), 1e-6):
        return []
    return [Finding("error", "the draft's embedding is not the verifier's",
                    f"embed_tokens differs from {verifier.name}'s input embedding by up to {diff:.3g}; a conversion "
                    "that saved a fresh one (or a draft for another verifier) reads every token wrong "
                    "(lightseekorg/TorchSpec issue 38)",
                    "copy the verifier's embedding into the draft (speculators' load_verifier_weights) and "
                    "re-export, or serve with the verifier it was trained for", "embedding")]


def trained_steps(folder) -> int | None:
    """The TTT steps the draft was trained with, when the folder records them (speculators train's run.yaml)."""
    if not folder.run:
        return None
    return int(folder.run.get("ttt_steps", LossArgs.model_fields["ttt_steps"].default))


def steps_findings(folder, config: Eagle3SpeculatorConfig, k: int | None = None) -> list[Finding]:
    """Served k (``k``, else the config's speculative tokens) against the trained TTT steps."""
    served, trained = k or draft_ttt_steps(config), trained_steps(folder)
    if trained is None or served <= trained:
        return []
    return [Finding("warning", f"served k={served} > the {trained} TTT steps the draft was trained with",
                    f"draft positions {trained + 1}..{served} were never trained: they are almost never accepted and "
                    "each costs a draft forward", f"serve with num_speculative_tokens <= {trained}, or train with "
                    f"--ttt-steps {served}", "steps")]


def context_findings(config: Eagle3SpeculatorConfig, verifier: Verifier) -> list[Finding]:
    """A draft whose position range is shorter than the verifier's is served past what it can place."""
    mine = getattr(config.transformer_layer_config, "max_position_embeddings", None)
    theirs = getattr(verifier.text_config, "max_position_embeddings", None)
    if not mine or not theirs or mine >= theirs:
        return []
    return [Finding("warning", f"draft max_position_embeddings {mine} < the verifier's {theirs}",
                    "past that length the draft's positions are out of range: acceptance drops below no speculation "
                    "(sgl-project/sglang issue 6783) or the engine asserts", "set the draft's "
                    f"transformer_layer_config.max_position_embeddings = {theirs} and re-export", "context")]


def data_findings(folder, config: Eagle3SpeculatorConfig, verifier: Verifier, data) -> list[Finding]:
    """The draft against the data directory (:class:`~eagle3kit.doctor.checks.data_facts.DataFacts`) it was trained on:
    aux layer ids, vocab mapping, verifier."""
    out, ids = [], list(config.eagle_aux_hidden_state_layer_ids or [])
    if ids != data.aux_layer_ids:
        whose = "the data's" if data.aux_source == "manifest" else "the data's (measured: it has no manifest)"
        out.append(Finding("error", f"draft aux layer ids {ids} differ from {whose} {data.aux_layer_ids}",
                           "the draft's fc was trained on one set of layers; served, it is fed another and "
                           "accepts about nothing (lightseekorg/tokenspeed PR 526)",
                           f"set eagle_aux_hidden_state_layer_ids = {data.aux_layer_ids}, or re-extract the data "
                           f"with --aux-layer-ids {','.join(map(str, ids))}", "data"))
    if data.t2d is not None and "t2d" in folder.tensors and "d2t" in folder.tensors and not (
            torch.equal(folder.tensors["t2d"].bool(), data.t2d.bool())
            and torch.equal(folder.tensors["d2t"].long(), data.d2t.long())):
        out.append(Finding("error", "the draft's vocab mapping is not the data's",
                           "draft id i names another verifier token than the one the draft was trained to predict",
                           "save the data directory's d2t/t2d into the draft (model.load_vocab_mappings)", "data"))
    if verifier.path and data.verifier and str(data.verifier) != str(verifier.path):
        out.append(Finding("warning", f"the data was made with verifier {data.verifier}, the draft is checked "
                           f"against {verifier.path}", "hidden states of another model do not fit the draft",
                           f"--verifier {data.verifier}", "data"))
    return out
