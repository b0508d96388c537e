"""Verification of any artifact: run it on its kind's probes with each runtime, compare with eager and float64.

The artifact kind (handed in; ``catalog.recipe_for`` finds it) supplies the probes, feeds, eager reference, float64
oracle, the locator of an element and optional table checks; this module only opens runtimes, runs, and folds errors
into Comparisons.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.recipes import Feeds, Probe, Recipe
from ropeexport.runtimes import open_runner
from ropeexport.runtimes.base import Runner
from ropeexport.verification.compare import TOLERANCES, Comparison, Tolerance


@dataclass
class Verification:
    """Everything verification found; ``passed`` only when something ran and nothing failed."""

    comparisons: list[Comparison]
    tables: list[dict[str, Any]]
    runtimes: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    coverage: dict[str, Any] = field(default_factory=dict)
    guards: list[dict[str, Any]] = field(default_factory=list)
    properties: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when a runtime ran and every comparison, table check, guard and property passed.

        A property whose ``passed`` is None is informational (a curve to look at) and does not vote.
        """
        ran = any(r["status"] == "verified" for r in self.runtimes)
        records = [*self.tables, *self.guards, *(p for p in self.properties if p["passed"] is not None)]
        return ran and all(c.passed for c in self.comparisons) and all(r["passed"] for r in records)


def resolve_tolerances(
    spec: Any, outputs: list[str], atol: dict[str, float], rtol: dict[str, float], base: Tolerance | None = None
) -> dict[str, tuple[float, float]]:
    """(atol, rtol) per output: ``base`` (else the dtype's defaults), then a ``""`` override, then per-output ones.

    Overrides name outputs as Polygraphy does (``--atol query_out:1e-5``); an unknown name is a SpecError listing
    the artifact's outputs.
    """
    for given in (atol, rtol):
        unknown = sorted(set(given) - {"", *outputs})
        if unknown:
            raise SpecError(
                "atol/rtol", f"unknown output {unknown[0]!r}; this artifact's outputs: {', '.join(outputs)}"
            )
    base = base or TOLERANCES[spec.dtype]
    return {o: (atol.get(o, atol.get("", base.atol)), rtol.get(o, rtol.get("", base.rtol))) for o in outputs}


def _guard(runtime: str, runner: Runner, case: str, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Send an out-of-range call straight to the runtime (past the runner's checks): it must raise."""
    try:
        runner._run(feeds)
    except Exception as exc:  # the graph refused the call
        # The whole message: it names the guard (input and valid range); a report wraps it, never cuts it.
        message = " ".join(str(exc).split())[:2000]
        if runtime == "ort" and GUARD_PATTERN.search(message) is None:
            # ONNX Runtime names the failing node: a refusal elsewhere (a shape error, say) is not the guard working.
            return {
                "runtime": runtime,
                "case": case,
                "passed": False,
                "error": f"failed, but not at a range guard: {message}",
            }
        return {"runtime": runtime, "case": case, "passed": True, "error": message}
    return {
        "runtime": runtime,
        "case": case,
        "passed": False,
        "error": "the graph accepted a position outside the table and returned values",
    }


GUARD_PATTERN = re.compile(r"must lie in \[0, \d+\]")  # graph.guard.guard_node_name


def boundary_guards(spec: Any, kind: Any, probe: Probe, rng: np.random.Generator) -> list[tuple[str, Feeds]]:
    """Calls every artifact must refuse inside its graph, one position input at a time.

    ``probe`` with the last entry of one position input set to -1 or max_positions: the first values outside the
    range on each side.
    """
    feeds = kind.feeds(spec, probe, rng)
    cases = []
    for name in probe.positions:
        for bad in (-1, spec.max_positions):
            changed = dict(feeds)
            changed[name] = feeds[name].copy()
            changed[name].flat[-1] = bad
            cases.append((f"{name} {bad}", changed))
    return cases


def _open(names: list[str], model_path: Path) -> Iterator[tuple[str, Runner | None, str | None]]:
    for name in names:
        try:
            yield name, open_runner(name, model_path), None
        except RuntimeUnavailable as exc:
            yield name, None, str(exc)


def verify_artifact(
    spec: Any,
    kind: Recipe,
    model_path: Path,
    runtimes: list[str],
    seed: int = 0,
    atol: dict[str, float] | None = None,
    rtol: dict[str, float] | None = None,
    stage: Callable[..., None] | None = None,
) -> Verification:
    """Run the artifact on every probe of its kind with each runtime; compare with eager and the float64 oracle.

    ``atol`` / ``rtol`` override the dtype's tolerances: {output: value}, with ``""`` for every output. ``stage`` is
    called as ``stage(text, done, total)`` when, per probe, the references (eager and float64), each runtime and the
    comparison start (``done`` probes of ``total`` finished), and once more for guards and properties.
    """
    stage = stage or (lambda *_: None)
    outputs = [o.name for o in onnx.load(str(model_path), load_external_data=False).graph.output]
    tol = kind.tolerance(spec) if kind.tolerance else TOLERANCES[spec.dtype]
    tolerances = resolve_tolerances(spec, outputs, atol or {}, rtol or {}, tol)
    tables = kind.tables(spec, model_path) if kind.tables else []
    opened = list(_open(runtimes, model_path))
    if not any(r is not None for _, r, _ in opened) and "onnx-reference" not in runtimes:
        # Nothing asked for can run this dtype here (ORT CPU has no bf16 kernels): the spec's own evaluator still can.
        opened += list(_open(["onnx-reference"], model_path))
    runners = [(n, r) for n, r, _ in opened if r is not None]
    runtime_info = [{"name": n, "status": "skipped", "reason": why} for n, r, why in opened if r is None]
    runtime_info += [{"name": n, "status": "verified", "device": r.describe()} for n, r in runners]
    comparisons: dict[tuple[str, str, str], Comparison] = {}
    probes, coverage = kind.probes(spec)
    rng = np.random.default_rng(seed)
    try:
        for step, probe in enumerate(probes):
            feeds = kind.feeds(spec, probe, rng)
            stage(f"reference: {probe.name}", step, len(probes))
            expected = {"eager": kind.eager(spec, feeds), "float64": kind.oracle(spec, feeds)}
            for runtime, runner in runners:
                stage(f"{runtime}: {probe.name}", step, len(probes))
                try:
                    results: dict[str, np.ndarray] | None = runner.infer(feeds)
                    error = ""
                except Exception as exc:  # a runtime error on a valid call is a verification failure, not a crash
                    results, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                stage(f"verify: {probe.name}", step, len(probes))
                for ref_name, refs in expected.items():
                    for output, want in refs.items():
                        key = (ref_name, runtime, output)
                        if key not in comparisons:
                            out_atol, out_rtol = tolerances.get(output, (tol.atol, tol.rtol))
                            comparisons[key] = Comparison(ref_name, runtime, output, spec.dtype, out_atol, out_rtol)
                        if results is None or output not in results:
                            comparisons[key].fail(probe.name, error or f"the runtime returned no {output!r}")
                        else:
                            locate = lambda index, p=probe, o=output: kind.locate(p, o, index)  # noqa: E731
                            axis = kind.curve(probe, output) if kind.curve else None
                            comparisons[key].update(probe.name, results[output], want, locate, axis)
        stage("guards and properties", len(probes), len(probes))
        cases = kind.guards(spec) if kind.guards else boundary_guards(spec, kind, probes[0], rng)
        guards = [_guard(n, r, case, feeds) for n, r in runners for case, feeds in cases]
        properties: list[dict[str, Any]] = []
        if kind.properties is not None:
            for name, runner in runners:
                try:
                    properties += [{"runtime": name} | p for p in kind.properties(spec, runner)]
                except Exception as exc:  # a valid call the runtime refused: the artifact is wrong, not the check
                    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    properties.append(
                        {
                            "runtime": name,
                            "name": "property checks (the runtime raised)",
                            "passed": False,
                            "summary": f"the runtime raised on a valid call: {reason[:300]}",
                        }
                    )
    finally:
        for _, runner in runners:
            runner.close()
    probe_info = [
        {"name": p.name}
        | {f"{n}_shape": list(a.shape) for n, a in (p.positions | p.extras).items()}
        | {
            "min_position": min(int(a.min()) for a in p.positions.values()),
            "max_position": max(int(a.max()) for a in p.positions.values()),
        }
        for p in probes
    ]
    coverage["tolerance"] = {"dtype": spec.dtype, "atol": tol.atol, "rtol": tol.rtol, "reason": tol.reason}
    return Verification(list(comparisons.values()), tables, runtime_info, probe_info, coverage, guards, properties)
