"""The training forward of speculators' EAGLE-3 draft at the BlockMask's sparsity, for a CPU.

:func:`block_sparse_forward` computes what ``Eagle3DraftModel.forward`` computes when it returns a loss (the loss
and every per-TTT-step metric, keyed as speculators keys them), with the model's own modules and speculators' own
mask, mask extension, losses and accuracy counts, and changes that leave the loss and the gradients equal
(``tests/test_forward.py`` holds it to speculators' dense path at 1e-5 relative):

- attention is :data:`~eagle3kit.attention.block_sparse.NAME` over the BlockMask, built without vmap;
- ``lm_head``, the loss and the accuracy run only on the rows that carry loss at that TTT step (or whose draft is
  still correct, for the conditional accuracy), and the verifier's target logits only on the rows any step reads;
- past TTT step 0 a row attends only to step 0's keys and its own, so the draft computes there only the rows whose
  chain reaches a loss at that step or later (:mod:`eagle3kit.attention.rows`);
- the draft's argmax over every row, which teacher forcing discards, is not taken;
- the padding after the last document is cut to the ``ttt_steps - 1`` rows a still-correct draft can reach (the
  collator pads with zeros; a padding row attends only to itself and carries no loss).

:func:`speculators_forward` is speculators' own forward (the dense path): the reference, and the path the
rehearsal compares with speculators' trainer bit for bit. :func:`forward_for` picks one by name.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from functools import partial

import torch
from speculators.losses import compound_loss, exp_loss_decay
from speculators.models.eagle3.attention import extend_mask_for_draft_tokens
from speculators.models.metrics import compute_accuracy_single_step

from eagle3kit.attention.block_mask import eagle_block_mask
from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.attention.rows import DraftRows, rows_to_compute
from eagle3kit.errors import UserError

SPECULATORS = "speculators"  # speculators' own forward with the draft's attn_implementation (dense sdpa on a CPU)
PATHS = ("auto", BLOCK_SPARSE, SPECULATORS)  # TrainSettings.attention (`plan --attention` is another thing: the GPU's)

Forward = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


def speculators_forward(model, batch: dict[str, torch.Tensor], ttt_steps: int, ttt_step_loss_decay: float,
                        loss_config) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """speculators' ``Eagle3DraftModel.forward`` on a collated batch: (loss, metrics)."""
    _, loss, metrics = model(**batch, ttt_steps=ttt_steps, ttt_step_loss_decay=ttt_step_loss_decay,
                             loss_config=loss_config)
    return loss, metrics


@contextlib.contextmanager
def attention(model, implementation: str) -> Iterator[None]:
    """The draft's layers use ``implementation`` inside the block; the config is restored after (exports, config.json
    and speculators' own forward never see it)."""
    config = model.config.transformer_layer_config
    before = config._attn_implementation  # noqa: SLF001
    config._attn_implementation = implementation  # noqa: SLF001
    try:
        yield
    finally:
        config._attn_implementation = before  # noqa: SLF001


def _needed_target_rows(loss_mask: torch.Tensor, ttt_steps: int) -> torch.Tensor:
    """[N] bool: rows whose target any TTT step reads: loss rows, and rows up to ``ttt_steps - 1`` after one (the
    conditional accuracy compares a still-correct draft with the target ``t`` rows on)."""
    need = loss_mask.clone()
    for t in range(1, ttt_steps):
        need[t:] |= loss_mask[:-t]
    return need


def _without_padding(batch: dict[str, torch.Tensor], ttt_steps: int) -> dict[str, torch.Tensor]:
    """The batch up to ``ttt_steps - 1`` rows past its last document (speculators' collator packs documents from the
    start and pads the rest with zeros, document id -1)."""
    n = batch["document_ids"].shape[1]
    used = int((batch["document_ids"][0] != -1).sum())
    keep = min(n, max(used, 1) + ttt_steps - 1)
    if keep == n:
        return batch
    return {k: v[:, :keep] if v.dim() >= 2 and v.shape[1] == n else v for k, v in batch.items()}


def block_sparse_forward(model, batch: dict[str, torch.Tensor], ttt_steps: int, ttt_step_loss_decay: float,
                         loss_config, *, loss_rows: bool = True, chain_rows: bool = True, cut_padding: bool = True
                         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(loss, metrics) of speculators' training forward, computed at the mask's sparsity (module docstring).
    Each change but the attention can be turned off, to be measured alone (``bench/train_step.py``): ``loss_rows``
    (lm_head, loss and targets on every row), ``chain_rows`` (every row at every TTT step), ``cut_padding``."""
    if cut_padding:
        batch = _without_padding(batch, ttt_steps)
    hidden_states, input_ids = batch["hidden_states"], batch["input_ids"]
    device, n = hidden_states.device, hidden_states.shape[1]
    position_ids = batch.get("position_ids")
    if position_ids is None:
        position_ids = 1 + torch.arange(n, dtype=torch.long, device=device).unsqueeze(0)
    loss_mask = batch.get("loss_mask")
    loss_mask = (torch.ones(n, dtype=torch.bool, device=device) if loss_mask is None
                 else loss_mask[0].to(torch.bool))
    documents = batch["document_ids"].squeeze(0).to(device)
    full_mask = eagle_block_mask(documents) if model.uses_full_attn else None
    window_mask = eagle_block_mask(documents, model.sliding_window) if model.uses_sliding_window_attn else None

    if model.input_norm is not None:
        hidden_states = model.input_norm(hidden_states)
    if model.fc_norm is not None:
        chunks = hidden_states.chunk(len(model.fc_norm), dim=-1)
        hidden_states = torch.cat([norm(c) for norm, c in zip(model.fc_norm, chunks, strict=True)], dim=-1)
    hidden_states = model.fc(hidden_states)

    need = _needed_target_rows(loss_mask, ttt_steps) if loss_rows else torch.ones_like(loss_mask)
    target_row = torch.cumsum(need, 0) - 1  # row j's place among the computed targets (where need[j])
    with torch.no_grad():
        targets = model.verifier_lm_head(model.verifier_norm(batch["verifier_last_hidden_states"][0, need]))
    every = torch.arange(n, device=device)
    chain = rows_to_compute(loss_mask, ttt_steps) if chain_rows else [every] * ttt_steps
    draft_rows = DraftRows(n, [every, *chain[1:]])
    keys_only = _complement(chain[0], n)
    prev_correct = loss_mask.clone()
    loss = torch.tensor(0.0, device=device)
    metrics: dict[str, torch.Tensor] = {}
    ids = input_ids[0]
    decay = partial(exp_loss_decay, gamma=ttt_step_loss_decay)
    slot = every  # where each position's row sits among the rows the last step computed
    with attention(model, BLOCK_SPARSE):
        for step in range(ttt_steps):
            here = draft_rows.rows[step]
            draft_rows.step = step
            if step:
                hidden_states = hidden_states.index_select(1, slot[here])
            with torch.no_grad():  # teacher forcing: row i reads token i + step, 0 past the end (speculators')
                embeds = model.embed_tokens(torch.cat([ids[step:], ids.new_zeros(step)])[here][None])
            positions = position_ids[:, here] + step
            hidden_states = torch.cat([embeds, hidden_states], dim=-1)
            position_embeddings = model.rotary_emb(hidden_states, positions)
            last = len(model.layers) - 1
            for index, layer in enumerate(model.layers):
                mask = window_mask if index in model.sliding_window_indices else full_mask
                if step == 0 and index == last and keys_only.numel():  # rows reaching no loss: keys, values only
                    k, v = keys_and_values(layer, hidden_states[:, keys_only], _rows_of(position_embeddings,
                                                                                        keys_only))
                    draft_rows.rows[0], draft_rows.keys_only = chain[0], (keys_only, k, v)
                    hidden_states, positions = hidden_states[:, chain[0]], positions[:, chain[0]]
                    position_embeddings = _rows_of(position_embeddings, chain[0])
                    here = chain[0]
                hidden_states = layer(hidden_states, attention_mask=mask, position_ids=positions,
                                      position_embeddings=position_embeddings, draft_rows=draft_rows)
                draft_rows.keys_only = None
            if model.config.norm_output:
                hidden_states = model.norm(hidden_states)
                normed = hidden_states
            else:
                normed = model.norm(hidden_states)
            slot = torch.full((n,), -1, dtype=torch.long, device=device)
            slot[here] = torch.arange(here.shape[0], device=device)

            # speculators' align_for_step: draft row i (< n - step) against target row i + step
            rows = (torch.nonzero(loss_mask[step:] | prev_correct[: n - step]).squeeze(1) if loss_rows
                    else every[: n - step])
            logits = model.lm_head(normed[0, slot[rows]])[None]
            step_targets = targets[target_row[rows + step]][None]
            step_mask = loss_mask[rows + step][None]
            step_loss, terms = compound_loss(logits, step_targets, step_mask,
                                             torch.full_like(step_mask, step, dtype=torch.long), loss_config,
                                             decay_fn=decay)
            still_correct = prev_correct[rows][None]
            counts = compute_accuracy_single_step(torch.argmax(logits, -1), torch.argmax(step_targets, -1), step_mask,
                                                  still_correct)
            prev_correct[rows] = still_correct[0]
            loss = loss + step_loss
            metrics.update(_step_metrics(step, step_loss, terms, counts))
            full_mask = extend_mask_for_draft_tokens(full_mask) if full_mask is not None else None
            window_mask = extend_mask_for_draft_tokens(window_mask) if window_mask is not None else None
    metrics["loss_sum"] = loss.detach().clone()
    metrics["loss_total"] = torch.tensor(1.0, device=device)
    return loss, metrics


def _complement(rows: torch.Tensor, n: int) -> torch.Tensor:
    """The positions of ``0..n-1`` not in ``rows``."""
    keep = torch.ones(n, dtype=torch.bool, device=rows.device)
    keep[rows] = False
    return torch.nonzero(keep).squeeze(1)


def _rows_of(position_embeddings: tuple[torch.Tensor, torch.Tensor], rows: torch.Tensor):
    """(cos, sin) [1, n, D] of ``rows`` only."""
    return tuple(x[:, rows] for x in position_embeddings)


def keys_and_values(layer, hidden_states: torch.Tensor, position_embeddings) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values ``layer`` makes of ``hidden_states`` before its attention, as its own forward makes them:
    speculators' first layer normalizes the embedding half and the hidden half apart
    (``Eagle3FirstLayerMixin``), a later layer normalizes its input; a Qwen3 attention normalizes its keys; the
    rotary embedding is the one the layer's modeling module applies."""
    if hasattr(layer, "hidden_norm"):
        embeds, hidden = hidden_states.split(hidden_states.shape[2] // 2, dim=-1)
        x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)
    else:
        x = layer.input_layernorm(hidden_states)
    attn = layer.self_attn
    shape = (*x.shape[:-1], -1, attn.head_dim)
    key = attn.k_proj(x).view(shape)
    key = (attn.k_norm(key) if hasattr(attn, "k_norm") else key).transpose(1, 2)
    value = attn.v_proj(x).view(shape).transpose(1, 2)
    cos, sin = position_embeddings
    _, key = sys.modules[type(attn).__module__].apply_rotary_pos_emb(key, key, cos, sin)
    return key, value


def _step_metrics(step: int, loss: torch.Tensor, terms: dict[str, torch.Tensor], counts) -> dict[str, torch.Tensor]:
    """One TTT step's counted metrics under speculators' names (``compute_metrics``)."""
    full_correct, full_total, cond_correct, cond_total = counts
    one = torch.tensor(1.0, device=loss.device)
    out = {f"loss_{step}_sum": loss.detach().clone(), f"loss_{step}_total": one}
    for name, value in terms.items():
        out[f"{name}_{step}_sum"], out[f"{name}_{step}_total"] = value, one.clone()
    out.update({f"full_acc_{step}_sum": full_correct, f"full_acc_{step}_total": full_total,
                f"cond_acc_{step}_sum": cond_correct, f"cond_acc_{step}_total": cond_total})
    return out


def forward_for(path: str) -> Forward:
    """The training forward a resolved attention path names."""
    return {BLOCK_SPARSE: block_sparse_forward, SPECULATORS: speculators_forward}[path]


def resolve_path(requested: str, device: str, draft_attention: str) -> str:
    """``auto``: the block-sparse path on a CPU when the draft's own attention takes a dense mask (sdpa, eager),
    speculators' forward elsewhere (flex on a GPU skips the empty blocks itself)."""
    if requested not in PATHS:
        raise UserError(f"attention={requested!r}: use one of {', '.join(PATHS)} (`--attention speculators` keeps "
                        "speculators' own dense forward).")
    if requested != "auto":
        return requested
    dense = draft_attention in ("sdpa", "eager")
    return BLOCK_SPARSE if device == "cpu" and dense else SPECULATORS
