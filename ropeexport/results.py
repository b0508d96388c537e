"""The protocol every result of a check shares: ``passed``, ``path``, ``to_dict()`` and truth as the verdict.

``BuildResult`` and ``VerifyResult`` (``pipeline``; a decoder's ``DecoderVerifyResult``), ``ReportDiff`` (passed: no
regression), ``CompatResult`` (passed: TensorRT parses the model), ``AuditResult`` (passed: every site exact) and
``GraftResult`` (passed: proven) all follow it, so a caller can hold any of them the same way::

    result = rx.build(spec, "out")
    if not result:
        print(json.dumps(result.to_dict()))

``to_dict()`` is the plain data a report writer or ``--json`` prints; the attributes are the interface.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# A JSON document's object as a result carries it (report.json, audit.json, a diff's rows): plain data whose schema is
# the file's, validated where it is read. The typed interface is the result's attributes (passed, path, skipped...).
JsonObject = dict[str, Any]


@runtime_checkable
class Result(Protocol):
    """A verdict with the data behind it (module doc)."""

    @property
    def passed(self) -> bool:
        """The verdict."""
        ...

    @property
    def path(self) -> Path | None:
        """The file or folder the result is about (None for a comparison of two reports)."""
        ...

    def to_dict(self) -> dict[str, object]:
        """The result as plain data."""
        ...

    def __bool__(self) -> bool:
        """``passed``."""
        ...
