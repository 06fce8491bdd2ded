"""What a data directory supervises, measured against the verifier: the loss mask, the aux slices, the vocab mapping.

* :func:`audit_mask` re-makes the first rows from the directory's own conversations and settings with the verifier's
  chat template (:func:`eagle3kit.data.dataset.training_rows`, the code that made them) and compares token ids and
  loss mask: a row rendered with another template, a mask shifted by one, supervised tokens outside the assistant
  replies, reply tokens (the end-of-turn marker above all) left out, a supervised padded tail, rows with nothing
  supervised. Without an eagle3kit manifest (speculators' ``prepare-data``) the conversations are unknown, so each
  supervised run of a row is checked against the template's own markers (:func:`template_markers`): it must start
  right after the generation prompt (else: shifted by one, or supervised text outside the replies) and end with the
  end-of-turn marker (else: reply tokens left out), or at the row's end (a row cut at the max length).
* :func:`audit_aux` recomputes one sample with the verifier and says which layer each stored aux slice is.
* :func:`audit_vocab` recounts the supervised tokens and checks ``token_freq.pt`` and each ``t2d-{N}.npy`` against them.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import load_from_disk
from safetensors.torch import load_file

from eagle3kit.data import vocab
from eagle3kit.data.dataset import training_rows
from eagle3kit.data.directory import DataDir
from eagle3kit.data.hidden_states import final_norm
from eagle3kit.verifier import Verifier, load_model, load_tokenizer, resolve

STRUCTURE_ROWS = 64  # rows checked against the template's markers when the conversations are unknown (cheap)
MIN_PAD_TAIL = 2  # without the conversations, a padded tail is this many trailing pad tokens (one may be a real EOS)


@dataclass
class MaskAudit:
    """The loss mask of a data directory against what the verifier's chat template supervises."""

    rows: int  # rows in the directory
    empty_rows: list[int] = field(default_factory=list)  # rows with no supervised token (all rows are counted)
    padded: dict[int, int] = field(default_factory=dict)  # row -> supervised tokens in its padded tail
    compared: int = 0  # rows re-made and compared with the template
    compared_with: str = ""  # what they were compared with, or why none was
    template_differs: dict[int, int] = field(default_factory=dict)  # row -> first token that differs from the render
    shifted: dict[int, int] = field(default_factory=dict)  # row -> +1 (mask one late) or -1 (one early)
    outside: int = 0  # supervised tokens outside the assistant replies (system / user turns, template markers)
    outside_text: str = ""  # the first such run, decoded
    missed: int = 0  # reply tokens (incl. the end-of-turn marker) left unsupervised
    missed_end: int = 0  # of them, end-of-turn (EOS) tokens
    supervised: int = 0  # reply tokens the template supervises in the compared rows
    markers: str = ""  # without the conversations: the template markers each supervised run was checked against


def _rows(data: DataDir) -> tuple[list[list[int]], list[list[int]]]:
    ds = load_from_disk(str(data.path)).with_format(None)
    return ds["input_ids"], ds["loss_mask"]


def _pad_tail(ids: list[int], pad: int | None) -> int:
    n = 0
    while pad is not None and n < len(ids) and ids[-1 - n] == pad:
        n += 1
    return n


def _shift(mask: list[int], by: int) -> list[int]:
    return [0] * by + mask[:-by] if by > 0 else mask[-by:] + [0] * -by


def audit_mask(data: DataDir | str | os.PathLike, verifier: Verifier | str | None = None, n_rows: int = 4) -> MaskAudit:
    """Compare the first ``n_rows`` rows with their re-made selves (see the module doc); every row for emptiness."""
    data = DataDir.open(data)
    ids, masks = _rows(data)
    ref = verifier if verifier is not None else data.require_verifier("verifier=NAME_OR_DIR")
    tokenizer = load_tokenizer(resolve(ref))
    eos = tokenizer.eos_token_id
    audit = MaskAudit(rows=len(ids), empty_rows=[i for i, m in enumerate(masks) if not any(m)])
    request = data.request
    if request is None:
        for i, (x, m) in enumerate(zip(ids, masks, strict=True)):
            tail = _pad_tail(x, tokenizer.pad_token_id)
            if tail >= MIN_PAD_TAIL and any(m[len(x) - tail:]):
                audit.padded[i] = sum(m[len(x) - tail:])
        gen, end = template_markers(tokenizer)
        for i in range(min(max(n_rows, STRUCTURE_ROWS), len(ids))):
            if i not in audit.padded and any(masks[i]):
                _audit_runs(audit, i, ids[i], masks[i], gen, end, tokenizer)
        audit.compared_with = f"{ref}'s chat template"
        audit.markers = (f"its generation prompt {tokenizer.decode(gen)!r} and end-of-turn marker "
                         f"{tokenizer.decode(end)!r} (no eagle3kit manifest: the rows' conversations are unknown)")
        return audit
    if request.source is not None and not Path(request.source).is_file():
        audit.compared_with = f"nothing: the source {request.source} the directory was made from is gone"
        return audit
    _held, stream = training_rows(tokenizer, request)
    for i, (_turns, t) in zip(range(min(n_rows, len(ids))), stream, strict=False):
        x, m, n = ids[i], masks[i], len(t.input_ids)
        audit.compared += 1
        if x[:n] != t.input_ids:
            pairs = enumerate(zip(x, t.input_ids, strict=False))
            audit.template_differs[i] = next((p for p, (a, b) in pairs if a != b), min(n, len(x)))
            continue
        if any(m[n:]):
            audit.padded[i] = sum(m[n:])
        got, want = list(m[:n]), t.loss_mask
        audit.supervised += sum(want)
        if got == want or not any(got):
            continue
        by = next((b for b in (1, -1) if got == _shift(want, b)), 0)
        if by:
            audit.shifted[i] = by
            continue
        extra = [p for p in range(n) if got[p] and not want[p]]
        missed = [p for p in range(n) if want[p] and not got[p]]
        audit.outside += len(extra)
        if extra and not audit.outside_text:
            run = [extra[0]]
            while run[-1] + 1 in extra:
                run.append(run[-1] + 1)
            audit.outside_text = tokenizer.decode([x[p] for p in run])
        audit.missed += len(missed)
        audit.missed_end += sum(x[p] == eos for p in missed)
    audit.compared_with = f"{verifier if verifier is not None else data.verifier_ref}'s chat template"
    return audit


def template_markers(tokenizer) -> tuple[list[int], list[int]]:
    """(generation prompt, end-of-turn marker) token ids of the tokenizer's chat template, from rendering a probe
    conversation with and without the generation prompt and with a reply."""
    probe, reply = [{"role": "user", "content": "Hi"}], "Hello"

    def render(turns, gen):
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=gen)

    def tail(text: str, start: int) -> list[int]:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [t for t, (a, _b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True) if a >= start]

    bare, prompt = render(probe, False), render(probe, True)
    full = render([*probe, {"role": "assistant", "content": reply}], False)
    return tail(prompt, len(bare)), tail(full, full.rindex(reply) + len(reply))


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    out, start = [], None
    for p, b in enumerate([*mask, 0]):
        if b and start is None:
            start = p
        elif not b and start is not None:
            out.append((start, p))
            start = None
    return out


def _audit_runs(audit: MaskAudit, i: int, x: list[int], m: list[int], gen: list[int], end: list[int],
                tokenizer) -> None:
    """One row's supervised runs against the template's generation prompt and end-of-turn marker."""
    audit.compared += 1
    g, e = len(gen), len(end)
    for a, b in _runs(m):
        audit.supervised += b - a
        if any(x[a - k:a - k + e] == end for k in range(1, e)):  # the tail of a marker whose head went unsupervised
            continue
        by = next((s for s in (0, -1, 1) if a - g - s >= 0 and x[a - g - s:a - s] == gen), None)
        if by:
            audit.shifted[i] = by  # +1: one token late, -1: one early
            continue
        if by is None:
            inside = [q + g for q in range(a, b - g + 1) if x[q:q + g] == gen]
            upto = inside[-1] if inside else b
            audit.outside += upto - a
            if not audit.outside_text:
                audit.outside_text = tokenizer.decode(x[a:upto])
        if b < len(x) and x[b - e:b] != end:  # ends before its end-of-turn marker (a row's end may be a cut)
            nxt = next((q + e for q in range(b, len(x) - e + 1) if x[q:q + e] == end), len(x))
            audit.missed += nxt - b
            audit.missed_end += sum(t == tokenizer.eos_token_id for t in x[b:nxt])


@torch.no_grad()
def audit_aux(data: DataDir | str | os.PathLike, verifier: Verifier | str | None = None, sample: int = 0) -> dict:
    """Which verifier layer each stored aux slice of one sample is: ``{"claimed", "matched", "rel_error",
    "layers"}``. ``matched[j]`` is the HF ``hidden_states`` index (= aux layer id, the input of that decoder layer)
    nearest to slice ``j``; ``rel_error[j]`` its relative distance (float32 ~1e-6, bf16 ~4e-3, another model ~1).
    ``claimed`` is the manifest's aux ids (None without one)."""
    data = DataDir.open(data)
    v = resolve(verifier if verifier is not None else data.require_verifier("verifier=NAME_OR_DIR"))
    model = load_model(v, dtype=data.dtype or "float32", device="cpu")
    f = load_file(str(data.hidden_state_files()[sample]))
    base = getattr(model, "model", model)
    captured: dict[str, torch.Tensor] = {}
    handle = final_norm(model).register_forward_pre_hook(lambda _m, args: captured.__setitem__("h", args[0]))
    try:
        out = base(input_ids=f["token_ids"][None].long(), output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    layers = [h[0].float() for h in out.hidden_states[:-1]]  # ids 0..L-1 (the last entry is normed)
    stored = f["hidden_states"][:, :-1].float()
    matched, errors = [], []
    for j in range(stored.shape[1]):
        s = stored[:, j]
        rel = [float((s - h).norm() / h.norm().clamp_min(1e-12)) for h in layers]
        best = int(np.argmin(rel))
        matched.append(best)
        errors.append(rel[best])
    return {"claimed": data.aux_layer_ids, "matched": matched, "rel_error": errors, "layers": len(layers)}


def audit_vocab(data: DataDir | str | os.PathLike) -> dict:
    """The supervised tokens recounted from the rows against ``token_freq.pt`` and each ``t2d-{N}.npy``:
    ``{"distinct", "token_freq_matches", "mappings": {N: {"coverage", "best_coverage", "d2t_agrees"}}}``;
    ``best_coverage`` is what the N most frequent supervised tokens cover (speculators' rule), ``coverage`` what the
    stored mapping covers, ``d2t_agrees`` whether ``d2t-{N}.npy``'s offsets name exactly the ids ``t2d`` marks."""
    data = DataDir.open(data)
    ids, masks = _rows(data)
    freq = Counter(t for x, m in zip(ids, masks, strict=True) for t, b in zip(x, m, strict=True) if b)
    path = data.token_freq_path
    stored = vocab.load_token_freq(data.path) if path.exists() else None
    counts = sorted(freq.values(), reverse=True)
    total = max(sum(counts), 1)
    mappings = {}
    for n in data.draft_vocab_sizes:
        t2d_path = data.mapping_paths(n)[1]
        if t2d_path.exists():
            t2d = torch.from_numpy(np.load(t2d_path))
            d2t_path = data.mapping_paths(n)[0]
            d2t = torch.from_numpy(np.load(d2t_path)) if d2t_path.exists() else None
            agree = d2t is not None and len(d2t) == n and torch.equal(torch.arange(n) + d2t, t2d.nonzero()[:, 0])
            mappings[n] = {"coverage": vocab.coverage(dict(freq), t2d), "best_coverage": sum(counts[:n]) / total,
                           "d2t_agrees": bool(agree)}
    return {"distinct": len(freq), "token_freq_matches": None if stored is None else dict(stored) == dict(freq),
            "mappings": mappings}
