"""What a diff of two reports returns (``report.diff`` for artifacts, ``decoder.diff`` for decoders)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ropeexport.results import JsonObject


@dataclass
class ReportDiff:
    """Rows of metric deltas and the regressions among them."""

    rows: list[JsonObject] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """True when anything got worse (module docstring)."""
        return bool(self.regressions)

    @property
    def passed(self) -> bool:
        """No regression (``results.Result``)."""
        return not self.regressions

    @property
    def path(self) -> Path | None:
        """None: a diff is about two reports, not one file."""
        return None

    def __bool__(self) -> bool:
        return self.passed

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly."""
        return {"passed": self.passed, "regressed": self.regressed, "regressions": self.regressions,
                "notes": self.notes, "rows": self.rows}  # fmt: skip
