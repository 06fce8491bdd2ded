"""Preflight findings for an EAGLE-3 draft: what will fail on this device, why, and the line that fixes it.

``check(config | build | model, batch=None, device=..., training=True)`` never raises on a broken setup: every check
runs guarded, and a check that cannot run becomes a finding itself. The mask kind is *measured* by asking
speculators' own model code to build a small mask; what each backend consumes is read from its source
(transformers' eager adds the mask, sdpa takes bool or float, speculators' flex path passes a BlockMask, transformers'
flex_attention adds a dense tensor to the scores). ``eagle3kit probe`` measures the consequences.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eagle3kit.masks.eagle_mask import BLOCK
from eagle3kit.doctor.facts import _subject, _Subject, _ttt_steps, attention_facts, mask_kind_of, with_attention
from eagle3kit.doctor.findings import SEVERITIES, Finding, format_findings, has_errors, to_frame

__all__ = ["CONSUMES", "SEVERITIES", "Finding", "attention_facts", "check", "check_data_dir", "format_findings",
           "has_errors", "mask_kind_of", "to_frame", "with_attention"]

FLEX = ("simple_flex_attention", "flex_attention")
CONSUMES = {  # mask kinds each backend handles correctly
    "eager": {"float additive"},
    "sdpa": {"bool dense", "float additive"},
    "simple_flex_attention": {"BlockMask"},
    "flex_attention": {"BlockMask", "float additive"},
}
SET_ATTN = 'config.transformer_layer_config._attn_implementation = "{impl}"'
EAGER_LOSS = 'loss_config=speculators.losses.resolve_loss_config("kl_div", "eager")'


# ------------------------------------------------------------------------------------------------------ checks
def _check_attention(s: _Subject, facts: dict, device: str, training: bool, seq_len: int | None,
                     ttt_steps: int) -> list[Finding]:
    from eagle3kit.draft.config import registered_attention_implementations

    out = []
    cpu = not device.startswith("cuda")
    good = "sdpa" if cpu and training else "simple_flex_attention"
    backend, mask = facts["backend"], facts["mask"]
    if facts["set"] is None:
        out.append(Finding("warning", "_attn_implementation is unset",
                           f"speculators turns None into {facts['resolved']!r} (it builds a {mask}); what None means "
                           "changed between speculators versions, so a hand-built LlamaConfig silently picks a backend",
                           SET_ATTN.format(impl=good), "attn_unset"))
    known = registered_attention_implementations()
    if backend not in known:
        out.append(Finding("error", f"attention implementation {backend!r} is not registered",
                           f"the installed transformers/speculators register {known}", SET_ATTN.format(impl=good),
                           "attn_unknown"))
        return out
    if backend not in CONSUMES:
        out.append(Finding("warning", f"{backend!r}: eagle3kit does not know which mask it consumes",
                           f"the draft builds a {mask} mask for it; EAGLE-3 needs document + draft-diagonal masking",
                           f"eagle3kit probe --backends {backend}", "attn_untested"))
    elif mask not in CONSUMES[backend]:
        detail = {
            "flex_attention": "transformers' flex_attention adds a dense tensor to the scores (score + mask), so a "
                              "boolean mask adds 1/0 instead of blocking, and its compiled kernel killed the CPU "
                              "process (SIGSEGV, SIGABRT or SIGBUS across runs of `eagle3kit probe`)",
            "eager": "eager attention adds the mask to the scores: a bool mask adds 1/0 and blocks nothing",
            "sdpa": "scaled_dot_product_attention needs a Tensor mask (TypeError: 'attn_mask' must be Tensor, not "
                    "BlockMask): the bug of a hand-built config that 'sdpa' seemed to fix",
        }.get(backend, f"{backend} cannot take a {mask}; the step fails inside attention")
        if facts["resolved"] != backend:
            detail += (f"; the model was built for {facts['resolved']!r} (speculators picks the mask function in "
                       "__init__) and the backend was changed afterwards")
        out.append(Finding("error", f"the draft builds a {mask} mask but its layers call {backend!r}",
                           f"{backend} consumes {sorted(CONSUMES[backend])}; {detail}",
                           SET_ATTN.format(impl=good) + "  # then build Eagle3DraftModel(config)", "mask_mismatch"))
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
        if seq_len is None:
            out.append(Finding("info", f"BlockMask: total_seq_len must be a multiple of {BLOCK}",
                               f"with ttt_steps={ttt_steps} the mask is extended in {BLOCK}-token blocks",
                               f"pack batches to a multiple of {BLOCK} tokens (e.g. --total-seq-len 4096)",
                               "block_size"))
        elif seq_len % BLOCK:
            fit = -(-seq_len // BLOCK) * BLOCK
            out.append(Finding("error", f"total_seq_len {seq_len} is not a multiple of {BLOCK} with "
                               f"ttt_steps={ttt_steps}",
                               "speculators extends the BlockMask by whole blocks, so TTT step 1 fails with "
                               "'block_mask was created for a larger length'",
                               f"pad/pack batches to {fit} tokens (CollateFn(max_len={fit}, ...)), or "
                               + SET_ATTN.format(impl="sdpa"), "block_size"))
    return out


def _check_loss(device: str, training: bool, loss) -> list[Finding]:
    from speculators.losses.utils import _FUSED_LOSS_FN_MAP

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


def _check_weights(s: _Subject) -> list[Finding]:
    if s.model is None:
        return [Finding("info", "verifier-owned weights not checked", "a config has no weights",
                        "doctor.check(eagle3kit.draft.config.build_model(build))", "weights")]
    out = []
    for name in ("embed_tokens", "lm_head", "verifier_lm_head", "verifier_norm"):
        w = getattr(s.model, name).weight
        if w.is_meta:
            return [Finding("info", "weights are on the meta device", "shapes only", "", "weights")]
        if torch.isnan(w).any():
            out.append(Finding("error", f"{name}.weight is NaN: verifier weights never loaded",
                               "speculators initialises verifier-owned weights to NaN so a missing load is visible; "
                               "the loss and every draft token would be garbage", "model.load_verifier_weights()",
                               "weights"))
    return out


def _check_shapes(s: _Subject) -> list[Finding]:
    out, cfg, tl, v = [], s.config, s.config.transformer_layer_config, s.verifier_text
    ids = list(cfg.eagle_aux_hidden_state_layer_ids or [])
    if v is None:
        out.append(Finding("warning", "verifier config not found",
                           "hidden size, vocab and aux layer ids cannot be compared with the verifier",
                           "build with eagle3kit.draft.config.build_config(verifier=...)", "verifier"))
    else:
        for field in ("hidden_size", "vocab_size"):
            mine, theirs = getattr(tl, field), getattr(v, field)
            if mine != theirs:
                out.append(Finding("error", f"draft {field} {mine} differs from the verifier's {theirs}",
                                   "the draft reads the verifier's hidden states and shares its embedding/lm_head",
                                   f"config.transformer_layer_config.{field} = {theirs}", "shape"))
        n = v.num_hidden_layers
        bad = [i for i in ids if not 0 <= i < n]
        if bad:
            out.append(Finding("error", f"aux layer ids {bad} out of range for a {n}-layer verifier",
                               f"aux id i is the input of decoder layer i (vLLM collects ids 0..{n - 1})",
                               f"config.eagle_aux_hidden_state_layer_ids = {[2, n // 2, n - 3]}", "aux_ids"))
        if len(set(ids)) != len(ids):
            out.append(Finding("warning", f"aux layer ids {ids} repeat a layer", "the same state is fed twice",
                               f"config.eagle_aux_hidden_state_layer_ids = {[2, n // 2, n - 3]}", "aux_ids"))
    if s.model is not None and ids and s.model.fc.in_features != len(ids) * tl.hidden_size:
        out.append(Finding("error", f"fc takes {s.model.fc.in_features} inputs but {len(ids)} aux ids x "
                           f"{tl.hidden_size} = {len(ids) * tl.hidden_size}", "the config changed after building",
                           "rebuild the model from the config", "aux_ids"))
    out += _check_vocab(s)
    return out


def _check_vocab(s: _Subject) -> list[Finding]:
    cfg, vocab = s.config, s.config.transformer_layer_config.vocab_size
    draft = cfg.draft_vocab_size
    if draft > vocab:
        return [Finding("error", f"draft_vocab_size {draft} > verifier vocab {vocab}", "d2t cannot map it",
                        f"config.draft_vocab_size = {vocab}", "vocab")]
    if draft == vocab:
        return []
    m = s.model
    if m is None:
        return [Finding("info", f"draft vocab {draft} < {vocab}: t2d/d2t needed", "not checked without a model",
                        "build_model(build, t2d=t2d, d2t=d2t)", "vocab")]
    fix = "model.load_vocab_mappings(t2d, d2t)  # from d2t-N.npy / t2d-N.npy"
    if m.t2d is None or m.d2t is None or m.t2d.is_meta:
        return [] if m.t2d is not None and m.t2d.is_meta else [
            Finding("error", "t2d/d2t missing", "a reduced draft vocab needs both", fix, "vocab")]
    t2d, d2t = m.t2d.cpu(), m.d2t.cpu()
    if t2d.shape != (vocab,) or d2t.shape != (draft,):
        return [Finding("error", f"t2d {tuple(t2d.shape)} / d2t {tuple(d2t.shape)} do not fit vocab {vocab} / "
                        f"draft {draft}", "d2t has one offset per draft token, t2d one flag per verifier token",
                        fix, "vocab")]
    targets = torch.arange(draft) + d2t
    ok = bool(((targets >= 0) & (targets < vocab)).all()) and int(t2d.sum()) == draft
    ok = ok and bool(t2d[targets.clamp(0, vocab - 1)].all()) and targets.unique().numel() == draft
    if not ok:
        return [Finding("error", "t2d and d2t disagree",
                        f"t2d marks {int(t2d.sum())} tokens (need {draft}); every draft id i must map to a distinct "
                        "target i + d2t[i] that t2d marks (all zeros: mappings never loaded)", fix, "vocab")]
    return []


def _check_batch(s: _Subject, batch: dict, device: str) -> list[Finding]:
    tl, out = s.config.transformer_layer_config, []
    n_aux = len(s.config.eagle_aux_hidden_state_layer_ids or [0, 0, 0])
    dtype = s.model.fc.weight.dtype if s.model is not None and not s.model.fc.weight.is_meta else torch.float32
    missing = [k for k in ("hidden_states", "input_ids", "document_ids") if k not in batch]
    if missing:
        return [Finding("error", f"batch lacks {missing}", "Eagle3DraftModel.forward needs them",
                        "use speculators' CollateFn output (it adds document_ids)", "batch")]
    ids = batch["input_ids"]
    want = {"hidden_states": (1, ids.shape[-1], n_aux * tl.hidden_size), "input_ids": (1, ids.shape[-1]),
            "document_ids": (1, ids.shape[-1]), "loss_mask": (1, ids.shape[-1]), "position_ids": (1, ids.shape[-1]),
            "verifier_last_hidden_states": (1, ids.shape[-1], tl.hidden_size)}
    for key, shape in want.items():
        if key in batch and tuple(batch[key].shape) != shape:
            out.append(Finding("error", f"batch[{key!r}] has shape {tuple(batch[key].shape)}, expected {shape}",
                               f"packed batches are [1, total_seq_len, ...]; hidden_states is n_aux ({n_aux}) x "
                               f"hidden ({tl.hidden_size}) wide", "CollateFn(max_len, hidden_size, "
                               f"num_target_layers={n_aux}, dtype=...)", "batch"))
    normed_first = {"hidden_states": s.config.norm_before_fc or s.config.fc_norm, "verifier_last_hidden_states": True}
    for key, cast in normed_first.items():
        if key in batch and batch[key].dtype != dtype:
            where = "an RMSNorm casts it first (works, but costs a copy)" if cast else "it goes straight into fc: " \
                "a matmul of mismatched dtypes fails"
            out.append(Finding("warning" if cast else "error", f"batch[{key!r}] is {batch[key].dtype}, the draft "
                               f"is {dtype}", where, f'batch["{key}"] = batch["{key}"].to({dtype})  # or '
                               f"CollateFn(dtype={dtype})", "batch"))
    if ids.is_floating_point() or (ids.numel() and int(ids.max()) >= tl.vocab_size):
        out.append(Finding("error", "input_ids are not token ids of the verifier vocab",
                           f"need an integer tensor with values < {tl.vocab_size}", "input_ids = input_ids.long()",
                           "batch"))
    wrong = {k for k, v in batch.items() if isinstance(v, torch.Tensor) and v.device.type != device.split(":")[0]}
    if wrong:
        out.append(Finding("error", f"batch tensors {sorted(wrong)} are not on {device}", "forward mixes devices",
                           f"batch = {{k: v.to({device!r}) for k, v in batch.items()}}", "batch"))
    return out


# --------------------------------------------------------------------------------------------------- entry points
def check(subject, batch: dict | None = None, device: str = "auto", training: bool = True, loss="auto",
          seq_len: int | None = None, ttt_steps: int | None = None) -> list[Finding]:
    """All findings for an ``Eagle3SpeculatorConfig``, ``DraftBuild`` or ``Eagle3DraftModel`` on ``device``.

    ``loss``: "auto" (eagle3kit picks eager on CPU), "fused", "eager", None (speculators' default: fused) or a
    speculators LossConfig dict. ``seq_len`` defaults to the batch's total_seq_len.
    """
    findings: list[Finding] = []

    def guarded(name: str, fn: Callable[[], list[Finding]]) -> None:
        try:
            findings.extend(fn())
        except Exception as exc:  # a broken setup must give a finding, never a crash
            findings.append(Finding("error", f"{name} check could not run", f"{type(exc).__name__}: {exc}"[:300],
                                    "speculators' own code failed on this config: check the fields it names", name))

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        findings.append(Finding("error", f"device {device!r} but CUDA is not available", "torch sees no GPU",
                                "--device cpu", "device"))
    try:
        s = _subject(subject)
    except Exception as exc:
        return findings + [Finding("error", "not a draft config or model", f"{type(exc).__name__}: {exc}",
                                   "pass an Eagle3SpeculatorConfig, a DraftBuild or an Eagle3DraftModel", "subject")]
    if seq_len is None and batch is not None and "input_ids" in batch:
        seq_len = int(batch["input_ids"].shape[-1])
    try:
        steps = ttt_steps or _ttt_steps(s.config)
    except Exception:
        steps = 3
    facts: dict = {}
    guarded("attention", lambda: facts.update(attention_facts(s)) or _check_attention(
        s, facts, device, training, seq_len, steps))
    guarded("loss", lambda: _check_loss(device, training, loss))
    guarded("weights", lambda: _check_weights(s))
    guarded("shapes", lambda: _check_shapes(s))
    if batch is not None:
        guarded("batch", lambda: _check_batch(s, batch, device))
    return findings


def check_data_dir(data_dir, verifier=None, n_samples: int = 2) -> list[Finding]:
    """Check a training-data directory's last-hidden-state convention with ``eagle3kit.data.dataset.verify_targets``.

    speculators applies ``verifier_norm`` to the stored last state itself, so it must be the pre-norm output of the
    last decoder layer: the targets computed from it must reproduce the verifier's own logits.
    """
    try:
        from eagle3kit.data.targets import verify_targets
    except ImportError as exc:
        return [Finding("info", "data-directory check unavailable", f"eagle3kit.data cannot be imported ({exc})",
                        "", "data_dir")]
    try:
        r = verify_targets(data_dir, verifier, n_samples=n_samples)
    except Exception as exc:  # DataError (wrong verifier, no manifest), missing files, ...
        return [Finding("error", f"data directory {data_dir} cannot be checked", f"{type(exc).__name__}: {exc}",
                        "eagle3kit.data.dataset.build_dataset(verifier=..., out_dir=...)", "data_dir")]
    numbers = (f"targets from the stored last state vs the verifier's logits on {r['tokens']} tokens: argmax agree "
               f"{r['argmax_agree']:.1%}, max |diff| {r['max_abs_diff']:.3g} (tolerance {r['tolerance']})")
    if r["ok"]:
        return [Finding("info", f"data directory {data_dir}: last hidden state is pre-norm", numbers, "", "data_dir")]
    return [Finding("error", f"data directory {data_dir}: stored last hidden state does not give the verifier's "
                    "logits", numbers + "; a normed state would be normed twice by speculators",
                    "store the last decoder layer's output before the final norm, then rebuild the directory",
                    "data_dir")]
