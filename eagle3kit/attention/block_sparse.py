"""Block-sparse attention for training on a CPU, driven by the BlockMask speculators builds: ``block_sparse_cpu``.

On a GPU speculators hands its EAGLE-3 BlockMask to flex attention, which skips the empty blocks; on a CPU flex
attention has no backward, so training falls back to sdpa over a dense mask of which ~95 % is thrown away. This
function computes only what the BlockMask keeps, in plain torch ops that autograd differentiates: each query block
against the key blocks its row lists (partial blocks masked by the mask_mod, full blocks not), and each TTT step's
keys as one product per position (:mod:`.plan`). It is registered in speculators' ``AttentionInterface`` under
:data:`NAME`; a dense mask handed to it is refused in one sentence.
"""

from __future__ import annotations

import weakref

import torch
from speculators.models.attention import ALL_ATTENTION_FUNCTIONS
from torch.nn.attention.flex_attention import BlockMask

from eagle3kit.attention.plan import Plan, make_plan
from eagle3kit.attention.rows import DraftRows
from eagle3kit.errors import UserError

NAME = "block_sparse_cpu"

_PLANS: weakref.WeakKeyDictionary[BlockMask, tuple[tuple[int, int], Plan]] = weakref.WeakKeyDictionary()


class DenseMaskRefused(UserError):
    """``block_sparse_cpu`` was handed something other than a BlockMask."""


def plan_for(block_mask: BlockMask, n: int, kv_len: int) -> Plan:
    """The plan of ``block_mask`` for these lengths, made once per mask (every layer of a TTT step shares it)."""
    cached = _PLANS.get(block_mask)
    if cached is None or cached[0] != (n, kv_len):
        with torch.no_grad():
            cached = ((n, kv_len), make_plan(block_mask, n, kv_len))
        _PLANS[block_mask] = cached
    return cached[1]


def _refuse(mask: object) -> DenseMaskRefused:
    what = f"a dense {tuple(mask.shape)} {mask.dtype} mask" if isinstance(mask, torch.Tensor) else repr(mask)
    return DenseMaskRefused(
        f"attn_implementation={NAME!r} takes speculators' BlockMask but was handed {what}: speculators' model builds "
        "a BlockMask only for 'simple_flex_attention' and a dense mask for any other name, so this name works only "
        "inside eagle3kit's training step (TrainSession, `eagle3kit train`); elsewhere use 'sdpa' on a CPU or "
        "'simple_flex_attention' on a GPU."
    )


def block_sparse_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: BlockMask | None, scaling: float | None = None, dropout: float = 0.0,
                           draft_rows: DraftRows | None = None, **_kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` [1, H, N, D], ``key``/``value`` [1, Hkv, (t+1)N, D]
    (the draft's keys of TTT steps 0..t, as speculators' cache holds them); returns ([1, N, H, D], None) as sdpa's
    does. With ``draft_rows`` (no cache), the call holds only the rows that TTT step computes, and the keys of earlier
    steps come from it (:mod:`.rows`)."""
    if not isinstance(attention_mask, BlockMask):
        raise _refuse(attention_mask)
    if dropout:
        raise UserError(f"{NAME} has no attention dropout (the draft's is 0); set attention_dropout=0.")
    if query.shape[0] != 1:
        raise UserError(f"{NAME} takes one packed sequence (batch 1, as speculators packs them); got batch "
                        f"{query.shape[0]}.")
    if draft_rows is None:
        n = query.shape[2]
        return _attend(query, key, value, plan_for(attention_mask, n, key.shape[2]), scaling), None
    query, key, value = draft_rows.full(module.layer_idx, query, key, value)
    out = _attend(query, key, value, plan_for(attention_mask, draft_rows.n, key.shape[2]), scaling)
    return draft_rows.computed(out), None


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, plan: Plan, scaling: float | None
            ) -> torch.Tensor:
    """The attention of every query under ``plan``: [1, N, H, D]. Each query block is a batch of torch's CPU flash
    kernel against the key blocks its row keeps (the mask_mod's verdicts as an additive mask); the TTT keys join by
    log-sum-exp (:class:`_WithDiagonal`)."""
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    dtype = _compute_dtype(query, key, value)
    query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
    group, size, blocks, width = heads // kv_heads, plan.size, plan.blocks, plan.slots * plan.size
    scale = scaling if scaling is not None else dim ** -0.5
    padded = blocks * size

    def by_block(x: torch.Tensor) -> torch.Tensor:  # [kv_heads, group, n, ...] -> [blocks, kv_heads, group*size, ...]
        if padded != n:
            x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 3) + (0, padded - n))
        x = x.reshape(kv_heads, group, blocks, size, *x.shape[3:]).permute(2, 0, 1, 3, *range(4, x.dim() + 1))
        return x.reshape(blocks, kv_heads, group * size, *x.shape[4:])

    q = by_block(query[0].reshape(kv_heads, group, n, dim)).contiguous()
    index = plan.kv_pos.reshape(-1).clamp(max=n - 1)
    k = key[0, :, :n].index_select(1, index).reshape(kv_heads, blocks, width, dim).transpose(0, 1).contiguous()
    v = value[0, :, :n].index_select(1, index).reshape(kv_heads, blocks, width, dim).transpose(0, 1).contiguous()
    bias = _bias(plan, group, query.dtype)
    ttt = plan.ttt
    if ttt:
        diagonal_keys = [by_block(x[0, :, n:].reshape(kv_heads, ttt, n, dim).transpose(1, 2)[:, None]
                                  .expand(kv_heads, group, n, ttt, dim)) for x in (key, value)]
        out = _WithDiagonal.apply(q, k, v, bias, *diagonal_keys, _diagonal_bias(plan, group), scale)
    else:
        out = _WithDiagonal.apply(q, k, v, bias, None, None, None, scale)
    out = out.reshape(blocks, kv_heads, group, size, dim).permute(1, 2, 0, 3, 4).reshape(heads, padded, dim)
    return out[:, :n].transpose(0, 1).unsqueeze(0).contiguous()


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """What sdpa computes in: autocast's dtype where autocast is on (sdpa is one of its ops), else the widest input."""
    device = tensors[0].device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _bias(plan: Plan, group: int, dtype: torch.dtype) -> torch.Tensor:
    """[blocks, 1, group * size, width]: 0 where a query keeps a gathered key, -inf elsewhere (the kernel's mask)."""
    blocks, size, width = plan.blocks, plan.size, plan.slots * plan.size
    keep = plan.allowed[:, None].expand(blocks, group, size, width).reshape(blocks, 1, group * size, width)
    return torch.zeros(keep.shape, dtype=dtype).masked_fill_(~keep, float("-inf"))


def _diagonal_bias(plan: Plan, group: int) -> torch.Tensor:
    """[blocks, 1, group * size, ttt] float32: 0 where a query keeps its TTT key of a step, -inf elsewhere."""
    blocks, size, n = plan.blocks, plan.size, plan.n
    keep = torch.nn.functional.pad(plan.diagonal, (0, 0, 0, blocks * size - n)).reshape(blocks, 1, 1, size, -1)
    keep = keep.expand(blocks, 1, group, size, plan.ttt).reshape(blocks, 1, group * size, plan.ttt)
    return torch.zeros(keep.shape).masked_fill_(~keep, float("-inf"))


class _WithDiagonal(torch.autograd.Function):
    """Flash attention over gathered key blocks, joined by log-sum-exp with one extra key per query and TTT step.

    ``q`` [b, h, L, D], ``k``/``v`` [b, h, W, D], ``bias`` [b, 1, L, W]; ``kd``/``vd`` [b, h, L, t, D] each query's
    own TTT keys and values, ``dbias`` [b, 1, L, t]. The backward runs the kernel's own backward with the joined output
    and log-sum-exp (which makes its softmax the joined one's) and adds the TTT keys' terms, as FlashAttention
    splits keys."""

    @staticmethod
    def forward(ctx, q, k, v, bias, kd, vd, dbias, scale):
        out, lse = _FLASH(q, k, v, attn_mask=bias, scale=scale)
        ctx.scale, ctx.diagonal = scale, kd is not None
        if kd is None:
            ctx.save_for_backward(q, k, v, bias, out, lse)
            return out
        scores = torch.einsum("bhld,bhltd->bhlt", q.float(), kd.float()) * scale + dbias
        joined = torch.logaddexp(lse, torch.logsumexp(scores, -1))
        p = torch.exp(scores - joined[..., None])
        out = (torch.exp(lse - joined)[..., None] * out.float()
               + torch.einsum("bhlt,bhltd->bhld", p, vd.float())).to(q.dtype)
        ctx.save_for_backward(q, k, v, bias, out, joined, kd, vd, p)
        return out

    @staticmethod
    def backward(ctx, dout):
        dout = dout.contiguous()
        q, k, v, bias, out, lse = ctx.saved_tensors[:6]
        dq, dk, dv = _FLASH_BACKWARD(dout, q, k, v, out, lse, 0.0, False, attn_mask=bias, scale=ctx.scale)
        if not ctx.diagonal:
            return dq, dk, dv, None, None, None, None, None
        kd, vd, p = ctx.saved_tensors[6:]
        rows = (dout.float() * out.float()).sum(-1, keepdim=True)
        ds = p * (torch.einsum("bhld,bhltd->bhlt", dout.float(), vd.float()) - rows)
        dq = dq + (torch.einsum("bhlt,bhltd->bhld", ds, kd.float()) * ctx.scale).to(dq.dtype)
        dkd = (torch.einsum("bhlt,bhld->bhltd", ds, q.float()) * ctx.scale).to(kd.dtype)
        dvd = torch.einsum("bhlt,bhld->bhltd", p, dout.float()).to(vd.dtype)
        return dq, dk, dv, None, dkd, dvd, None, None


_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


ALL_ATTENTION_FUNCTIONS.register(NAME, block_sparse_attention)
