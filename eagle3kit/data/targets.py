"""The pre-norm proof: speculators' own targets from a data directory's stored last state vs the verifier's logits.

speculators applies ``verifier_norm`` to the stored last state itself, so it must be the last decoder layer's output
*before* the final norm. :func:`verify_targets` checks that on any speculators data directory.
"""

from __future__ import annotations

import os

import torch
from safetensors.torch import load_file

from eagle3kit.data.directory import DataDir, DataError
from eagle3kit.data.vocab import load_mapping
from eagle3kit.draft.config import build_config, resolve_aux_layer_ids
from eagle3kit.draft.model import build_model
from eagle3kit.verifier import load_model, resolve


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
    draft_vocab = int(t2d.sum()) if t2d is not None else None
    build = build_config(verifier=verifier, aux_layer_ids=list(aux_layer_ids), draft_vocab_size=draft_vocab,
                         device="cpu", training=False)
    return _Targets(build_model(build, t2d, d2t).float().eval())


@torch.no_grad()
def verifier_logits(verifier, token_ids: list[torch.Tensor], t2d: torch.Tensor | None = None,
                    dtype: str = "float32") -> list[torch.Tensor]:
    """The verifier's own logits per sample, run in ``dtype`` (restricted to the draft vocab when ``t2d`` is given)."""
    model = load_model(verifier, dtype=dtype, device="cpu")
    out = []
    for ids in token_ids:
        logits = model(input_ids=ids.to(torch.long)[None], use_cache=False).logits[0].float()
        out.append(logits[:, t2d] if t2d is not None else logits)
    return out


def verify_targets(data_dir: str | os.PathLike, verifier=None, n_samples: int = 2,
                   draft_vocab_size: int | None = None) -> dict:
    """Prove the stored last state is pre-norm: speculators' targets from it vs the verifier's own logits (the verifier
    run in the dtype that made the data).

    Works on any speculators data directory (pass ``verifier`` when it has no eagle3kit manifest). ``ok``: max |Δ|
    below the tolerance and every argmax difference a near-tie (the verifier's own gap within the error). Returns
    ``{"ok", "argmax_agree", "near_ties", "max_abs_diff", "tolerance", "tokens", "samples", "stored_dtype",
    "if_normed_twice": {...}}``; the last is what storing transformers' (already normed) ``hidden_states[-1]``
    would have given, for contrast.
    """
    data = DataDir.open(data_dir)
    v = resolve(verifier if verifier is not None else data.require_verifier("verifier=NAME_OR_DIR"))
    data.check_compatible(v)
    aux = data.aux_layer_ids or resolve_aux_layer_ids(v)  # only the target head is used: any valid ids do
    t2d, d2t = load_mapping(data.path, draft_vocab_size, v.text_config.vocab_size)
    paths = data.hidden_state_files()
    if not paths:
        raise DataError(f"{data.hidden_states_dir} holds no hs_*.safetensors files; make the data with "
                        "`eagle3kit data --out DIR`.")
    files = [load_file(str(p)) for p in paths[:n_samples]]
    targets = speculators_targets(v, aux, t2d, d2t)
    # the reference is the verifier as it ran for the data: a state computed in bf16 (dtype "bfloat16" / "native")
    # differs from float32's by up to ~1.4 logits on SmolLM2 (argmax 98% equal), far from the twice-normed contrast
    dtype = data.dtype or "float32"
    logits = verifier_logits(v, [f["token_ids"] for f in files], t2d, dtype)
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


def describe_targets(check: dict) -> str:
    """:func:`verify_targets`' result in two sentences: what matched, and what normed-twice states would have given."""
    twice = check["if_normed_twice"]
    verdict = "reproduces" if check["ok"] else "does NOT reproduce"
    return (f"The stored last state {verdict} the verifier's logits: the same top token on "
            f"{check['argmax_agree']:.1%} of {check['tokens']} tokens ({check['near_ties']} differ"
            f"{', each a near-tie' if check['ok'] else ''}), "
            f"largest logit difference {check['max_abs_diff']:.2f} (tolerance {check['tolerance']:g} for "
            f"{check['stored_dtype'].removeprefix('torch.')} storage). Normed twice, as transformers' "
            f"`hidden_states[-1]` would be, the top token would agree on {twice['argmax_agree']:.1%} and the logits "
            f"differ by up to {twice['max_abs_diff']:.1f}.")
