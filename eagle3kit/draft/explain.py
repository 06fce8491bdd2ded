"""A draft config explained field by field (value, source, meaning), its parameter counts and memory footprint, and
the attention implementation the ``auto`` rule picks where."""

from __future__ import annotations

import pandas as pd
import torch

from eagle3kit.draft.config import DraftBuild, draft_ttt_steps, resolve_attention


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """Trainable and frozen parameter counts (works on meta-device models)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return {"trainable": trainable, "frozen": frozen, "total": trainable + frozen}


FROZEN = {  # speculators' Eagle3DraftModel: the parameters that come from the verifier and do not train
    "embed_tokens.weight": "the verifier's token embedding: every token of its vocabulary",
    "lm_head.weight": "the draft's output head: the verifier's lm_head rows of the draft vocabulary",
    "verifier_lm_head.weight": "the same rows, the verifier's own head: the training targets",
    "verifier_norm.weight": "the verifier's final norm: the training targets",
}


def frozen_parts(model: torch.nn.Module) -> pd.DataFrame:
    """The frozen parameters one by one (name, shape, count, what it is): what ``params (frozen)`` adds up. The
    embedding scales with the verifier's vocabulary, the two heads with the draft's (works on meta-device models)."""
    rows = [(name, tuple(p.shape), p.numel(), FROZEN.get(name, "")) for name, p in model.named_parameters()
            if not p.requires_grad]
    table = pd.DataFrame(rows, columns=["parameter", "shape", "params", "what"])
    table.loc[len(table)] = ["total", "", int(table["params"].sum()), "params (frozen)"]
    return table.assign(params=table["params"].map("{:,}".format))


def frozen_at(model: torch.nn.Module, draft_vocab_size: int) -> int:
    """The frozen count of the same draft with another draft vocabulary: the embedding and the norm stay, the two
    heads (:data:`FROZEN`) get ``draft_vocab_size`` rows each."""
    heads = sum(p.numel() for n, p in model.named_parameters() if n in ("lm_head.weight", "verifier_lm_head.weight"))
    hidden = model.lm_head.weight.shape[1]
    return parameter_counts(model)["frozen"] - heads + 2 * draft_vocab_size * hidden


def verifier_weights_loaded(model: torch.nn.Module) -> bool:
    """Whether the verifier-owned embedding and ``lm_head`` hold numbers (speculators initialises them to NaN, so a
    forgotten load shows)."""
    return not any(torch.isnan(p).any() for p in (model.embed_tokens.weight, model.lm_head.weight))


def attention_choices(devices: tuple[str, ...] = ("cpu", "cuda")) -> pd.DataFrame:
    """What ``attn_implementation="auto"`` picks on each device, with and without gradients, and why."""
    rows = []
    for device in devices:
        for training in (True, False):
            choice = resolve_attention("auto", device, training)
            rows.append({"device": device, "training": training, "implementation": choice.implementation,
                         "why": choice.reason})
    return pd.DataFrame(rows)


def memory_footprint(model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> pd.DataFrame:
    """Weights, gradients and AdamW state (fp32) of the draft, in GiB."""
    counts = parameter_counts(model)
    width = torch.empty((), dtype=dtype).element_size()
    gib = 1024**3
    rows = [
        ("weights (all)", counts["total"] * width / gib, f"{counts['total']:,} params in {dtype}"),
        ("gradients", counts["trainable"] * width / gib, "trainable params only"),
        ("AdamW state", counts["trainable"] * 8 / gib, "two fp32 moments per trainable param"),
    ]
    df = pd.DataFrame(rows, columns=["item", "GiB", "note"])
    df.loc[len(df)] = ["total", df["GiB"].sum(), "before activations"]
    return df.round({"GiB": 3})


_MEANING = {
    "verifier": "the model the draft proposes tokens for",
    "hidden_size": "draft width; must equal the verifier's (the draft reads its hidden states)",
    "vocab_size": "verifier vocabulary (embedding rows)",
    "draft_vocab_size": "vocabulary the draft predicts over; smaller needs t2d/d2t",
    "num_hidden_layers": "draft decoder layers",
    "num_attention_heads": "attention heads of the draft layer",
    "num_key_value_heads": "KV heads (GQA) of the draft layer",
    "head_dim": "per-head width",
    "intermediate_size": "MLP width: the verifier's own where its config has one (Kimi's dense layers'), else 3 x "
                         "hidden (speculators' fallback for an MoE config without it)",
    "hidden_act": "MLP activation",
    "max_position_embeddings": "longest position the draft's RoPE covers",
    "rope_parameters": "rotary embedding settings copied from the verifier",
    "rms_norm_eps": "RMSNorm epsilon",
    "layer_types": "full or sliding-window attention per draft layer",
    "sliding_window": "window of sliding-attention layers",
    "eagle_aux_hidden_state_layer_ids": "verifier layers whose inputs are fed to the draft (low, mid, high)",
    "ttt_steps": "training-time-test (TTT) steps; the draft tokens proposed per round (k) default to it",
    "norm_before_residual": "normalize the hidden part before the residual in layer 0",
    "norm_before_fc": "RMSNorm over concatenated aux states before the fc projection",
    "fc_norm": "per-aux-layer RMSNorm before fc (exclusive with norm_before_fc)",
    "norm_output": "feed post-norm states across TTT steps (EAGLE 3.1)",
    "embed_requires_grad": "train the (verifier-owned) embedding",
    "_attn_implementation": "attention backend of the draft layers",
}


def explain(build: DraftBuild, model: torch.nn.Module | None = None) -> pd.DataFrame:
    """Every field of the draft config: value, where it came from, what it means (+ parameter counts)."""
    cfg, tl, src = build.config, build.config.transformer_layer_config, build.sources
    verifier = build.verifier
    rows = [
        ("verifier", verifier.path or verifier.config.name_or_path, f"user ({verifier.kind})"),
        ("hidden_size", tl.hidden_size, "verifier"),
        ("vocab_size", tl.vocab_size, "verifier"),
        ("draft_vocab_size", cfg.draft_vocab_size, src["draft_vocab_size"]),
        ("num_hidden_layers", tl.num_hidden_layers, src["num_layers"]),
        ("num_attention_heads", tl.num_attention_heads, "verifier"),
        ("num_key_value_heads", tl.num_key_value_heads, "verifier"),
        ("head_dim", getattr(tl, "head_dim", None), "verifier"),
        ("intermediate_size", tl.intermediate_size, "verifier (speculators rule)"),
        ("hidden_act", tl.hidden_act, src["hidden_act"]),
        ("max_position_embeddings", tl.max_position_embeddings, "verifier"),
        ("rope_parameters", getattr(tl, "rope_parameters", None), "verifier"),
        ("rms_norm_eps", tl.rms_norm_eps, "verifier"),
        ("layer_types", getattr(tl, "layer_types", None), src["full_attention_indices"]),
        ("sliding_window", getattr(tl, "sliding_window", None), src["sliding_window"]),
        ("eagle_aux_hidden_state_layer_ids", cfg.eagle_aux_hidden_state_layer_ids, src["aux_layer_ids"]),
        ("ttt_steps", draft_ttt_steps(cfg), src["ttt_steps"]),
        ("norm_before_residual", cfg.norm_before_residual, src["norm_before_residual"]),
        ("norm_before_fc", cfg.norm_before_fc, src["norm_before_fc"]),
        ("fc_norm", cfg.fc_norm, src["fc_norm"]),
        ("norm_output", cfg.norm_output, src["norm_output"]),
        ("embed_requires_grad", cfg.embed_requires_grad, src["embed_requires_grad"]),
        ("_attn_implementation", build.attention.implementation,
         f"{build.attention.source}: {build.attention.reason}"),
    ]
    df = pd.DataFrame(
        [(name, _fmt(value), source, _MEANING[name]) for name, value, source in rows],
        columns=["field", "value", "source", "meaning"],
    )
    if model is not None:
        counts = parameter_counts(model)
        for key in ("trainable", "frozen"):
            note = "fc, decoder layers, norms" if key == "trainable" else "embedding, lm_head, verifier_lm_head/norm"
            df.loc[len(df)] = [f"params ({key})", f"{counts[key]:,}", "counted", note]
    return df


HEADLINE_FIELDS = ("hidden_size", "vocab_size", "draft_vocab_size", "num_hidden_layers",
                   "eagle_aux_hidden_state_layer_ids", "ttt_steps", "_attn_implementation", "params (trainable)",
                   "params (frozen)")  # a first read's rows: width, vocabularies, depth, aux layers, k, attention


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`explain`'s table a first read needs (:data:`HEADLINE_FIELDS`), in the table's order."""
    return table[table["field"].isin(HEADLINE_FIELDS)]


def differences(table: pd.DataFrame, base: pd.DataFrame, base_name: str = "first draft") -> pd.DataFrame:
    """The rows of :func:`explain`'s ``table`` whose value differs from ``base``'s (the same field), with ``base``'s
    value beside it in a ``base_name`` column: a second draft shown as what changes."""
    before = base.set_index("field")["value"].rename(base_name)
    merged = table.join(before, on="field")
    changed = merged[merged["value"] != merged[base_name]]
    return changed[["field", "value", base_name, "source", "meaning"]].reset_index(drop=True)


def _fmt(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list) and len(value) > 6:
        return f"{value[:3]} ... ({len(value)} items)"
    return str(value)
