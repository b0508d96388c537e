"""Verification of a RoPE artifact: tables against float64, and outputs at probe positions against eager and float64.

Probes (each one call; L = max(position_ids) + 1 picks a length-dependent schedule's regime per call):
- ``start`` and ``end`` of the table, rows with different offsets (left padding, KV-cache offsets), decode calls
  (seq 1) at the last position;
- for length-dependent schedules, both sides of original_max_position_embeddings, and small positions in a call
  whose L selects the long regime;
- a sweep over every position when the artifact is small enough (at most ``SWEEP_ELEMENTS`` input elements in all),
  else over every k-th position plus the 8 positions around every power of two.
The stored tables are checked at every row, so together with the sweep every table row is covered.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ropeexport.encodings.rope import reference_module, to_torch
from ropeexport.encodings.schedules import get_schedule
from ropeexport.errors import RuntimeUnavailable
from ropeexport.numerics import FORMATS, ulp_distance
from ropeexport.runtimes import open_runner
from ropeexport.spec import RopeSpec
from ropeexport.verify.compare import TOLERANCES, Comparison
from ropeexport.verify.oracle import rope_oracle, rope_table_oracle

SWEEP_ELEMENTS = 2**25  # input elements the sweep may feed in all (about 10 s of eager + float64 work on 2 cores)
CALL_ELEMENTS = 2**21  # input elements per sweep call
TABLE_MAX_ULP = 0.5  # rounded once to nearest: never more than half a unit in the last place


@dataclass(frozen=True)
class Probe:
    """One call: a name and its position_ids [b, s]."""

    name: str
    position_ids: np.ndarray


@dataclass
class Verification:
    """Everything verification found; ``passed`` only when something ran and nothing failed."""

    comparisons: list[Comparison]
    tables: list[dict[str, Any]]
    runtimes: list[dict[str, Any]]
    probes: list[dict[str, Any]]
    coverage: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when at least one runtime ran, every comparison passed, and every table check passed."""
        ran = any(r["status"] == "verified" for r in self.runtimes)
        return ran and all(c.passed for c in self.comparisons) and all(t["passed"] for t in self.tables)


def _row(name: str, start: int, stop: int) -> Probe:
    return Probe(name, np.arange(start, stop, dtype=np.int64)[None, :])


def rope_probes(spec: RopeSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The probe calls for a spec, and a description of the sweep's coverage."""
    P = spec.max_positions
    s = min(8, P)
    probes = [_row("start", 0, s), _row("end", P - s, P)]
    offsets = [0, P // 2 - s // 2, P - s]
    probes.append(Probe("row-offsets", np.stack([np.arange(o, o + s, dtype=np.int64) for o in offsets])))
    probes.append(Probe("decode", np.array([[P - 1], [0], [P // 2]], dtype=np.int64)))
    threshold = get_schedule(spec.scaling).threshold(spec.scaling_params)
    if threshold is not None and threshold < P:
        probes.append(_row("below-original", max(0, threshold - s), threshold))  # L = original
        probes.append(_row("above-original", max(0, threshold - s + 1), threshold + 1))  # L = original + 1
        low = np.concatenate([np.arange(min(s, threshold), dtype=np.int64), [threshold]])
        probes.append(Probe("long-regime-low-positions", low[None, :]))
    per_position = (spec.num_heads + spec.num_kv_heads) * spec.head_dim
    stride = max(1, -(-P * per_position // SWEEP_ELEMENTS))
    positions = set(range(0, P, stride)) | {P - 1}
    if stride > 1:
        k = 1
        while k < P:
            positions |= {p for p in range(k - 4, k + 4) if 0 <= p < P}
            k *= 2
        if threshold is not None:
            positions |= {p for p in range(threshold - 4, threshold + 4) if 0 <= p < P}
    ordered = np.array(sorted(positions), dtype=np.int64)
    chunk = max(1, CALL_ELEMENTS // per_position)
    for i in range(0, len(ordered), chunk):
        part = ordered[i : i + chunk]
        probes.append(Probe(f"sweep[{part[0]}..{part[-1]}]", part[None, :]))
    coverage = {
        "positions_checked": len(ordered),
        "max_positions": P,
        "sweep": "every position" if stride == 1 else f"every {stride}th position plus 8 around each power of two",
        "tables": "every row against float64",
    }
    return probes, coverage


def check_tables(spec: RopeSpec, model_path: Path) -> list[dict[str, Any]]:
    """Each stored table against float64: shape, and the largest error in ulps of the table dtype."""
    model = onnx.load(str(model_path))
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer if t.name in ("cos_table", "sin_table")}
    regimes = rope_table_oracle(spec)
    results = []
    for index, name in enumerate(("cos_table", "sin_table")):
        expected = np.concatenate([regime[index] for regime in regimes])
        result: dict[str, Any] = {"name": name, "expected_shape": list(expected.shape), "dtype": spec.dtype}
        table = stored.get(name)
        if table is None or list(table.shape) != list(expected.shape):
            got = None if table is None else list(table.shape)
            result |= {
                "shape": got,
                "max_ulp": None,
                "passed": False,
                "reason": f"expected shape {list(expected.shape)}, found {got}",
            }
        else:
            ulps = ulp_distance(table, expected, spec.dtype)
            row = int(np.unravel_index(int(np.argmax(ulps)), ulps.shape)[0])
            result |= {
                "shape": list(table.shape),
                "max_ulp": float(ulps.max()),
                "worst_row": row,
                "passed": bool(ulps.max() <= TABLE_MAX_ULP),
            }
        results.append(result)
    return results


def _inputs(spec: RopeSpec, rng: np.random.Generator, positions: np.ndarray) -> dict[str, np.ndarray]:
    b, s = positions.shape
    dtype = FORMATS[spec.dtype].np_dtype
    shape = lambda heads: (b, heads, s, spec.head_dim)  # noqa: E731
    return {
        "query": rng.standard_normal(shape(spec.num_heads), dtype=np.float32).astype(dtype),
        "key": rng.standard_normal(shape(spec.num_kv_heads), dtype=np.float32).astype(dtype),
        "position_ids": positions,
    }


def _open(names: list[str], model_path: Path) -> Iterator[tuple[str, Any, str | None]]:
    for name in names:
        try:
            yield name, open_runner(name, model_path), None
        except RuntimeUnavailable as exc:
            yield name, None, str(exc)


def verify_rope(spec: RopeSpec, model_path: Path, runtimes: list[str], seed: int = 0) -> Verification:
    """Run the artifact on every probe with each runtime and compare with eager and float64 (module docstring)."""
    tables = check_tables(spec, model_path)
    opened = list(_open(runtimes, model_path))
    if not any(r is not None for _, r, _ in opened) and "onnx-reference" not in runtimes:
        # Nothing asked for can run this dtype here (ORT CPU has no bf16 kernels): the spec's own evaluator still can.
        opened += list(_open(["onnx-reference"], model_path))
    runners = [(n, r) for n, r, _ in opened if r is not None]
    runtime_info = [{"name": n, "status": "skipped", "reason": why} for n, r, why in opened if r is None]
    runtime_info += [{"name": n, "status": "verified", "device": r.describe()} for n, r in runners]
    reference = reference_module(spec)
    tol = TOLERANCES[spec.dtype]
    comparisons: dict[tuple[str, str, str], Comparison] = {}
    probes, coverage = rope_probes(spec)
    rng = np.random.default_rng(seed)
    for probe in probes:
        feeds = _inputs(spec, rng, probe.position_ids)
        with torch.no_grad():
            eager = reference(
                to_torch(feeds["query"]), to_torch(feeds["key"]), position_ids=torch.from_numpy(probe.position_ids)
            )
        expected = {
            "eager": {"query_out": _numpy(eager[0]), "key_out": _numpy(eager[1])},
            "float64": {
                "query_out": rope_oracle(spec, feeds["query"], probe.position_ids),
                "key_out": rope_oracle(spec, feeds["key"], probe.position_ids),
            },
        }
        for runtime, runner in runners:
            try:
                outputs: dict[str, np.ndarray] | None = runner.infer(feeds)
                error = ""
            except Exception as exc:  # a runtime error on a valid call is a verification failure, not a crash
                outputs, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            for ref_name, refs in expected.items():
                for output, want in refs.items():
                    key = (ref_name, runtime, output)
                    if key not in comparisons:
                        comparisons[key] = Comparison(ref_name, runtime, output, spec.dtype, tol.atol, tol.rtol)
                    if outputs is None or output not in outputs:
                        comparisons[key].fail(probe.name, error or f"the runtime returned no {output!r}")
                    else:
                        comparisons[key].update(probe.name, outputs[output], want, probe.position_ids)
    for _, runner in runners:
        runner.close()
    probe_info = [
        {
            "name": p.name,
            "shape": list(p.position_ids.shape),
            "min_position": int(p.position_ids.min()),
            "max_position": int(p.position_ids.max()),
        }
        for p in probes
    ]
    coverage["tolerance"] = {"dtype": spec.dtype, "atol": tol.atol, "rtol": tol.rtol, "reason": tol.reason}
    return Verification(list(comparisons.values()), tables, runtime_info, probe_info, coverage)


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy()  # exact: every bf16 value is a float32 value
    return t.numpy()
