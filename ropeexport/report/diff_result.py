"""What a diff of two reports returns (``report.diff`` for artifacts, ``decoder.diff`` for decoders)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ReportDiff:
    """Rows of metric deltas and the regressions among them."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        """True when anything got worse (module docstring)."""
        return bool(self.regressions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly."""
        return {"regressed": self.regressed, "regressions": self.regressions, "notes": self.notes, "rows": self.rows}
