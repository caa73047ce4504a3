"""Errors the CLI shows to the user as one line."""

from __future__ import annotations


class CliError(Exception):
    """Bad input the user can fix (unknown job, bad flag, value out of range); exit status 2 by default."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
