"""Start the draft from the verifier's own weights instead of speculators' random initialisation.

speculators initialises the draft's decoder layer, ``fc`` and final norm at random (only the embedding and lm_head
come from the verifier). On a small budget the draft then spends most of its steps learning what the verifier
already knows. :func:`warm_start` copies one verifier decoder layer into each draft layer (for the first layer,
into the hidden-state half of q/k/v; the token-embedding half keeps its random init), sets ``fc`` to pass the last
aux layer (the deepest by default) through, and takes the final norm from the verifier. Everything stays trainable
and the model is still speculators' ``Eagle3DraftModel``: checkpoints, export and vLLM serving are unchanged;
``speculators train`` starts from the same weights through ``from_pretrained`` (see :mod:`eagle3kit.train.launch`).

Measured on SmolLM2-135M with the demo recipe (400 steps, 2 CPU cores): see ``bench/warm_start.py``.
"""

from __future__ import annotations

import torch
from speculators.utils.loading import load_model_layers

from eagle3kit.draft.config import DraftBuild
from eagle3kit.errors import UserError

_LAYER_TENSORS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")


def resolve_layer(layer: int, n_layers: int) -> int:
    """``layer`` as a verifier layer index (negative counts from the end: -1 is the last layer)."""
    index = layer + n_layers if layer < 0 else layer
    if not 0 <= index < n_layers:
        raise UserError(f"warm_start_layer={layer}: the verifier has {n_layers} decoder layers "
                         f"(use 0..{n_layers - 1}, or -1 for the last).")
    return index


def verifier_layer_weights(build: DraftBuild, layer: int) -> dict[str, torch.Tensor]:
    """The tensors of verifier decoder layer ``layer`` and its final norm (read with speculators' loader)."""
    names = [f"layers.{layer}.{t}.weight" for t in _LAYER_TENSORS] + ["norm.weight"]
    found = load_model_layers(names, build.verifier.require_path())
    missing = sorted(set(names) - set(found))
    if missing:
        raise UserError(f"The verifier at {build.verifier.path} has no tensor(s) {missing}; warm start needs a "
                         "Llama-style decoder layer (q/k/v/o_proj, gate/up/down_proj, two RMSNorms).")
    return {k.removeprefix(f"layers.{layer}."): v for k, v in found.items()}


@torch.no_grad()
def warm_start(model: torch.nn.Module, build: DraftBuild, layer: int = -1) -> int:
    """Copy verifier decoder layer ``layer`` into ``model``'s decoder layers, fc and norm; return the layer index."""
    text = build.verifier.text_config
    index = resolve_layer(layer, text.num_hidden_layers)
    w = verifier_layer_weights(build, index)
    hidden = text.hidden_size
    mlp = w["mlp.up_proj.weight"].shape
    if tuple(model.layers[0].mlp.up_proj.weight.shape) != tuple(mlp):
        raise UserError(f"The draft's MLP is {tuple(model.layers[0].mlp.up_proj.weight.shape)} and verifier layer "
                         f"{index}'s is {tuple(mlp)}; warm start needs the draft shaped like the verifier's layers.")
    for d in model.layers:
        for name in ("q_proj", "k_proj", "v_proj"):
            target = getattr(d.self_attn, name).weight
            source = w[f"self_attn.{name}.weight"].to(target)
            if target.shape[1] == 2 * hidden:  # first layer: [token embedding | hidden state] inputs
                target[:, hidden:].copy_(source)
            else:
                target.copy_(source)
        for name in ("self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
                     "post_attention_layernorm"):
            target = d.get_submodule(name).weight
            target.copy_(w[f"{name}.weight"].to(target))
        norm = d.hidden_norm if hasattr(d, "hidden_norm") else d.input_layernorm
        norm.weight.copy_(w["input_layernorm.weight"].to(norm.weight))
    # fc: pass the deepest aux layer (the last block of the concatenated aux states) straight through
    fc = model.fc.weight
    fc.zero_()
    fc[:, -hidden:].copy_(torch.eye(hidden, dtype=fc.dtype, device=fc.device))
    model.norm.weight.copy_(w["norm.weight"].to(model.norm.weight))
    return index
