"""The shapes a plan reads: the verifier's (exact parameter counts from a meta-device model) and the draft's (the
real ``Eagle3DraftModel`` of a :class:`~eagle3kit.draft.config.DraftBuild`, on the meta device, counted by
:func:`eagle3kit.draft.explain.parameter_counts`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from speculators.models.eagle3 import Eagle3DraftModel
from transformers import AutoModelForCausalLM

from eagle3kit.draft.config import DraftBuild, draft_ttt_steps
from eagle3kit.draft.explain import parameter_counts
from eagle3kit.logs import quiet


@dataclass(frozen=True)
class VerifierShape:
    """The verifier as the data generation sees it."""

    hidden_size: int
    vocab_size: int
    num_layers: int
    params: int  # all parameters
    active_params: int  # per token (a MoE's routed experts counted k / n_routed)
    q_dim: int = 0  # attention heads x head dim (the attention's FLOPs per cached token)
    kv_per_token: int = 0  # KV-cache elements per token and layer (MLA: the compressed latent + rope key)


@dataclass(frozen=True)
class DraftShape:
    """The draft as the training step sees it (counts from speculators' model, shapes from its config)."""

    hidden_size: int
    intermediate_size: int
    q_dim: int  # heads x head_dim
    kv_dim: int  # kv heads x head_dim
    num_heads: int
    head_dim: int
    num_layers: int
    vocab_size: int  # verifier vocab: embedding rows
    draft_vocab_size: int  # lm_head rows (and the verifier lm_head rows picked by t2d)
    n_aux: int
    ttt_steps: int
    trainable: int
    trainable_2d: int  # what Muon steps (2D weights); the rest goes to AdamW
    frozen_embedding: int
    frozen_heads: int  # lm_head + verifier_lm_head (+ verifier norm)
    norm_before_fc: bool


def verifier_shape(build: DraftBuild) -> VerifierShape:
    """Exact parameter counts of the verifier from its config (a meta-device model: no memory, no weights read)."""
    text = build.verifier.text_config
    with torch.device("meta"), quiet():
        model = AutoModelForCausalLM.from_config(text)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n or n.endswith(".experts"))
    routed, k = getattr(text, "n_routed_experts", None), getattr(text, "num_experts_per_tok", None)
    active = total - experts + (experts * k // routed if experts and routed and k else experts)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    if getattr(text, "kv_lora_rank", None):  # MLA caches one latent and one rope key per token and layer
        kv = text.kv_lora_rank + text.qk_rope_head_dim
    else:
        kv = 2 * getattr(text, "num_key_value_heads", heads) * head_dim
    return VerifierShape(text.hidden_size, text.vocab_size, text.num_hidden_layers, total, active,
                         q_dim=heads * head_dim, kv_per_token=kv)


def draft_shape(build: DraftBuild) -> DraftShape:
    """The draft's shapes and parameter counts from speculators' own model, built on the meta device."""
    with torch.device("meta"), quiet():
        model = Eagle3DraftModel(build.config)
    counts = parameter_counts(model)
    tl, cfg = build.config.transformer_layer_config, build.config
    head_dim = getattr(tl, "head_dim", None) or tl.hidden_size // tl.num_attention_heads
    params = dict(model.named_parameters())
    embedding = params["embed_tokens.weight"].numel()
    trainable_2d = sum(p.numel() for p in params.values() if p.requires_grad and p.ndim == 2)
    return DraftShape(
        hidden_size=tl.hidden_size, intermediate_size=tl.intermediate_size, q_dim=tl.num_attention_heads * head_dim,
        kv_dim=tl.num_key_value_heads * head_dim, num_heads=tl.num_attention_heads, head_dim=head_dim,
        num_layers=tl.num_hidden_layers, vocab_size=tl.vocab_size, draft_vocab_size=cfg.draft_vocab_size,
        n_aux=len(cfg.eagle_aux_hidden_state_layer_ids),
        ttt_steps=draft_ttt_steps(cfg),
        trainable=counts["trainable"], trainable_2d=trainable_2d, frozen_embedding=embedding,
        frozen_heads=counts["frozen"] - embedding, norm_before_fc=bool(cfg.norm_before_fc),
    )
