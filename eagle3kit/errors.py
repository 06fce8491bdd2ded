"""The one base class of the mistakes a user can fix: the CLI prints them as one line and exits 2."""

from __future__ import annotations


class UserError(ValueError):
    """Something the user asked for cannot be done as asked; the message says what is wrong and what to run."""
