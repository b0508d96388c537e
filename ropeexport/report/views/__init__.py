"""Typed, read-only views of the reports ropeexport writes: what a test or a caller reads instead of raw keys.

Two reports: an encoding artifact's ``report.json`` (``report.report_dict``: rope, apply, bias, scores, attention and
block artifacts, a checkpoint layer's block too) read as ``EncodingReport``, and a decoder's (``decoder.kind.
run_scenarios``, its scenarios from ``decoder.verify`` and its runtime records from ``decoder.runs``) read as
``DecoderReport``. ``ScenarioRerun`` reads a row of ``DecoderVerifyResult.scenarios`` (``decoder.runs.rows``).

A view wraps the dict it is handed (no copy: the report stays the one record) and reads a field when asked. Each
field is declared once, as a ``Field``: its key in the JSON, the JSON types it holds and what it is; renaming a key in
a writer is one edit here. A field the writer always writes that the dict lacks, or one holding another type, raises
``ArtifactError`` naming it (``report.json scenarios[0].summary.worst_rel: is missing``); a field the writer writes
only sometimes (``optional``) reads as None when absent, its doc says when it is there. Views never write:
``data`` is the dict itself, for what no field covers (a spec's own fields, a kind's coverage).

``tests/report/test_views.py`` reads every field of every view on artifacts the writers made, so a view cannot
drift from its writer.
"""

from __future__ import annotations

from ropeexport.report.views.base import Field, LayerUse, View, read_report
from ropeexport.report.views.decoder import (
    CallError,
    CallRecord,
    CallTokens,
    DecoderReport,
    DecoderRuntimeRecord,
    DecoderTolerance,
    References,
    RoutingFlip,
    ScenarioRecord,
    ScenarioRerun,
    ScenarioSummary,
)
from ropeexport.report.views.encoding import (
    ComparisonRecord,
    CurveRecord,
    EncodingReport,
    GuardRecord,
    Histogram,
    ProbeRecord,
    PropertyCurve,
    PropertyRecord,
    RuntimeRecord,
    TableRecord,
    WorstElement,
)

__all__ = [
    "CallError", "CallRecord", "CallTokens", "ComparisonRecord", "CurveRecord", "DecoderReport",
    "DecoderRuntimeRecord", "DecoderTolerance", "EncodingReport", "Field", "GuardRecord", "Histogram", "LayerUse",
    "ProbeRecord", "PropertyCurve", "PropertyRecord", "References", "RoutingFlip", "RuntimeRecord", "ScenarioRecord",
    "ScenarioRerun", "ScenarioSummary", "TableRecord", "View", "WorstElement", "read_report",
]  # fmt: skip
