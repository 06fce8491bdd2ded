"""The base class of the mistakes a user can fix, and the test the CLI uses: one line on stderr, exit 2."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


class UserError(ValueError):
    """Something the user asked for cannot be done as asked; the message says what is wrong and what to run."""


def is_user_error(exc: BaseException) -> bool:
    """A mistake the user can fix: a :class:`UserError`, a missing file, or a ``ValueError`` that eagle3kit's own
    code raised (its message says what to do). A ``ValueError`` from inside torch & co. keeps its traceback."""
    if isinstance(exc, (UserError, FileNotFoundError)):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return (isinstance(exc, ValueError) and tb is not None
            and Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE))
