"""Planted-bug machinery shared by every family's bug list: the bug and verdict types, graph editing, running.

Every bug starts from the correct export of the spec the artifact claims to be and changes it the way a real exporter
goes wrong (a flipped attribute, a constant folded at trace time, a table built from the wrong formula), then runs the
ordinary verification (``verify_artifact``) against that claimed spec. The correct export of the same spec, verified
the same way, must pass: the planted edit is then the only difference between a pass and a fail.

A check is named ``REFERENCE:OUTPUT`` for a comparison (``float64:query_out``), ``table:NAME`` for a stored table
(``table:cos_table``), ``guard:CASE`` for an out-of-range call the graph must reject (``guard:position -1``) and
``property:NAME`` for a measured property. ``PlantedBug.expected`` lists the comparisons, tables and guards that must
fail, exactly; properties are reported but not required (they are a second line of defence).

This module holds no bug: the bugs themselves live in one module per family (``planted/rope.py``, ...), and the
package collects their lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ropeexport.catalog import recipe_for
from ropeexport.graph.onnx_io import save_model
from ropeexport.verification.core import Verification, verify_artifact

# --- the bug -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlantedBug:
    """A wrong artifact: the spec it claims to be, how it is made, and the checks that must fail (module doc)."""

    name: str
    summary: str
    spec: Any
    plant: Callable[[Any], onnx.ModelProto]
    expected: frozenset[str]
    where: Mapping[str, Any] = field(default_factory=dict)  # the worst element's location (``located``)


def checks(*outputs: str, tables: bool = False, guards: tuple[str, ...] = ()) -> frozenset[str]:
    """The expected failing checks: each output against both references, the cos/sin tables, the named guards."""
    names = {f"{ref}:{o}" for ref in ("eager", "float64") for o in outputs}
    names |= {"table:cos_table", "table:sin_table"} if tables else set()
    return frozenset(names | {f"guard:{g}" for g in guards})


# --- graph editing -------------------------------------------------------------------------------------------------


def export(spec: Any) -> onnx.ModelProto:
    """The correct artifact of a spec (what ``build`` writes)."""
    return recipe_for(spec).export(spec)


def nodes_of(model: onnx.ModelProto, op_type: str) -> list[onnx.NodeProto]:
    """The top-level nodes of one op type, in graph order."""
    return [n for n in model.graph.node if n.op_type == op_type]


def producer(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    """The top-level node that writes the value ``name``."""
    return next(n for n in model.graph.node if name in n.output)


def set_initializer(model: onnx.ModelProto, name: str, array: np.ndarray) -> None:
    """Replace an initializer's value, or add it."""
    tensor = numpy_helper.from_array(np.asarray(array), name)
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(tensor)
            return
    model.graph.initializer.append(tensor)


def insert_before(model: onnx.ModelProto, anchor: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
    """Insert nodes, in order, just before ``anchor`` (the graph stays topologically sorted)."""
    index = list(model.graph.node).index(anchor)
    for offset, node in enumerate(new):
        model.graph.node.insert(index + offset, node)


def rewire(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every node (subgraphs included) that reads ``old`` reads ``new`` instead."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                rewire(attr.g, old, new)


def _reads(graph: onnx.GraphProto) -> set[str]:
    names = {o.name for o in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= _reads(attr.g)
    return names


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop the nodes and initializers an edit left unread."""
    graph = model.graph
    while True:
        used = _reads(graph)
        dead = [n for n in graph.node if not set(n.output) & used]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    for tensor in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(tensor)
    return model


# --- running -------------------------------------------------------------------------------------------------------


def failed_checks(verification: Verification) -> list[str]:
    """The names of every failing check (module doc), in report order, each once."""
    names = [f"{c.reference}:{c.output}" for c in verification.comparisons if not c.passed]
    names += [f"table:{t['name']}" for t in verification.tables if not t["passed"]]
    names += [f"guard:{g['case']}" for g in verification.guards if not g["passed"]]
    names += [f"property:{p['name']}" for p in getattr(verification, "properties", []) if p.get("passed") is False]
    return list(dict.fromkeys(names))


def located(worst: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    """Whether the worst element sits where expected: each key equal, or in the range / set given for it."""
    return all(
        worst.get(k) in v if isinstance(v, (range, frozenset, set, tuple)) else worst.get(k) == v
        for k, v in where.items()
    )


def worst_error(verification: Verification) -> dict[str, Any]:
    """The failing comparison with the largest max_abs (float64 first on ties), else the worst failing table.

    A comparison whose runtime raised has max_abs "inf" and, in place of a location, the error of the last probe
    that raised.
    """
    failing = [c for c in verification.comparisons if not c.passed]
    if failing:
        c = max(failing, key=lambda c: (c.max_abs, c.reference == "float64"))
        max_abs = c.max_abs if np.isfinite(c.max_abs) else str(c.max_abs)
        return {"check": f"{c.reference}:{c.output}", "max_abs": max_abs, **c.worst}
    tables = [t for t in verification.tables if not t["passed"]]
    if tables:
        t = max(tables, key=lambda t: t.get("max_ulp") or 0.0)
        return {"check": f"table:{t['name']}", **{k: v for k, v in t.items() if k != "name"}}
    return {}


@dataclass(frozen=True)
class Detection:
    """What verification said about one artifact: a planted bug, or a correct build (``expected`` empty).

    ``passed`` is None when verification raised instead of returning a verdict (``error`` says what): neither a
    pass nor a fail, and a bug in verification. ``located`` tells whether the worst element sits where the bug's
    ``where`` says it must.
    """

    name: str
    summary: str
    artifact: str
    passed: bool | None
    failed: tuple[str, ...]
    expected: tuple[str, ...]
    worst: dict[str, Any]
    located: bool = True
    error: str | None = None

    @property
    def as_expected(self) -> bool:
        """Exactly the expected comparisons, tables and guards failed (properties aside), and nothing raised."""
        return self.error is None and set(self.expected) == {f for f in self.failed if not f.startswith("property:")}

    def verdict(self, control: Detection | None = None) -> str:
        """One word for a planted bug, given the correct build of the same spec (``control``).

        ``caught`` (exactly the expected checks, worst element where expected), ``caught-by-other-checks``,
        ``caught-elsewhere``, ``false-alarm-only`` (every failing check fails the correct build too: nothing was
        learnt about the bug), ``missed`` (verification passed) or ``raised`` (verification crashed).
        """
        if self.error is not None:
            return "raised"
        if self.passed:
            return "missed"
        if control is not None and not set(self.failed) - set(control.failed):
            return "false-alarm-only"
        if not self.as_expected:
            return "caught-by-other-checks"
        return "caught" if self.located else "caught-elsewhere"

    def to_dict(self) -> dict[str, object]:
        """JSON-friendly."""
        return {
            "name": self.name,
            "summary": self.summary,
            "artifact": self.artifact,
            "passed": self.passed,
            "failed": list(self.failed),
            "expected": list(self.expected),
            "as_expected": self.as_expected,
            "located": self.located,
            "worst": self.worst,
            "error": self.error,
        }


def _verify(spec: Any, model: onnx.ModelProto, directory: Path) -> tuple[Verification | None, str | None]:
    save_model(model, Path(directory))  # checked by onnx: a planted bug is still a valid model
    try:
        return verify_artifact(spec, recipe_for(spec), Path(directory) / "model.onnx", ["ort"]), None
    except Exception as exc:  # verification must return a verdict; record what escaped instead of crashing the suite
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def detect(bug: PlantedBug, directory: Path) -> Detection:
    """Plant the bug and verify the wrong artifact as the spec it claims to be (files go to ``directory``)."""
    v, error = _verify(bug.spec, bug.plant(bug.spec), directory)
    expected = tuple(sorted(bug.expected))
    if v is None:
        return Detection(bug.name, bug.summary, bug.spec.name, None, (), expected, {}, False, error)
    worst = worst_error(v)
    return Detection(
        bug.name,
        bug.summary,
        bug.spec.name,
        v.passed,
        tuple(failed_checks(v)),
        expected,
        worst,
        located(worst, bug.where),
    )


def verify_correct(spec: Any, directory: Path) -> Detection:
    """Verify the correct export of a spec the same way: it must pass, nothing failing."""
    v, error = _verify(spec, export(spec), directory)
    summary = "the exporter's own graph, unmodified"
    if v is None:
        return Detection("correct build", summary, spec.name, None, (), (), {}, True, error)
    return Detection("correct build", summary, spec.name, v.passed, tuple(failed_checks(v)), (), worst_error(v))


def claimed_specs(bugs: list[PlantedBug]) -> list[Any]:
    """Every spec the bugs claim to be, once each, in first-claimed order (their correct builds must pass)."""
    seen: dict[str, Any] = {}
    for bug in bugs:
        key = repr(sorted(bug.spec.to_dict().items()))
        seen.setdefault(key, bug.spec)
    return list(seen.values())
