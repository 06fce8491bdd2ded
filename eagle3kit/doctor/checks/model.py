"""Doctor checks that the draft fits its verifier and its batch (loaded weights, shapes, aux ids, vocab mapping), and
that the export can be served (head sizes vLLM's CPU build supports)."""

from __future__ import annotations

import torch

from eagle3kit.doctor.checks.facts import DoctorSubject
from eagle3kit.doctor.findings import Finding
from eagle3kit.draft.config import resolve_aux_layer_ids
from eagle3kit.vllm_env import CPU_HEAD_SIZES


def weight_findings(s: DoctorSubject) -> list[Finding]:
    """Verifier-owned weights that speculators left NaN because they were never loaded."""
    if s.model is None:
        return [Finding("info", "verifier-owned weights not checked", "a config has no weights",
                        "doctor.check(eagle3kit.draft.model.build_model(build))", "weights")]
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


def default_aux_fix(s: DoctorSubject) -> str:
    """The line that sets speculators' default aux layer ids for this verifier."""
    try:
        return f"config.eagle_aux_hidden_state_layer_ids = {resolve_aux_layer_ids(s.verifier)}"
    except ValueError as exc:  # speculators' default does not fit a very shallow verifier
        return f"set config.eagle_aux_hidden_state_layer_ids to distinct verifier layers ({exc})"


def shape_findings(s: DoctorSubject) -> list[Finding]:
    """Hidden size, vocab and aux layer ids against the verifier; fc against the aux ids; then the vocab mapping."""
    out, cfg, tl = [], s.config, s.config.transformer_layer_config
    ids = list(cfg.eagle_aux_hidden_state_layer_ids or [])
    if s.verifier is None:
        out.append(Finding("warning", "verifier config not found",
                           "hidden size, vocab and aux layer ids cannot be compared with the verifier",
                           "build with eagle3kit.draft.config.build_config(verifier=...)", "verifier"))
    else:
        v = s.verifier.text_config
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
                               default_aux_fix(s), "aux_ids"))
        if len(set(ids)) != len(ids):
            out.append(Finding("warning", f"aux layer ids {ids} repeat a layer", "the same state is fed twice",
                               default_aux_fix(s), "aux_ids"))
    if s.model is not None and ids and s.model.fc.in_features != len(ids) * tl.hidden_size:
        out.append(Finding("error", f"fc takes {s.model.fc.in_features} inputs but {len(ids)} aux ids x "
                           f"{tl.hidden_size} = {len(ids) * tl.hidden_size}", "the config changed after building",
                           "rebuild the model from the config", "aux_ids"))
    return out + vocab_findings(s)


def vocab_findings(s: DoctorSubject) -> list[Finding]:
    """A reduced draft vocab needs t2d/d2t that agree: each draft id maps to a distinct target that t2d marks."""
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


def head_dim(config) -> int:
    """A decoder config's attention head size (``head_dim``, else hidden size / heads)."""
    return int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def serving_findings(s: DoctorSubject) -> list[Finding]:
    """Head sizes vLLM's CPU attention cannot serve, the draft's or its verifier's (GPU vLLM serves them)."""
    dims = {"draft": head_dim(s.config.transformer_layer_config)}
    if s.verifier is not None:
        dims["verifier"] = head_dim(s.verifier.text_config)
    owners: dict[int, list[str]] = {}
    for who, dim in dims.items():
        if dim not in CPU_HEAD_SIZES:
            owners.setdefault(dim, []).append(f"the {who}'s")
    sizes = ", ".join(map(str, CPU_HEAD_SIZES))
    return [Finding("warning", f"vLLM's CPU build cannot serve head_dim={dim}; GPU vLLM can",
                    f"{' and '.join(who)} head_dim is {dim}; vLLM's CPU attention supports only {sizes}",
                    "serve the export with vLLM on a GPU; to serve it on a CPU, train the draft for a verifier whose "
                    "head_dim is one of those (SmolLM2-135M: 64)", "serving")
            for dim, who in owners.items()]


def hidden_state_extraction_findings(speculative_config: dict, device: str = "cpu") -> list[Finding]:
    """speculators' offline hidden-state pipeline (vLLM ``method: extract_hidden_states`` with its hidden-state
    connector) on a vLLM without CUDA: the engine starts, then every write fails."""
    if speculative_config.get("method") != "extract_hidden_states" or device.startswith("cuda"):
        return []
    return [Finding("error", f"vLLM's extract_hidden_states cannot write hidden states on {device}",
                    "its hidden-state connector uses torch.cuda streams and pin_memory=True, so the engine starts "
                    "and each request fails ('pin_memory=True requires a CUDA or other accelerator backend')",
                    "extract hidden states with the HF verifier on CPU (eagle3kit data --out DIR --verifier NAME), "
                    "or run speculators' vLLM pipeline on a GPU", "hidden_state_extraction")]


def batch_findings(s: DoctorSubject, batch: dict, device: str) -> list[Finding]:
    """A packed batch against the draft: keys, shapes, dtypes, token ids and device."""
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
