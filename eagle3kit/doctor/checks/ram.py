"""The RAM a verifier takes when the doctor loads it (float32, on the CPU), stated before it loads, and refused when
this machine has less available: ``ram_line(verifier, available)`` -> the line to print, or a :class:`UserError`."""

from __future__ import annotations

from pathlib import Path

from eagle3kit.errors import UserError
from eagle3kit.plan.serving_speed import shapes
from eagle3kit.verifier import Verifier

FLOAT32_BYTES = 4
MEMINFO = Path("/proc/meminfo")


def float32_bytes(verifier: Verifier) -> int:
    """The verifier's parameters x 4 bytes, counted from its config on the meta device (no weights read)."""
    return shapes(verifier.path or verifier.name)[0].params * FLOAT32_BYTES


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """This machine's available RAM (``MemAvailable`` of /proc/meminfo); None where that is not readable."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def ram_line(verifier: Verifier, available: int | None) -> str:
    """``loading V in float32 on the CPU: about N GB of RAM``; a :class:`UserError` when ``available`` (bytes; None:
    unknown) is less."""
    need = float32_bytes(verifier)
    line = f"loading {verifier.name} in float32 on the CPU: about {need / 1e9:.2g} GB of RAM"
    if available is not None and available < need:
        raise UserError(f"{line}, but this machine has {available / 1e9:.2g} GB available; run the doctor on a "
                        "machine with more RAM, or free some.")
    return line
