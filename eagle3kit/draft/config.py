"""Build the EAGLE-3 draft config and model from a verifier, resolve the attention implementation, explain fields.

The draft decoder config comes from speculators' own ``create_transformer_layer_config`` (the same function
``speculators train`` uses), so a config built here matches the one the distributed trainer builds for the same run.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import speculators.models.attention  # noqa: F401  (registers simple_flex_attention with transformers)
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.models.utils import resolve_target_layer_ids
from speculators.proposals.greedy import GreedyTokenProposalConfig
from speculators.train.cli import create_transformer_layer_config
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from eagle3kit import validate
from eagle3kit.atomic import atomic_dir
from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.device import resolve_device
from eagle3kit.errors import UserError
from eagle3kit.logs import quiet
from eagle3kit.verifier import Verifier, resolve

# DraftSpec fields whose default is speculators' CLI default (speculators.train.config.schema.DraftArgs), so that
# the same run built here and by `speculators train` gives the same config.json (tests/test_config.py checks them).
SPECULATORS_CLI_FIELDS = ("num_layers", "draft_arch", "hidden_act", "sliding_window", "full_attention_indices",
                          "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output", "embed_requires_grad",
                          "ttt_steps")


@dataclass
class DraftSpec:
    """Everything a user chooses about the draft. ``None`` / ``"auto"`` mean: derive it and say how."""

    verifier: str = "smollm2"
    num_layers: int = 1
    draft_arch: str = "llama"  # "llama" | "qwen3"
    draft_vocab_size: int | None = None  # None: the verifier's vocab (no t2d/d2t)
    aux_layer_ids: list[int] | None = None  # None: speculators' default [2, L//2, L-3]
    ttt_steps: int = 3
    attn_implementation: str = "auto"  # "auto" | "sdpa" | "eager" | "simple_flex_attention" | "flex_attention"
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    training: bool = True
    hidden_act: str = "silu"
    sliding_window: int = 2048
    full_attention_indices: list[int] = field(default_factory=list)
    norm_before_residual: bool = True
    norm_before_fc: bool = True
    fc_norm: bool = False
    norm_output: bool = True
    embed_requires_grad: bool = False


@dataclass(frozen=True)
class AttentionChoice:
    implementation: str
    reason: str
    source: str  # "user" | "auto rule"


@dataclass
class DraftBuild:
    """A built draft config with where each value came from."""

    spec: DraftSpec
    verifier: Verifier
    config: object  # Eagle3SpeculatorConfig
    attention: AttentionChoice
    device: str
    sources: dict[str, str]

    @property
    def aux_layer_ids(self) -> list[int]:
        return list(self.config.eagle_aux_hidden_state_layer_ids)


def registered_attention_implementations() -> list[str]:
    """Attention implementations the installed transformers + speculators register (plus eager)."""
    return sorted({"eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()})


def resolve_attention(requested: str = "auto", device: str = "cpu", training: bool = True) -> AttentionChoice:
    """Pick the draft's attention implementation for this device, or check an explicit one."""
    if requested == BLOCK_SPARSE:
        raise UserError(f"attn_implementation={BLOCK_SPARSE!r} is eagle3kit's CPU training step, not a draft "
                        "attention: speculators' model (its trainer, vLLM, any decode) would hand it a dense mask; "
                        "leave the draft's --attn at auto (sdpa on a CPU) and eagle3kit train uses it by itself "
                        "(--attention).")
    if requested != "auto":
        known = registered_attention_implementations()
        if requested not in known:
            raise UserError(
                f"attn_implementation={requested!r} is not registered in the installed transformers/speculators; "
                f"use one of {known} (or 'auto'), e.g. `--attn sdpa`."
            )
        return AttentionChoice(requested, "chosen by you; `eagle3kit doctor` checks it against this device", "user")
    if device.startswith("cuda"):
        return AttentionChoice(
            "simple_flex_attention",
            "CUDA: speculators' own flex path (BlockMask, compiled kernel, sparse) is the fastest and what "
            "`speculators train` uses by default",
            "auto rule",
        )
    why = "flex attention has no backward on CPU" if training else "flex attention is uncompiled and slow on CPU"
    return AttentionChoice("sdpa", f"CPU: {why}; sdpa takes the dense boolean mask and trains", "auto rule")


def draft_ttt_steps(config: Eagle3SpeculatorConfig | dict) -> int:
    """The TTT steps (draft tokens per round) the config's proposal method asks for; ``config`` may also be a saved
    ``config.json`` read as a dict."""
    if isinstance(config, dict):
        return int(config["speculators_config"]["proposal_methods"][0]["speculative_tokens"])
    return int(config.speculators_config.proposal_methods[0].speculative_tokens)


def set_attention(config: Eagle3SpeculatorConfig, implementation: str | None) -> Eagle3SpeculatorConfig:
    """Make the draft layers of ``config`` use ``implementation`` (None: unset, as a hand-built config); in place."""
    config.transformer_layer_config._attn_implementation = implementation  # noqa: SLF001
    return config


def with_attention(config: Eagle3SpeculatorConfig, implementation: str | None) -> Eagle3SpeculatorConfig:
    """A deep copy of a draft config whose layers use ``implementation`` (None: unset, as a hand-built config)."""
    return set_attention(copy.deepcopy(config), implementation)


def _layer_config(verifier: Verifier, spec: DraftSpec):
    with quiet(stdout=True):
        return create_transformer_layer_config(
            verifier_name_or_path=verifier.config_source,
            num_layers=spec.num_layers,
            draft_arch=spec.draft_arch,
            hidden_act=spec.hidden_act,
            sliding_window=spec.sliding_window,
            full_attention_indices=list(spec.full_attention_indices),
        )


def check_draft_vocab_size(size: int | None, vocab: int) -> None:
    """A draft vocabulary must be 1..the verifier's vocab (None: the verifier's whole vocab)."""
    if size is not None and not (validate.RULES["draft_vocab_size"].fits(size) and size <= vocab):
        raise UserError(f"draft_vocab_size={size} must be in 1..{vocab} (the verifier's vocab); pass e.g. "
                        f"`--draft-vocab-size {min(vocab, 2048)}`, or leave it out for the verifier's whole vocab.")


def resolve_aux_layer_ids(verifier: Verifier | str, ids: list[int] | None = None) -> list[int]:
    """The verifier layers the draft reads: ``ids`` checked, or speculators' default ``[2, L//2, L-3]``.

    speculators' own ``resolve_target_layer_ids`` decides (the same function ``speculators train`` uses).
    """
    v = resolve(verifier)
    try:
        with quiet():  # it warns that the default was taken; the explanation table says so
            return list(resolve_target_layer_ids(None if ids is None else list(ids), v.config_source))
    except ValueError as exc:
        raise UserError(f"aux_layer_ids: {exc}; pass layer ids of the verifier (e.g. `--aux-layer-ids 2 10 20`) "
                        "or leave them out for speculators' default.") from None


def _check_spec(spec: DraftSpec, vocab: int) -> None:
    validate.check_all(dataclasses.asdict(spec))
    check_draft_vocab_size(spec.draft_vocab_size, vocab)


def build_config(spec: DraftSpec | None = None, **overrides) -> DraftBuild:
    """Build speculators' ``Eagle3SpeculatorConfig`` for ``spec`` (fields can be given as keyword overrides)."""
    unknown = set(overrides) - {f.name for f in fields(DraftSpec)}
    if unknown:
        raise TypeError(f"Unknown draft setting(s) {sorted(unknown)}; see DraftSpec for the fields.")
    spec = dataclasses.replace(spec or DraftSpec(), **overrides)  # a new spec: the caller's is left as it was
    verifier = resolve(spec.verifier)
    text = verifier.text_config
    _check_spec(spec, text.vocab_size)
    device = resolve_device(spec.device)
    attention = resolve_attention(spec.attn_implementation, device, spec.training)

    layer_config = _layer_config(verifier, spec)
    aux = resolve_aux_layer_ids(verifier, spec.aux_layer_ids)
    if verifier.has_weights:
        verifier_cfg = VerifierConfig.from_pretrained(verifier.path)
    else:
        verifier_cfg = VerifierConfig(name_or_path=None, architectures=list(verifier.config.architectures or []))
    config = Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config,
        draft_vocab_size=spec.draft_vocab_size or text.vocab_size,
        norm_before_residual=spec.norm_before_residual,
        norm_before_fc=spec.norm_before_fc,
        fc_norm=spec.fc_norm,
        norm_output=spec.norm_output,
        embed_requires_grad=spec.embed_requires_grad,
        eagle_aux_hidden_state_layer_ids=aux,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=spec.ttt_steps)],
            default_proposal_method="greedy",
            verifier=verifier_cfg,
        ),
    )
    set_attention(config, attention.implementation)
    return DraftBuild(spec, verifier, config, attention, device, _sources(spec))


def _sources(spec: DraftSpec) -> dict[str, str]:
    """Where each user-facing setting came from: 'user' when it differs from the default, else the default's name."""
    default = DraftSpec()
    out = {}
    for f in fields(DraftSpec):
        mine, theirs = getattr(spec, f.name), getattr(default, f.name)
        if f.name in ("aux_layer_ids", "draft_vocab_size") and mine is None:
            out[f.name] = "verifier (speculators default)"
        elif f.name == "attn_implementation" and mine == "auto":
            out[f.name] = "auto rule"
        elif mine != theirs:
            out[f.name] = "user"
        elif f.name in SPECULATORS_CLI_FIELDS:
            out[f.name] = "speculators CLI default"
        else:
            out[f.name] = "eagle3kit default"
    return out


def save_config(build: DraftBuild, out_dir: str | Path) -> Path:
    """Write the draft config as speculators' ``config.json`` (atomically)."""
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        build.config.save_pretrained(tmp)
    return out


def spec_from_saved(config_dir: str | os.PathLike, **overrides) -> DraftSpec:
    """The :class:`DraftSpec` of a saved draft ``config.json`` (e.g. notebook 01's), with ``overrides``."""
    path = Path(config_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; run notebook 01 (or `eagle3kit config`) first.")
    cfg = json.loads(path.read_text())
    tl = cfg["transformer_layer_config"]
    kinds = tl.get("layer_types") or []
    spec = DraftSpec(
        verifier=cfg["speculators_config"]["verifier"]["name_or_path"], num_layers=tl["num_hidden_layers"],
        draft_arch=tl["model_type"], ttt_steps=draft_ttt_steps(cfg),
        aux_layer_ids=list(cfg["eagle_aux_hidden_state_layer_ids"]), hidden_act=tl["hidden_act"],
        sliding_window=tl.get("sliding_window") or DraftSpec.sliding_window,
        full_attention_indices=[i for i, k in enumerate(kinds) if k == "full_attention"],
        **{k: cfg[k] for k in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output",
                                "embed_requires_grad")},
    )
    return dataclasses.replace(spec, **overrides)
