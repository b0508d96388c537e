"""A decoder verified on each runtime named, through the runtime registry (``ropeexport.runtimes``).

The same verification runs once per runtime: every scenario generated greedily through that runtime's runner and
every call judged against the float64 truth (and transformers) by ``decoder.verify``, with the same tolerance. Each
runtime gets its own generation and its own truth: a runtime that picks another token follows another sequence, and
is judged on the sequence it made. Runtimes run one after the other, each closed before the next opens (a decoder's
session holds its weights).

A runtime that cannot run here is recorded as skipped with its reason, never as a pass: not installed, no GPU, or no
kernel for an op the model uses (``onnx-reference`` and ONNX Runtime's ``com.microsoft`` ops: the reason names each
op); a runtime that says so part way (``RuntimeUnavailable`` from a call) is skipped too. When no runtime named could
run, ONNX Runtime's CPU provider verifies the decoder (``FALLBACK``, as encodings fall back to ``onnx-reference``)
and the runtime named stays skipped: the verdict is ORT's, and the CLI exits 3. A runtime that raises on a valid call
fails (``error``); its scenarios so far are dropped.

Every runtime is opened with ``cpu_only``: ``ort`` is ONNX Runtime's CPU provider even where CUDA is installed. The
decoder's bounds (``decoder.verify.TOLERANCE``) were measured there; a GPU runtime is one more entry of the registry,
named on purpose (``trt``), never picked behind the user's back.

One record per runtime, in the order named, the fallback last (report.json ``runtimes``; the index and ``verify``
read them): ``{"name", "status": "verified", "device", "passed", "seconds", "worst_rel", "agreement", "scenarios"}``
(``error`` too when the runtime raised, ``fallback`` when it ran for want of another), or ``{"name", "status":
"skipped", "reason"}``. report.json keeps the first verified runtime's scenarios as its own ``scenarios`` (where a
report from before decoders took several runtimes kept ORT's: ``diff``, the index and the stored figures read them
there) and no copy in its record; ``by_runtime`` reads both layouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ropeexport.errors import RuntimeInputError, RuntimeUnavailable
from ropeexport.results import JsonObject
from ropeexport.runtimes import open_runner

if TYPE_CHECKING:
    from ropeexport.decoder.greedy import Infer

FALLBACK = "ort"
# (runtime name, its runner's infer) -> every scenario's result (``decoder.verify.verify_decoder``)
# (the runtime's name, its infer, what lets the runtime go once every scenario has run) -> the scenarios' records
Verify = Callable[[str, "Infer", Callable[[], None]], list[dict[str, Any]]]


class RuntimeRaised(Exception):  # noqa: N818 - a runtime's own failure, carried past the scenario loop
    """The runtime raised on a call whose feeds passed the runner's checks: the runtime fails (module doc)."""


def _raising(infer: Infer) -> Infer:
    """``infer``, its runtime's own exceptions turned into RuntimeRaised; ours (bad feeds: a bug) kept as they are."""

    def call(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return infer(feeds)
        except (RuntimeUnavailable, RuntimeInputError):
            raise
        except Exception as exc:  # ORT and onnx.reference raise their own types
            first = (str(exc).splitlines() or [""])[0]
            raise RuntimeRaised(f"{type(exc).__name__}: {first}"[:500]) from exc

    return call


def summary(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst error over the logit scale and the greedy agreement over every scenario of one runtime."""
    agree = [tuple(int(x) for x in s["summary"]["agreement"].split("/")) for s in scenarios]
    return {"worst_rel": max((float(s["summary"]["worst_rel"]) for s in scenarios), default=0.0),
            "agreement": f"{sum(a for a, _ in agree)}/{sum(b for _, b in agree)}"}  # fmt: skip


def run_on(names: list[str], model_path: Any, verify: Verify) -> list[dict[str, Any]]:
    """Every runtime of ``names`` (then ``FALLBACK`` if none of them ran) opened on ``model_path`` and handed to
    ``verify``; one record per runtime (module doc).
    """  # noqa: D205
    records = [_run(name, model_path, verify) for name in names]
    if FALLBACK not in names and not any(r["status"] == "verified" for r in records):
        records.append(_run(FALLBACK, model_path, verify) | {"fallback": True})
    return records


def _run(name: str, model_path: Any, verify: Verify) -> dict[str, Any]:
    try:
        runner = open_runner(name, model_path, cpu_only=True)
    except RuntimeUnavailable as exc:
        return {"name": name, "status": "skipped", "reason": str(exc)}
    start = time.perf_counter()
    device = runner.describe()
    with runner:
        try:
            scenarios = verify(name, _raising(runner.infer), runner.close)
        except RuntimeUnavailable as exc:
            return {"name": name, "status": "skipped", "reason": str(exc)}
        except RuntimeRaised as exc:
            return {"name": name, "status": "verified", "device": device, "passed": False,
                    "seconds": round(time.perf_counter() - start, 2), "error": str(exc), "worst_rel": None,
                    "agreement": "0/0", "scenarios": []}  # fmt: skip
    return {"name": name, "status": "verified", "device": device, "passed": all(s["passed"] for s in scenarios),
            "seconds": round(time.perf_counter() - start, 2), **summary(scenarios),
            "scenarios": scenarios}  # fmt: skip


def by_runtime(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """{runtime name: its scenarios} of a decoder's report.json: the report's ``scenarios`` are its first verified
    runtime's, each other verified runtime's are in its ``runtimes`` record. A report written before decoders took
    several runtimes has no ``runtimes``: its scenarios are ``ort``'s (its CPU provider, the only one it ran).
    """  # noqa: D205
    scenarios = [s for s in report.get("scenarios") or [] if isinstance(s, dict)]
    records = [r for r in report.get("runtimes") or [] if isinstance(r, dict) and r.get("status") == "verified"]
    if not isinstance(report.get("runtimes"), list):
        return {FALLBACK: scenarios}
    out: dict[str, list[dict[str, Any]]] = {}
    for k, record in enumerate(records):
        own = record.get("scenarios")
        out[str(record.get("name"))] = scenarios if k == 0 else [s for s in own or [] if isinstance(s, dict)]
    return out


@dataclass(frozen=True)
class RuntimeVerdict:
    """One runtime of a re-verified decoder: ``ran`` and ``passed`` (False when skipped), ``device`` (the runner's
    words) or ``reason`` (why it was skipped, or what it raised), and ``scenarios``: its rows as
    ``DecoderVerifyResult.scenarios`` gives them (empty when it did not run).
    """  # noqa: D205

    name: str
    ran: bool
    passed: bool
    device: str
    reason: str
    scenarios: list[JsonObject]


def rows(now: list[JsonObject], stored: list[JsonObject]) -> list[JsonObject]:
    """One runtime's scenarios now beside the same runtime's stored ones (matched by name)."""
    before = {s["name"]: s for s in stored if "name" in s}
    out = []
    for s in now:
        old = before.get(s["name"])
        summary = (old or {}).get("summary") or {}
        out.append({
            "name": s["name"],
            "passed": s["passed"],
            "worst_rel": s["summary"]["worst_rel"],
            "agreement": s["summary"]["agreement"],
            "stored_passed": None if old is None else old.get("passed"),
            "stored_worst_rel": None if old is None else summary.get("worst_rel"),
            "stored_agreement": None if old is None else summary.get("agreement"),
        })  # fmt: skip
    return out


def index_runtimes(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The index's runtimes of a decoder report: name, status, device or reason (a report written before decoders
    took several runtimes: ORT's CPU provider, the one it ran).
    """  # noqa: D205
    records = report.get("runtimes")
    if not isinstance(records, list):
        return [{"name": "ort", "status": "verified", "device": str(report.get("runtime"))}]
    keys = ("name", "status", "device", "reason")
    return [{k: r[k] for k in keys if k in r} for r in records if isinstance(r, dict)]
