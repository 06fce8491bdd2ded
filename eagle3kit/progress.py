"""Progress bars: tqdm.auto's (a widget in a notebook, text in a terminal), and none in a headless notebook run.

A notebook executed without a frontend (papermill, ``eagle3kit run-notebooks``) saves each widget bar with its first
frame as the text a reader sees ("0%"): nothing ever draws its end. The runner therefore starts every kernel with
:data:`HEADLESS_ENV`: tqdm's own switch ``TQDM_DISABLE`` (every library's bar follows it unless it passes ``disable``
itself), Hugging Face's switches for transformers' and datasets' bars, and eagle3kit's bars (:class:`tqdm`) follow it
too. Every eagle3kit module draws its bars with :class:`tqdm` from here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from tqdm.auto import tqdm as _auto_tqdm

HEADLESS_ENV = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def headless() -> bool:
    """Whether this process runs without a frontend to draw bars (the runner's kernels: ``TQDM_DISABLE=1``)."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() in {"1", "true", "yes"}


class tqdm(_auto_tqdm):  # noqa: N801 - a drop-in for tqdm.auto.tqdm
    """tqdm.auto's bar, switched off in a headless run whatever ``disable`` the caller passes."""

    def __init__(self, *args, disable: bool | None = False, **kwargs) -> None:
        super().__init__(*args, disable=True if headless() else disable, **kwargs)


@contextlib.contextmanager
def headless_env() -> Iterator[None]:
    """:data:`HEADLESS_ENV` in ``os.environ`` for the block (a kernel started in it inherits it), then as before."""
    before = {key: os.environ.get(key) for key in HEADLESS_ENV}
    os.environ.update(HEADLESS_ENV)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
