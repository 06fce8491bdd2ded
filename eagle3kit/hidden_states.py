"""Verifier hidden states exactly as vLLM hands them to speculators, written as ``hidden_states/hs_{i}.safetensors``.

Conventions (checked by :func:`verify_targets`):

* aux layer id ``i`` is the *input* of decoder layer ``i`` = HF ``output_hidden_states[i]`` (0 = embeddings);
* the last stored state is the final decoder layer's output *before* the final norm (speculators applies
  ``verifier_norm`` itself). transformers' ``output_hidden_states[-1]`` is already normed, so it is taken from a
  forward pre-hook on the final norm instead.

Each file holds ``hidden_states`` ``[seq, n_aux + 1, hidden]`` and ``token_ids`` ``[seq]`` and is written atomically.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch


def hs_path(hs_dir: str | os.PathLike, index: int) -> Path:
    return Path(hs_dir) / f"hs_{index}.safetensors"


def final_norm(model) -> torch.nn.Module:
    """The decoder's final norm (``model.model.norm`` for Llama-like verifiers)."""
    base = getattr(model, "model", model)
    norm = getattr(base, "norm", None)
    if norm is None:
        raise ValueError(
            f"{type(model).__name__} has no final norm at model.model.norm, so the pre-norm last state cannot be "
            "captured; eagle3kit supports Llama/Qwen-style decoders."
        )
    return norm


@torch.no_grad()
def extract(model, input_ids: torch.Tensor, aux_layer_ids: Sequence[int]) -> torch.Tensor:
    """``[batch, seq, n_aux + 1, hidden]``: aux states then the pre-norm last state (right padding is harmless)."""
    captured: dict[str, torch.Tensor] = {}
    handle = final_norm(model).register_forward_pre_hook(lambda _m, args: captured.__setitem__("h", args[0]))
    try:
        base = getattr(model, "model", model)
        out = base(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    states = [out.hidden_states[i] for i in aux_layer_ids] + [captured["h"]]
    return torch.stack(states, dim=2)


def write_file(path: Path, hidden_states: torch.Tensor, token_ids: torch.Tensor) -> None:
    """Write one sample atomically (temporary sibling + rename)."""
    from safetensors.torch import save_file

    from eagle3kit.atomic import atomic_file

    with atomic_file(path) as tmp:
        save_file({"hidden_states": hidden_states.contiguous(), "token_ids": token_ids.to(torch.long).contiguous()},
                  str(tmp))


def remove_partial(hs_dir: Path) -> int:
    """Delete temporary files a killed run left behind; return how many."""
    stale = list(hs_dir.glob(".hs_*.tmp-*")) if hs_dir.exists() else []
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def check_file(path: Path, token_ids: list[int], n_states: int | None = None, hidden: int | None = None) -> str | None:
    """Why ``path`` is unusable (unreadable, wrong tokens/shape, non-finite), or None when it is fine."""
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states

    try:
        data = load_file(str(path))
        check_hidden_states(data, token_ids)
    except Exception as exc:  # noqa: BLE001 - every reason counts as "make it again"
        return str(exc).splitlines()[0][:200] or type(exc).__name__
    shape = tuple(data["hidden_states"].shape)
    if (n_states is not None and shape[1] != n_states) or (hidden is not None and shape[2] != hidden):
        return f"hidden_states has shape {shape}, expected [seq, {n_states}, {hidden}]"
    return None


def scan(hs_dir: Path, samples: Sequence[list[int]], n_states: int, hidden: int, full: bool = True) -> dict:
    """Which files are done, missing or bad. ``full`` loads every file (NaN, token ids); else headers only."""
    from speculators.data_generation.offline import (
        find_corrupt_hidden_state_indices,
        get_existing_hidden_state_indices,
    )

    existing = set(get_existing_hidden_state_indices(hs_dir))
    bad = find_corrupt_hidden_state_indices(hs_dir, sorted(existing))
    if full:
        for i in sorted(existing - set(bad)):
            if i < len(samples) and (why := check_file(hs_path(hs_dir, i), samples[i], n_states, hidden)):
                bad[i] = why
    done = sorted(i for i in existing if i not in bad and i < len(samples))
    missing = sorted(set(range(len(samples))) - set(done))
    return {"done": done, "missing": missing, "bad": bad}


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Fixed batches of indices, longest first (the same plan on every run, so a resume gives identical bytes)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]


def extract_to_files(
    model,
    samples: Sequence[list[int]],
    hs_dir: Path,
    aux_layer_ids: Sequence[int],
    todo: set[int],
    batch_size: int = 4,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
    progress: bool = True,
    on_file: Callable[[int], None] | None = None,
) -> dict:
    """Run the verifier over the planned batches that contain a ``todo`` index; write those files."""
    from tqdm.auto import tqdm

    hs_dir.mkdir(parents=True, exist_ok=True)
    batches = [b for b in plan_batches([len(s) for s in samples], batch_size) if todo & set(b)]
    total = sum(len(samples[i]) for b in batches for i in b)
    pad = 0
    t0 = time.perf_counter()
    written = 0
    with tqdm(total=total, unit="tok", desc="hidden states", disable=not progress) as bar:
        for batch in batches:
            width = max(len(samples[i]) for i in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            for r, i in enumerate(batch):
                ids[r, : len(samples[i])] = torch.tensor(samples[i])
            states = extract(model, ids.to(device), aux_layer_ids).to("cpu", dtype)
            for r, i in enumerate(batch):
                if i in todo:
                    n = len(samples[i])
                    write_file(hs_path(hs_dir, i), states[r, :n], ids[r, :n])
                    written += 1
                    if on_file:
                        on_file(i)
            bar.update(sum(len(samples[i]) for i in batch))
            bar.set_postfix(tok_s=f"{bar.n / max(time.perf_counter() - t0, 1e-9):.0f}")
    seconds = time.perf_counter() - t0
    return {"written": written, "tokens": total, "seconds": seconds, "tokens_per_s": total / seconds if seconds else 0}


# ----------------------------------------------------------------------------------------------- targets check
class _Targets:
    """speculators' own target head: ``verifier_lm_head(verifier_norm(h))`` of an ``Eagle3DraftModel``."""

    def __init__(self, draft):
        self.draft = draft

    @torch.no_grad()
    def norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.draft.verifier_norm(h)

    @torch.no_grad()
    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return self.draft.verifier_lm_head(self.draft.verifier_norm(h))


def speculators_targets(verifier, aux_layer_ids, t2d=None, d2t=None) -> _Targets:
    """Build the speculators draft (verifier weights loaded) and return its target head."""
    from eagle3kit.config import build_config, build_model

    from loguru import logger

    draft_vocab = int(t2d.sum()) if t2d is not None else None
    build = build_config(verifier=verifier, aux_layer_ids=list(aux_layer_ids), draft_vocab_size=draft_vocab,
                         device="cpu", training=False)
    logger.disable("speculators")  # its weight loader logs every file it opens
    try:
        return _Targets(build_model(build, t2d, d2t).float().eval())
    finally:
        logger.enable("speculators")


@torch.no_grad()
def verifier_logits(verifier, token_ids: list[torch.Tensor], t2d: torch.Tensor | None = None) -> list[torch.Tensor]:
    """The verifier's own fp32 logits per sample (restricted to the draft vocab when ``t2d`` is given)."""
    from eagle3kit.verifier import load_model

    model = load_model(verifier, dtype="float32", device="cpu")
    out = []
    for ids in token_ids:
        logits = model(input_ids=ids.to(torch.long)[None], use_cache=False).logits[0].float()
        out.append(logits[:, t2d] if t2d is not None else logits)
    return out


def verify_targets(data_dir: str | os.PathLike, verifier=None, n_samples: int = 2,
                   draft_vocab_size: int | None = None) -> dict:
    """Prove the stored last state is pre-norm: speculators' targets from it vs the verifier's own logits.

    Works on any speculators data directory (pass ``verifier`` when it has no eagle3kit manifest). ``ok``: max |Δ|
    below the tolerance and every argmax difference a near-tie (the verifier's own gap within the error). Returns
    ``{"ok", "argmax_agree", "near_ties", "max_abs_diff", "tolerance", "tokens", "samples", "stored_dtype",
    "if_normed_twice": {...}}``; the last is what storing transformers' (already normed) ``hidden_states[-1]``
    would have given, for contrast.
    """
    from safetensors.torch import load_file

    from eagle3kit import vocab
    from eagle3kit.manifest import MANIFEST, DataError, check_compatible, default_aux_layer_ids, read_manifest
    from eagle3kit.verifier import resolve

    m = read_manifest(data_dir)
    if verifier is None and m is None:
        raise DataError(f"{data_dir} has no {MANIFEST}; pass verifier=... (the model that made the hidden states).")
    v = resolve(verifier if verifier is not None else (m["verifier"]["path"] or m["verifier"]["name"]))
    if m is not None:
        check_compatible(data_dir, v)
    aux = m["aux_layer_ids"] if m else default_aux_layer_ids(v.text_config.num_hidden_layers)
    t2d, d2t = vocab.load_mapping(data_dir, draft_vocab_size, v.text_config.vocab_size)
    paths = sorted((Path(data_dir) / "hidden_states").glob("hs_*.safetensors"), key=lambda p: int(p.stem[3:]))
    if not paths:
        raise DataError(f"{data_dir}/hidden_states holds no hs_*.safetensors files; run build_dataset first.")
    files = [load_file(str(p)) for p in paths[:n_samples]]
    targets = speculators_targets(v, aux, t2d, d2t)
    logits = verifier_logits(v, [f["token_ids"] for f in files], t2d)
    agree = agree_twice = total = unexplained = 0
    worst = worst_twice = 0.0
    for f, ref in zip(files, logits, strict=True):
        last = f["hidden_states"][:, -1].float()
        ours, twice = targets(last), targets(targets.norm(last))
        pick, diff = ours.argmax(-1), (ours - ref).abs()
        same = pick == ref.argmax(-1)
        # a different argmax is a near-tie when the verifier's own gap to it is within the measured error
        gap = ref.max(-1).values - ref.gather(-1, pick[:, None])[:, 0]
        unexplained += int((~same & (gap > 2 * diff.max(-1).values)).sum())
        agree += int(same.sum())
        agree_twice += int((twice.argmax(-1) == ref.argmax(-1)).sum())
        worst = max(worst, float(diff.max()))
        worst_twice = max(worst_twice, float((twice - ref).abs().max()))
        total += ref.shape[0]
    stored = files[0]["hidden_states"].dtype
    tol = 1e-2 if stored == torch.float32 else 1.0  # bf16/fp16 storage rounds the state
    return {"ok": unexplained == 0 and worst < tol, "argmax_agree": agree / total, "near_ties": total - agree,
            "max_abs_diff": worst, "tolerance": tol, "tokens": total, "samples": len(files),
            "stored_dtype": str(stored),
            "if_normed_twice": {"argmax_agree": agree_twice / total, "max_abs_diff": worst_twice}}
