"""A synthetic ``ropeexport.report/2`` dict with every key the renderers read, passing or failing."""

from __future__ import annotations

import copy
import functools
import json
import math
import tempfile
from pathlib import Path
from typing import Any

HOSTILE = "<script>alert(1)</script> a|b"

_TOLERANCE = {
    "dtype": "fp32",
    "atol": 1e-5,
    "rtol": 1e-5,
    "reason": "fused kernels may use FMA (<= 2 ulp seen) | three fp32 roundings",
}


def _histogram(scale: float) -> dict[str, Any]:
    edges = [float(e) for e in range(-12, -3)]
    counts = [int(1000 * math.exp(-((e + 8 - scale) ** 2) / 2)) for e in edges[:-1]]
    return {"edges_log10": edges, "counts": counts, "zeros": 4096}


def _comparison(reference: str, output: str, max_abs: float) -> dict[str, Any]:
    return {
        "reference": reference,
        "runtime": "ort",
        "output": output,
        "dtype": "fp32",
        "atol": 1e-5,
        "rtol": 1e-5,
        "max_abs": max_abs,
        "mean_abs": max_abs / 20,
        "p99_abs": max_abs / 3,
        "max_rel": 6e-4,
        "mean_rel": 1e-7,
        "p99_rel": 2e-6,
        "max_ulp": 1.92,
        "cosine": 1.0 - 3e-14,
        "elements": 268928,
        "failures": 0,
        "passed": True,
        "worst": {
            "probe": "sweep[0..2047]",
            "batch": 0,
            "head": 1,
            "position": 1510,
            "channel": 22,
            "actual": 3.0604116916656494,
            "expected": 3.060411968481315,
        },
        "histogram": _histogram(1.0 if reference == "float64" else 0.0),
    }


def _positions(reference: str, output: str, peak: float) -> dict[str, Any]:
    x = list(range(0, 2048, 16))
    return {
        "reference": reference,
        "runtime": "ort",
        "output": output,
        "axis": "position",
        "x": x,
        "max_abs": [0.0 if p == 0 else peak * (0.2 + 0.8 * p / 2048) for p in x],
        "bin_width": 16,
    }


def sample_report(passed: bool = True) -> dict[str, Any]:
    """A RoPE report; ``passed=False`` adds failures, null metrics, hostile strings and drops optional keys."""
    report: dict[str, Any] = {
        "schema": "ropeexport.report/2",
        "name": "rope-half-default-fp32-fused",
        "encoding": "rope",
        "artifact": "rope",
        "passed": True,
        "comparisons": [
            _comparison(reference, output, 2.4e-7 if reference == "eager" else 2.8e-7)
            for reference in ("eager", "float64")
            for output in ("query_out", "key_out")
        ],
        "positions": [
            _positions(reference, output, 2.4e-7 if reference == "eager" else 2.8e-7)
            for reference in ("eager", "float64")
            for output in ("query_out", "key_out")
        ],
        "properties": [
            {"name": "relative invariance", "passed": True, "summary": "max |<f(q,m),f(k,n)> - g(q,k,m-n)| 3.1e-6"},
            {"name": "norm preservation", "passed": True, "summary": "max relative norm change 1.2e-7"},
            {
                "name": "long-term decay",
                "passed": None,
                "summary": "relative upper bound falls from 1 at distance 0 to 0.21 at 256",
                "curve": {
                    "x_label": "relative distance",
                    "y_label": "relative upper bound",
                    "x": list(range(0, 257, 4)),
                    "y": [1.0 / (1.0 + d / 40) + 0.05 * math.cos(d / 9) for d in range(0, 257, 4)],
                },
            },
            {"name": "partial rotation tail untouched", "passed": True, "summary": "channels 32..63 bitwise equal"},
        ],
        "tables": [
            {
                "name": name,
                "dtype": "fp32",
                "shape": [2048, 16],
                "expected_shape": [2048, 16],
                "max_ulp": 0.49998,
                "worst_row": 359,
                "passed": True,
            }
            for name in ("cos_table", "sin_table")
        ],
        "guards": [
            {
                "runtime": "ort",
                "case": f"position {p}",
                "passed": True,
                "error": "[ONNXRuntimeError] : 2 : out of range",
            }
            for p in (-1, 2048)
        ],
        "runtimes": [
            {"name": "ort", "status": "verified", "device": "onnxruntime 1.31.1 CPUExecutionProvider"},
            {"name": "tensorrt", "status": "skipped", "reason": "TensorRT is not installed (pip install tensorrt)"},
        ],
        "coverage": {
            "positions_checked": 2048,
            "max_positions": 2048,
            "sweep": "every position (one vector per position, repeated across heads)",
            "tolerance": dict(_TOLERANCE),
        },
        "probes": [
            {"name": "start", "position_ids_shape": [1, 8], "min_position": 0, "max_position": 7},
            {"name": "sweep[0..2047]", "position_ids_shape": [1, 2048], "min_position": 0, "max_position": 2047},
        ],
        "spec": {
            "encoding": "rope",
            "name": "rope-half-default-fp32-fused",
            "artifact": "rope",
            "dtype": "fp32",
            "max_positions": 2048,
            "head_dim": 64,
            "rotary_dim": 32,
            "theta": 10000.0,
            "scaling_params": {},
        },
        "spec_sha256": "5" * 64,
        "files": {"model.onnx": "e" * 64},
        "environment": {
            "python": "3.11.7",
            "torch": "2.13.0+cpu",
            "onnx": "1.23.2",
            "onnxruntime": "1.31.1",
            "tensorrt": None,
            "cpu": "x86_64",
            "gpu": None,
        },
    }
    if passed:
        return report
    report = copy.deepcopy(report)
    report["passed"] = False
    report["name"] = f"rope {HOSTILE}"
    report["spec"]["name"] = HOSTILE
    wrong = report["comparisons"][2]  # float64 vs ort: query_out, a position off by one
    wrong.update(max_abs=0.31, p99_abs=0.12, max_ulp=2.6e6, cosine=0.9991, failures=1234, passed=False)
    wrong["worst"] = {
        "probe": "sweep[0..2047]",
        "batch": 0,
        "head": 3,
        "position": 2047,
        "channel": 1,
        "actual": 1.5,
        "expected": 1.19,
    }
    wrong["histogram"] = {"edges_log10": [float("-inf"), -9.0, -7.0, -5.0, -3.0, -1.0], "counts": [10, 40, 80, 20, 7]}
    raised = report["comparisons"][3]  # the runtime raised: every metric is null
    for key in ("max_abs", "mean_abs", "p99_abs", "max_rel", "mean_rel", "p99_rel", "max_ulp", "cosine"):
        raised[key] = None
    raised.update(failures=1, elements=0, passed=False, output=f"key_out {HOSTILE}")
    raised["worst"] = {"probe": "decode", "error": f"RuntimeError: {HOSTILE}\nsecond line"}
    del raised["histogram"]
    report["positions"][2]["max_abs"] = [None if i % 7 == 0 else 0.3 * i / 128 for i in range(128)]
    report["positions"][3]["max_abs"] = [None] * 128
    report["properties"][1].update(passed=False, summary=f"norm grew by 3e-3 at position 2047 {HOSTILE}")
    del report["properties"][2]["curve"]["y"]
    report["tables"][0].update(shape=[1024, 16], max_ulp=None, passed=False, reason=f"table too short {HOSTILE}")
    report["guards"][1].update(passed=False, error=f"the graph accepted position 2048 {HOSTILE}")
    report["runtimes"][1]["reason"] = f"TensorRT missing {HOSTILE}"
    report["coverage"]["tolerance"]["reason"] = HOSTILE
    report["environment"]["gpu"] = HOSTILE
    report["files"] = {HOSTILE: "0" * 64}
    for key in ("spec_sha256", "probes"):
        del report[key]
    return report


def minimal_report() -> dict[str, Any]:
    """Only the required keys, empty lists: what a renderer must survive."""
    return {
        "schema": "ropeexport.report/2",
        "name": "bare",
        "encoding": "rope",
        "artifact": "rope",
        "passed": False,
        "comparisons": [],
    }


OPTIONAL_KEYS = (
    "encoding",
    "artifact",
    "positions",
    "properties",
    "tables",
    "guards",
    "runtimes",
    "coverage",
    "probes",
    "spec",
    "spec_sha256",
    "files",
    "environment",
)


def degraded_reports() -> list[tuple[str, dict[str, Any]]]:
    """(id, report) pairs a renderer must survive: missing keys, nulls, wrong types, non-finite values, schema 1."""
    out: list[tuple[str, dict[str, Any]]] = [("minimal", minimal_report())]
    for key in OPTIONAL_KEYS:
        report = sample_report(passed=False)
        report.pop(key, None)
        out.append((f"without-{key}", report))

    nulls = sample_report(passed=False)
    for c in nulls["comparisons"]:
        for key in list(c):
            if key not in ("reference", "runtime", "output"):
                c[key] = None
    for curve in nulls["positions"]:
        curve.update(x=None, max_abs=None, bin_width=None, axis=None)
    nulls["properties"] = [{"name": None, "passed": None, "summary": None, "curve": {}}]
    nulls["tables"] = [dict.fromkeys(("name", "dtype", "shape", "expected_shape", "max_ulp", "passed", "reason"))]
    nulls["guards"] = [dict.fromkeys(("runtime", "case", "passed", "error"))]
    nulls["runtimes"] = [{"name": "ort", "status": None}]
    nulls["coverage"] = {"tolerance": None, "sweep": None}
    for key in ("environment", "spec", "files", "name", "schema", "passed"):
        nulls[key] = None
    out.append(("nulls", nulls))

    wrong = sample_report(passed=False)
    wrong.update(comparisons=None, positions="oops", properties=[1, "x", None], coverage=[], environment="x")
    wrong["tables"] = {"not": "a list"}
    out.append(("wrong-types", wrong))

    odd = sample_report(passed=True)
    odd["positions"][0]["max_abs"] = ["inf", "nan", None, 1e-3, -0.0] + [1e-7] * 123
    odd["positions"][1]["x"] = odd["positions"][1]["x"][:10]  # shorter than max_abs
    odd["positions"][2]["max_abs"] = [0.0] * 128  # exact everywhere: nothing on a log axis
    odd["positions"][3]["axis"] = "distance i-j"
    odd["comparisons"][0]["worst"] = {
        "probe": "p",
        "query_position": 9,
        "key_position": 2,
        "head": 0,
        "actual": "-inf",
        "expected": 1.0,
        "extra": [1, 2],
    }
    edges = [round(-12 + 0.1 * i, 1) for i in range(181)]
    odd["comparisons"][1]["histogram"] = {"edges_log10": edges, "counts": [5] + [0] * 60 + [7] * 120 + [2], "zeros": 0}
    odd["comparisons"][2]["histogram"] = {"edges_log10": [], "counts": []}
    odd["comparisons"][3]["histogram"] = {"edges_log10": [-9, -8], "counts": [0], "zeros": 12}
    odd["comparisons"][0]["cosine"] = -0.5
    odd["properties"][2]["curve"]["y"][3] = None
    out.append(("non-finite-and-odd-shapes", odd))

    schema1 = sample_report(passed=True)
    schema1["schema"] = "ropeexport.report/1"
    for key in ("encoding", "artifact", "positions", "properties", "spec_sha256"):
        del schema1[key]
    for c in schema1["comparisons"]:
        for key in ("p99_abs", "p99_rel", "mean_rel", "cosine", "histogram"):
            del c[key]
    out.append(("schema-1", schema1))
    return out


@functools.cache
def built_rope_report() -> dict[str, Any]:
    """report.json of a small RoPE artifact (tests.cases.small_spec: 256 positions, partial rotation, GQA).

    Built once per test session, in a temporary folder that is removed again.
    """
    from ropeexport import build
    from ropeexport.families.rope.spec import RopeSpec
    from tests.cases import small_spec

    with tempfile.TemporaryDirectory() as out_dir:
        result = build(RopeSpec(**small_spec()), Path(out_dir))
        return json.loads((result.path / "report.json").read_text(encoding="utf-8"))
