"""The one place that quiets library output the reader cannot act on.

speculators logs (through loguru, with terminal colours) every file its weight loader looks for, and transformers
and torch warn about things that are expected here (a missing ``model.safetensors.index.json``, a deprecated
argument inside speculators) and draw progress bars for sub-second loads; speculators' token counter draws its own
tqdm bar on stderr (a text bar in a notebook). Every loader in eagle3kit builds models
inside :func:`quiet`; warnings a user can act on are raised by eagle3kit itself, in plain words.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from collections.abc import Iterator
from functools import partial

from loguru import logger
from transformers.utils import logging as hf_logging

QUIET_LOGGERS = ("speculators",)  # loguru names (and standard logging's: its data pipeline) that only narrate
QUIET_BARS = ("speculators.train.vocab_mapping",)  # modules whose own ``tqdm`` draws a bar for sub-second work
# loggers whose warnings state the expected on a CPU-only machine, e.g. torch.compile's C++ toolchain lookup: "No CUDA
# runtime is found, using CUDA_HOME=..." (notebook 03's first compiled BlockMask printed it to stderr)
EXPECTED_ON_CPU = ("torch.utils.cpp_extension",)


def silence_expected() -> None:
    """Raise the loggers of :data:`EXPECTED_ON_CPU` to errors only, for the rest of the process (notebooks'
    :func:`eagle3kit.notebook.setup`)."""
    for name in EXPECTED_ON_CPU:
        logging.getLogger(name).setLevel(logging.ERROR)


class _Silencer:
    """Process-wide switches (loguru, transformers' verbosity and progress bars), set by the outermost block only:
    an inner ``quiet()`` ending (a loader inside a loader) must not turn them back on for the outer one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.verbosity = hf_logging.WARNING
        self.bars = True
        self.levels: dict[str, int] = {}
        self.tqdms: dict[str, object] = {}

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.verbosity, self.bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
                for name in QUIET_LOGGERS:
                    logger.disable(name)
                    self.levels[name] = logging.getLogger(name).level
                    logging.getLogger(name).setLevel(logging.ERROR)
                hf_logging.set_verbosity_error()
                hf_logging.disable_progress_bar()
                for name in QUIET_BARS:  # only those imported: their `from tqdm import tqdm` name, bar off
                    if (module := sys.modules.get(name)) is not None and hasattr(module, "tqdm"):
                        self.tqdms[name] = module.tqdm
                        module.tqdm = partial(module.tqdm, disable=True)
            self.depth += 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                hf_logging.set_verbosity(self.verbosity)
                if self.bars:
                    hf_logging.enable_progress_bar()
                for name, bar in self.tqdms.items():
                    sys.modules[name].tqdm = bar
                self.tqdms.clear()
                for name in QUIET_LOGGERS:
                    logger.enable(name)
                    logging.getLogger(name).setLevel(self.levels.get(name, logging.NOTSET))


_SILENCER = _Silencer()


@contextlib.contextmanager
def quiet(stdout: bool = False) -> Iterator[None]:
    """Silence speculators' loguru lines and its token counter's bar, transformers' info/warnings/progress bars and
    Python warnings inside the block (nested blocks are fine). eagle3kit's own bars (long work) are not touched.

    ``stdout=True`` also swallows what library code prints (speculators' config helpers print their choices).
    """
    _SILENCER.enter()
    try:
        with warnings.catch_warnings(), (contextlib.redirect_stdout(io.StringIO()) if stdout
                                         else contextlib.nullcontext()):
            warnings.simplefilter("ignore")
            yield
    finally:
        _SILENCER.exit()
