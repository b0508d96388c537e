"""Errors a user can act on.

Every rejection names the field at fault and what is allowed, in one line, so the CLI can print it as is and exit 2.
"""

from __future__ import annotations


class RopeExportError(Exception):
    """Base class of every error ropeexport raises on purpose."""


class SpecError(RopeExportError, ValueError):
    """A spec field (or CLI flag, or file) holds a value that is not allowed.

    str(error) is one line: ``"<field>: <what is wrong and what is allowed>"``.
    """

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class RuntimeInputError(RopeExportError, ValueError):
    """A runtime input does not fit the artifact: wrong name, dtype, rank, or a position outside the table."""


class RuntimeUnavailable(RopeExportError):
    """A runtime cannot run here (library absent, no kernel for the dtype, no GPU). The message says why."""
