"""The one place that quiets library output the reader cannot act on.

speculators logs (through loguru, with terminal colours) every file its weight loader looks for, and transformers
and torch warn about things that are expected here (a missing ``model.safetensors.index.json``, a deprecated
argument inside speculators). Every loader in eagle3kit builds models inside :func:`quiet`; warnings a user can
act on are raised by eagle3kit itself, in plain words.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator

from loguru import logger
from transformers.utils import logging as hf_logging

QUIET_LOGGERS = ("speculators",)  # loguru names that only narrate


@contextlib.contextmanager
def quiet(stdout: bool = False) -> Iterator[None]:
    """Silence speculators' loguru lines, transformers' info/warnings and Python warnings inside the block.

    ``stdout=True`` also swallows what library code prints (speculators' config helpers print their choices).
    """
    for name in QUIET_LOGGERS:
        logger.disable(name)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(), (contextlib.redirect_stdout(io.StringIO()) if stdout
                                         else contextlib.nullcontext()):
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        for name in QUIET_LOGGERS:
            logger.enable(name)
