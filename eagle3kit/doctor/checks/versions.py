"""Version traps, decided from version numbers (pass them in to ask about another machine):

- speculators' fused (Triton) loss inside its ``torch.compile``d forward fails in dynamo on CUDA with torch < 2.12
  ("ListVariable ... is already tracked for mutation"; pytorch PR 177874 fixes pytorch issue 177600);
- transformers below eagle3kit's floor (pyproject.toml, the one home of it) reads ``DynamicCache.crop(n)`` as the
  length to keep, so the speculative decode loop empties its cache.
"""

from __future__ import annotations

import importlib.metadata

import torch
import transformers
from packaging.requirements import Requirement
from packaging.version import Version

from eagle3kit.doctor.findings import Finding

COMPILE_FIXED_IN = Version("2.12")  # the first torch release with pytorch PR 177874
EAGER_LOSS_FIX = ('resolve_loss_config("kl_div", "eager") as loss_config (speculators train: '
                  "--loss-implementation eager), or torch >= 2.12")


def fused_loss_compiles(torch_version: str | None = None) -> bool:
    """Whether speculators' fused loss runs inside its compiled forward on CUDA with this torch (default: ours)."""
    return Version((torch_version or torch.__version__).split("+")[0]).release >= COMPILE_FIXED_IN.release


def floor(package: str, dist: str = "eagle3kit") -> Version | None:
    """The lowest version of ``package`` that ``dist`` declares it needs (None: no floor)."""
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.name == package and not req.marker:
            lows = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
            return max(lows) if lows else None
    return None


def version_findings(torch_version: str | None = None, transformers_version: str | None = None,
                     cuda: bool | None = None, loss: str | None = "fused", compiled: bool | None = None
                     ) -> list[Finding]:
    """Findings for these versions (default: this machine's). ``loss``: "fused" (speculators' default), "eager"
    or None (= fused). ``compiled``: whether speculators compiles its forward (default: it does whenever CUDA is
    available)."""
    tv = Version(torch_version or torch.__version__.split("+")[0])
    cuda = torch.cuda.is_available() if cuda is None else cuda
    compiled = cuda if compiled is None else compiled
    out = []
    if cuda and compiled and loss in ("fused", None) and not fused_loss_compiles(str(tv)):
        out.append(Finding("error", f"torch {tv} + CUDA + speculators' fused loss under torch.compile",
                           "dynamo fails inside the compiled forward ('ListVariable ... is already tracked for "
                           "mutation') when the autotuned loss kernel runs once per TTT step (pytorch issue 177600, "
                           "fixed by pytorch PR 177874 in torch 2.12)", EAGER_LOSS_FIX, "versions"))
    need = floor("transformers")
    have = Version(transformers_version or transformers.__version__)
    if need is not None and have < need:
        out.append(Finding("error", f"transformers {have} < {need}",
                           "older releases read DynamicCache.crop(n) as the length to keep, so crop(0) empties the "
                           "cache and the speculative decode loop computes on nothing",
                           f'pip install "transformers>={need}"', "versions"))
    return out
