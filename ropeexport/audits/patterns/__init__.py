"""The forms of site audit knows, one module each, collected by one explicit list.

A new exporter's form is one module here exposing ``PATTERN`` (``base.Pattern``: a name, the encoding whose audit
looks for it, the site kinds it reports, ``find(graph, walk)``, and where its operator refuses some tables only when it
runs, ``check_reader``) plus one line in ``PATTERNS``; ``tests/audits/test_patterns.py`` fails when a module and the
list disagree. The order is the order values are claimed in: fused operators first (what computes their caches is
theirs), then gathered tables, then one sin|cos table gathered per token and split (GPT-J), then cos/sin computed
in the graph, then what is left (``unidentified``).
"""

from __future__ import annotations

from ropeexport.audits.patterns import (
    alibi_bias,
    computed,
    gathered,
    gqa,
    mrotary_microsoft,
    rotary_microsoft,
    rotary_onnx,
    split_table,
    unidentified,
)
from ropeexport.audits.patterns.base import Pattern, Site, SiteKind, Step, Walk

PATTERNS: tuple[Pattern, ...] = (
    gqa.PATTERN,
    rotary_microsoft.PATTERN,
    mrotary_microsoft.PATTERN,
    rotary_onnx.PATTERN,
    gathered.PATTERN,
    split_table.PATTERN,
    computed.PATTERN,
    unidentified.PATTERN,
    alibi_bias.PATTERN,
)


def for_encoding(encoding: str) -> list[Pattern]:
    """The patterns an audit of ``encoding`` (``rope`` or ``alibi``) looks for, in claiming order."""
    return [p for p in PATTERNS if p.encoding == encoding]


def pattern_of(kind: SiteKind) -> Pattern:
    """The pattern that reports sites of ``kind`` (the first, where two do)."""
    return next(p for p in PATTERNS if kind in p.kinds)


__all__ = ["PATTERNS", "Pattern", "Site", "SiteKind", "Step", "Walk", "for_encoding", "pattern_of"]
