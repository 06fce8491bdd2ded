"""Findings on what a data directory supervises (the measurements are :mod:`eagle3kit.data.supervision`'s).

``supervision_findings(data_dir, verifier)``: ``loss_mask`` (empty rows, a mask shifted by one, supervised tokens
outside the replies, reply or end-of-turn tokens left out, a supervised padded tail), ``template`` (rows rendered with
another chat template), ``aux_layers`` (stored aux slices that are other layers than claimed), ``vocab`` (a stale
``token_freq.pt`` or mapping, a d2t that disagrees with t2d, fewer distinct tokens than the draft vocab). Each check
runs guarded; what could not be checked (no manifest, a source gone) is an info finding that says why. Healthy data
gives info findings only.
"""

from __future__ import annotations

import os

from eagle3kit.data.directory import DataDir
from eagle3kit.data.supervision import MaskAudit, audit_aux, audit_mask, audit_vocab
from eagle3kit.doctor.findings import Finding, Guard
from eagle3kit.draft.config import resolve_aux_layer_ids

REBUILD = "rebuild the directory with `eagle3kit data --out DIR` (it renders and masks with the verifier's template)"
STALE_COVERAGE_GAP = 0.02  # a mapping built from this data covers the N most frequent tokens exactly (gap 0)
ALIGNED_ERROR = 0.05  # relative distance below which a stored aux slice is that layer (bf16 storage: ~4e-3)


def _rows(found: dict[int, int] | list[int]) -> str:
    shown = sorted(found)[:5]
    return ", ".join(map(str, shown)) + (f" and {len(found) - 5} more" if len(found) > 5 else "")


def mask_findings(a: MaskAudit) -> list[Finding]:
    out = []
    if a.empty_rows:
        out.append(Finding("error" if len(a.empty_rows) == a.rows else "warning",
                           f"{len(a.empty_rows)} of {a.rows} rows supervise no token",
                           f"rows {_rows(a.empty_rows)} have an all-zero loss mask (e.g. every reply cut off by the "
                           "max length): they cost compute and teach nothing",
                           "drop empty rows, raise the max length or truncate the prompt from the left", "loss_mask"))
    if a.shifted:
        way = {1: "one token late", -1: "one token early"}
        out.append(Finding("error", f"loss mask shifted by one in {len(a.shifted)} of {a.compared} rows checked",
                           f"rows {_rows(a.shifted)}: the mask equals the template's assistant mask moved "
                           f"{way[next(iter(a.shifted.values()))]}, so each reply's first token goes unsupervised "
                           "and a token after it is supervised", "shift the mask together with input_ids; " + REBUILD,
                           "loss_mask"))
    if a.outside:
        out.append(Finding("error", f"loss mask covers {a.outside} tokens outside the assistant replies",
                           f"system/user turns or template markers are supervised (first run: {a.outside_text[:60]!r})"
                           ", so the draft learns to predict text the verifier never writes",
                           "mask only what the template adds after the generation prompt; " + REBUILD, "loss_mask"))
    if a.missed:
        end = f", {a.missed_end} of them end-of-turn (EOS) tokens" if a.missed_end else ""
        why = ("the end-of-turn token is not supervised (a pad id equal to EOS masked by value?), so the draft never "
               "learns to propose the stop" if a.missed_end == a.missed else
               "parts of the replies are not supervised")
        out.append(Finding("error", f"loss mask leaves out {a.missed} of {a.supervised} reply tokens{end}", why,
                           "mask padding by position, not by token value; " + REBUILD, "loss_mask"))
    if a.padded:
        out.append(Finding("error", f"loss on padding in {len(a.padded)} rows",
                           f"rows {_rows(a.padded)} supervise {sum(a.padded.values())} tokens of a padded tail: "
                           "targets that mean nothing", "clear the mask on padding (by position); " + REBUILD,
                           "loss_mask"))
    if a.template_differs:
        i, p = next(iter(a.template_differs.items()))
        out.append(Finding("error", f"{len(a.template_differs)} of {a.compared} rows are not the verifier's chat "
                           "template's render", f"row {i} differs from {a.compared_with}'s render at token {p}: the "
                           "draft trains on a prefix the verifier never sees when serving",
                           "render with the serving template and its kwargs (system prompt, enable_thinking); "
                           + REBUILD, "template"))
    if not a.compared:
        out.append(Finding("info", "loss mask not compared with the chat template",
                           f"compared with {a.compared_with}; only empty rows and padded tails were checked", "",
                           "loss_mask"))
    elif not out and a.markers:
        out.append(Finding("info", f"loss mask of {a.compared} rows agrees with {a.compared_with}",
                           f"every supervised run starts right after {a.markers} and ends with that marker or the row;"
                           f" {a.supervised} tokens supervised", "", "loss_mask"))
    elif not out:
        out.append(Finding("info", f"loss mask of {a.compared} rows equals {a.compared_with}'s assistant spans",
                           f"{a.supervised} reply tokens supervised, nothing outside them; no empty row", "",
                           "loss_mask"))
    return out


def aux_findings(r: dict, default: list[int] | None = None) -> list[Finding]:
    claimed, matched, err = r["claimed"], r["matched"], r["rel_error"]
    alien = [j for j, e in enumerate(err) if e > ALIGNED_ERROR]
    numbers = ", ".join(f"slice {j}: layer {m} (rel. error {e:.2g})"
                        for j, (m, e) in enumerate(zip(matched, err, strict=True)))
    if alien:
        return [Finding("error", f"aux slices {alien} match no layer of this verifier", numbers + "; hidden states "
                        "from another model or another input", REBUILD + " with this verifier", "aux_layers")]
    if claimed is None:
        sev = "info" if matched == default else "warning"
        return [Finding(sev, f"aux slices are layers {matched} (the directory does not say which)",
                        numbers + ("" if sev == "info" else f"; the verifier's default is {default}"),
                        "" if sev == "info" else f"build the draft with aux_layer_ids={matched}", "aux_layers")]
    if matched != claimed:
        return [Finding("error", f"aux slices are layers {matched}, the data claims {claimed}",
                        numbers + "; a draft served with the claimed ids sees other states than it trained on",
                        "extract aux id i as the input of decoder layer i (HF hidden_states[i]); " + REBUILD,
                        "aux_layers")]
    return [Finding("info", f"aux slices are the claimed layers {claimed}", numbers, "", "aux_layers")]


def vocab_findings(r: dict) -> list[Finding]:
    out = []
    if r["token_freq_matches"] is False:
        out.append(Finding("error", "token_freq.pt does not count this directory's supervised tokens",
                           "it was written for other data (speculators reuses an existing file without recounting)",
                           "delete token_freq.pt and the d2t/t2d files, then rebuild the mapping", "vocab"))
    for n, m in sorted(r["mappings"].items()):
        if r["distinct"] < n:
            out.append(Finding("warning", f"draft vocab {n} > the {r['distinct']} distinct supervised tokens",
                               f"{n - r['distinct']} draft tokens are never-seen fillers", "lower draft_vocab_size "
                               f"to <= {r['distinct']} or use more data", "vocab"))
        if not m["d2t_agrees"]:
            out.append(Finding("error", f"d2t-{n}.npy does not map the draft vocab onto the ids t2d-{n}.npy marks",
                               "draft id i must decode as verifier id i + d2t[i], the i-th id t2d marks (an all-zero "
                               "or missing d2t decodes as the first N ids)", f"delete d2t-{n}.npy/t2d-{n}.npy and "
                               "rebuild them from this data's token_freq.pt", "vocab"))
        if m["best_coverage"] - m["coverage"] > STALE_COVERAGE_GAP:
            out.append(Finding("error", f"t2d-{n}.npy is not this data's mapping",
                               f"it covers {m['coverage']:.1%} of the supervised tokens; one built from them covers "
                               f"{m['best_coverage']:.1%}", f"delete d2t-{n}.npy/t2d-{n}.npy and rebuild them from "
                               "this data's token_freq.pt", "vocab"))
    if not out:
        out.append(Finding("info", f"vocab: token_freq.pt and {len(r['mappings'])} mapping(s) are this data's",
                           f"{r['distinct']} distinct supervised tokens", "", "vocab"))
    return out


def supervision_findings(data_dir: str | os.PathLike, verifier=None) -> list[Finding]:
    """Every finding of this module for ``data_dir`` (``verifier``: the one that made it; default: the manifest's)."""
    data = DataDir.open(data_dir)
    findings: list[Finding] = []

    guarded = Guard(findings, "", severity="warning")

    ref = verifier if verifier is not None else data.verifier_ref
    guarded("loss_mask", lambda: mask_findings(audit_mask(data, ref)))
    guarded("aux_layers", lambda: aux_findings(audit_aux(data, ref), resolve_aux_layer_ids(ref)))
    guarded("vocab", lambda: vocab_findings(audit_vocab(data)))
    return findings
