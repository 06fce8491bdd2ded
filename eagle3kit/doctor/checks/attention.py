"""Doctor checks of attention and loss on a device: which mask the draft builds, whether its backend consumes it.

The mask kind is measured (:mod:`eagle3kit.doctor.checks.facts`); what each backend consumes is read from its source
(transformers' eager adds the mask, sdpa takes bool or float, speculators' flex path passes a BlockMask,
transformers' flex_attention adds a dense tensor to the scores). ``eagle3kit probe`` measures the consequences.
"""

from __future__ import annotations

import torch
from speculators.losses.utils import _FUSED_LOSS_FN_MAP

from eagle3kit.attention.block_sparse import NAME as BLOCK_SPARSE
from eagle3kit.doctor.findings import Finding
from eagle3kit.draft.config import registered_attention_implementations, resolve_attention
from eagle3kit.masks.eagle_mask import BLOCK, block_size_problem, round_up_to_block

FLEX = ("simple_flex_attention", "flex_attention")
CONSUMES = {  # mask kinds each backend handles correctly
    "eager": {"float additive"},
    "sdpa": {"bool dense", "float additive"},
    "simple_flex_attention": {"BlockMask"},
    "flex_attention": {"BlockMask", "float additive"},
    BLOCK_SPARSE: {"BlockMask"},
}
SET_ATTN = 'config.transformer_layer_config._attn_implementation = "{impl}"'
EAGER_LOSS = 'loss_config=speculators.losses.resolve_loss_config("kl_div", "eager")'
MISMATCH_WHY = {  # why a backend fails on a mask kind it does not consume
    "flex_attention": "transformers' flex_attention adds a dense tensor to the scores (score + mask), so a "
                      "boolean mask adds 1/0 instead of blocking, and its compiled kernel killed the CPU "
                      "process (SIGSEGV, SIGABRT or SIGBUS across runs of `eagle3kit probe`)",
    "eager": "eager attention adds the mask to the scores: a bool mask adds 1/0 and blocks nothing",
    "sdpa": "scaled_dot_product_attention needs a Tensor mask (TypeError: 'attn_mask' must be Tensor, not "
            "BlockMask): the bug of a hand-built config that 'sdpa' seemed to fix",
    BLOCK_SPARSE: f"{BLOCK_SPARSE} is eagle3kit's CPU training attention: it takes the BlockMask eagle3kit's training "
                  "step builds, and speculators' model builds a BlockMask only for 'simple_flex_attention', so in "
                  "speculators' trainer, in vLLM or in a decode it refuses the dense mask in the first forward "
                  "(DenseMaskRefused); TrainSession and `eagle3kit train` use it on a CPU without the config naming it",
}


def recommended_attention(device: str, training: bool) -> str:
    """The doctor's rule is the auto rule (:func:`~eagle3kit.draft.config.resolve_attention`): sdpa on a CPU (flex has
    no CPU backward, and runs uncompiled and slow there without one), speculators' flex path on CUDA."""
    return resolve_attention("auto", device, training).implementation


def attention_findings(facts: dict, device: str, training: bool, seq_len: int | None,
                       ttt_steps: int) -> list[Finding]:
    """Findings for the facts of :func:`~eagle3kit.doctor.checks.facts.attention_facts` on ``device``."""
    out = []
    cpu = not device.startswith("cuda")
    fix = SET_ATTN.format(impl=recommended_attention(device, training))
    backend, mask = facts["backend"], facts["mask"]
    if facts["set"] is None:
        out.append(Finding("warning", "_attn_implementation is unset",
                           f"speculators turns None into {facts['resolved']!r} (it builds a {mask}); what None means "
                           "changed between speculators versions, so a hand-built LlamaConfig silently picks a backend",
                           fix, "attn_unset"))
    known = registered_attention_implementations()
    if backend not in known:
        out.append(Finding("error", f"attention implementation {backend!r} is not registered",
                           f"the installed transformers/speculators register {known}", fix, "attn_unknown"))
        return out
    if backend not in CONSUMES:
        out.append(Finding("warning", f"{backend!r}: eagle3kit does not know which mask it consumes",
                           f"the draft builds a {mask} mask for it; EAGLE-3 needs document + draft-diagonal masking",
                           f"eagle3kit probe --backends {backend}", "attn_untested"))
    elif mask not in CONSUMES[backend]:
        detail = MISMATCH_WHY.get(backend, f"{backend} cannot take a {mask}; the step fails inside attention")
        if facts["resolved"] != backend:
            detail += (f"; the model was built for {facts['resolved']!r} (speculators picks the mask function in "
                       "__init__) and the backend was changed afterwards")
        out.append(Finding("error", f"the draft builds a {mask} mask but its layers call {backend!r}",
                           f"{backend} consumes {sorted(CONSUMES[backend])}; {detail}",
                           fix + "  # then build Eagle3DraftModel(config)", "mask_mismatch"))
    if backend in FLEX and cpu:
        if training:
            out.append(Finding("error", f"{backend} with gradients on {device}",
                               "FlexAttention does not support backward on CPU (NotImplementedError in the first "
                               "forward that needs gradients)", SET_ATTN.format(impl="sdpa"), "flex_backward_cpu"))
        else:
            out.append(Finding("info", f"{backend} forward on {device} is unfused",
                               "without CUDA, flex attention materialises the full score matrix (correct, slow)",
                               SET_ATTN.format(impl="sdpa"), "flex_cpu_forward"))
    if mask == "BlockMask" and ttt_steps > 1:
        out += block_size_findings(seq_len, ttt_steps)
    if mask == "BlockMask" and cpu:
        out += blockmask_memory_findings(seq_len, device)
    return out


# create_block_mask uncompiled evaluates the whole Q x KV grid: 10 GB RSS (26.8 s) at 32,768 tokens on a 2-core CPU,
# i.e. about 10 bytes per query-key pair (measured; docs/failures.md row blockmask-cpu-memory).
GRID_BYTES_PER_PAIR = 10
GRID_WARN_BYTES = 2**30


def blockmask_memory_findings(seq_len: int | None, device: str) -> list[Finding]:
    """Without CUDA speculators builds the BlockMask uncompiled (its forward is compiled only on CUDA), which
    costs memory and time quadratic in total_seq_len."""
    if seq_len is None or seq_len * seq_len * GRID_BYTES_PER_PAIR <= GRID_WARN_BYTES:
        return []
    gb = seq_len * seq_len * GRID_BYTES_PER_PAIR / 1e9
    return [Finding("warning", f"building the BlockMask for total_seq_len {seq_len} on {device} needs ~{gb:.0f} GB",
                    f"without CUDA speculators calls create_block_mask uncompiled, which evaluates the whole "
                    f"{seq_len} x {seq_len} query-key grid (~{GRID_BYTES_PER_PAIR} bytes a pair; tens of seconds "
                    "per batch at 32k tokens)", SET_ATTN.format(impl="sdpa") + "  # or a shorter total_seq_len",
                    "blockmask_memory")]


def block_size_findings(seq_len: int | None, ttt_steps: int) -> list[Finding]:
    """A BlockMask extended over TTT steps needs total_seq_len to be a multiple of the block size."""
    if seq_len is None:
        return [Finding("info", f"BlockMask: total_seq_len must be a multiple of {BLOCK}",
                        f"with ttt_steps={ttt_steps} the mask is extended in {BLOCK}-token blocks",
                        f"pack batches to a multiple of {BLOCK} tokens (e.g. --total-seq-len 4096)", "block_size")]
    problem = block_size_problem(seq_len, ttt_steps)
    if problem is None:
        return []
    fit = round_up_to_block(seq_len)
    return [Finding("error", f"total_seq_len {seq_len} is not a multiple of {BLOCK} with ttt_steps={ttt_steps}",
                    problem, f"pad/pack batches to {fit} tokens (CollateFn(max_len={fit}, ...)), or "
                    + SET_ATTN.format(impl="sdpa"), "block_size")]


def loss_findings(device: str, training: bool, loss) -> list[Finding]:
    """speculators' default (fused, Triton) loss needs CUDA."""
    if isinstance(loss, dict):
        fused = any(fn in _FUSED_LOSS_FN_MAP.values() for fn, _w in loss.values())
    else:
        fused = loss in ("fused", None)
    if device.startswith("cuda") and torch.cuda.is_available():
        return []
    if fused:
        return [Finding("error", "fused (Triton) loss without CUDA",
                        "speculators' default loss (loss_config=None or implementation 'fused') is a Triton kernel; "
                        "with no GPU it fails with '0 active drivers'", EAGER_LOSS, "fused_loss")]
    if loss == "auto" and training:
        return [Finding("info", "pass an eager loss on CPU",
                        "Eagle3DraftModel.forward(loss_config=None) uses the fused Triton loss, which needs CUDA",
                        EAGER_LOSS, "fused_loss")]
    return []
