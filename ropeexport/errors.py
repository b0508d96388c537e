"""Errors a user can act on.

Every error ropeexport raises on purpose is a ``RopeExportError``; the CLI prints it as one line and exits 2. Two
families carry the field at fault, so the line names it (``"<field>: <what is wrong and what is allowed>"``):

- ``InputError``: what the user handed us is not allowed: a spec field or flag (``SpecError``), a checkpoint folder
  (``CheckpointError``), an artifact folder or report that is damaged or not ours (``ArtifactError``);
- ``OutputError``: what we were asked to write cannot be written (a full or read-only disk, a folder that vanished).
  Nothing is half-written and an artifact that was there stays; the input was fine.

``RuntimeInputError`` (a runtime input the artifact cannot take) and ``RuntimeUnavailable`` (a runtime that cannot
run here) say what they mean in their message.
"""

from __future__ import annotations


class RopeExportError(Exception):
    """Base class of every error ropeexport raises on purpose."""


class FieldError(RopeExportError):
    """An error about one field (a flag, a spec field, a file): ``str(error)`` is ``"<field>: <message>"``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def renamed(error: FieldError, field: str) -> FieldError:
    """A copy of ``error`` (same class) naming ``field`` instead: a tree's error says which artifact (``NAME/file``)."""
    out = type(error).__new__(type(error))
    FieldError.__init__(out, field, error.message)  # not the subclass's own __init__: its arguments may differ
    return out


class InputError(FieldError, ValueError):
    """Bad input: a value, file or folder the user gave is not allowed (the message says what is)."""


class SpecError(InputError):
    """A spec field (or CLI flag, or file) holds a value that is not allowed.

    str(error) is one line: ``"<field>: <what is wrong and what is allowed>"``.
    """


class CheckpointError(InputError):
    """A checkpoint folder that does not hold the weights its config implies (field ``checkpoint``)."""

    def __init__(self, message: str, field: str = "checkpoint") -> None:
        super().__init__(field, message)


class ArtifactError(InputError):
    """An artifact folder, manifest or report that is damaged, edited or not ropeexport's (field: the file)."""


class OutputError(FieldError):
    """An output that cannot be written (disk full, read-only, gone); what was there before is left as it was."""


class RuntimeInputError(RopeExportError, ValueError):
    """A runtime input does not fit the artifact: wrong name, dtype, rank, or a position outside the table."""


class RuntimeUnavailable(RopeExportError):
    """A runtime cannot run here (library absent, no kernel for the dtype, no GPU). The message says why."""
