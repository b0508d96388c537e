"""The view of an encoding artifact's report.json (``report.report_dict``, schema ``ropeexport.report/2``): rope,
apply, bias, scores, attention and block artifacts, a checkpoint layer's block too.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ropeexport.errors import ArtifactError
from ropeexport.report.views.base import FLAG, LIST, NUMBER, OBJECT, TEXT, WHOLE, Field, LayerUse, View
from ropeexport.results import JsonObject


class Histogram(View):
    """A comparison's log10 histogram of its nonzero absolute errors."""

    edges_log10 = Field[list[float]]("edges_log10", LIST, "The bin edges, log10 of an absolute error.")
    zeros = Field[int]("zeros", WHOLE, "How many elements had no error at all.")
    counts = Field[list[int]]("counts", LIST, "Elements per bin: below the first edge, each bin, past the last.")


class WorstElement(View):
    """Where a comparison's worst element sits (its recipe's locator fields: batch, head, position...) and its values;
    on a failed call, the probe and the error instead.
    """  # noqa: D205

    probe = Field[str | None]("probe", TEXT, "The probe (call) it was in.", optional=True)
    actual = Field[float | None]("actual", NUMBER, "The runtime's value; absent on a failed call.", optional=True,
                                 nullable=True)  # fmt: skip
    expected = Field[float | None]("expected", NUMBER, "The reference's value; absent on a failed call.",
                                   optional=True, nullable=True)  # fmt: skip
    error = Field[str | None]("error", TEXT, "Why the call failed (the runtime raised, a shape differed); absent "
                              "when it ran.", optional=True)  # fmt: skip

    @property
    def location(self) -> dict[str, Any]:
        """The locator's fields (batch, head, position, channel, index...): everything but probe, values and error."""
        return {k: v for k, v in self.data.items() if k not in ("probe", "actual", "expected", "error")}


class ComparisonRecord(View):
    """One (reference, runtime, output) comparison over every probe (``verification.compare.Comparison``); errors
    are absolute, in the output's units; a metric that was not finite (the runtime raised) is None.
    """  # noqa: D205

    reference = Field[str]("reference", TEXT, "What the runtime is compared with: 'eager' or 'float64'.")
    runtime = Field[str]("runtime", TEXT, "The runtime's registry name (ort, onnx-reference, trt).")
    output = Field[str]("output", TEXT, "The graph output compared.")
    dtype = Field[str]("dtype", TEXT, "The artifact's dtype.")
    atol = Field[float]("atol", NUMBER, "The absolute tolerance an element is allowed.")
    rtol = Field[float]("rtol", NUMBER, "The tolerance relative to |expected| an element is allowed.")
    passed = Field[bool]("passed", FLAG, "Every element within max(atol, rtol |expected|) and at least one compared.")
    elements = Field[int]("elements", WHOLE, "Elements compared over every probe.")
    failures = Field[int]("failures", WHOLE, "Elements past their allowance.")
    max_abs = Field[float | None]("max_abs", NUMBER, "Largest |actual - expected|.", nullable=True)
    mean_abs = Field[float | None]("mean_abs", NUMBER, "Mean |actual - expected|.", nullable=True)
    p99_abs = Field[float | None]("p99_abs", NUMBER, "99th percentile of |actual - expected| (histogram bins).",
                                  nullable=True)  # fmt: skip
    max_rel = Field[float | None]("max_rel", NUMBER, "Largest |actual - expected| / |expected|, where |expected| >= "
                                  "atol.", nullable=True)  # fmt: skip
    mean_rel = Field[float | None]("mean_rel", NUMBER, "Mean relative error (the same elements).", nullable=True)
    p99_rel = Field[float | None]("p99_rel", NUMBER, "99th percentile of the relative error.", nullable=True)
    max_ulp = Field[float | None]("max_ulp", NUMBER, "Largest error in units in the last place of the dtype at "
                                  "max(|expected|, 1).", nullable=True)  # fmt: skip
    max_ratio = Field[float | None]("max_ratio", NUMBER, "The worst element's error over its allowance (1: the "
                                    "limit).", nullable=True)  # fmt: skip
    cosine = Field[float | None]("cosine", NUMBER, "Cosine similarity of actual and expected; None when either is "
                                 "all zeros.", nullable=True)  # fmt: skip
    worst = Field[WorstElement]("worst", OBJECT, "The worst element: where, its values.", view=WorstElement)
    histogram = Field[Histogram]("histogram", OBJECT, "The log10 histogram of the absolute errors.", view=Histogram)


class CurveRecord(View):
    """``positions``: one comparison's worst absolute error per position (binned to at most 2048 points)."""

    reference = Field[str]("reference", TEXT, "'eager' or 'float64'.")
    runtime = Field[str]("runtime", TEXT, "The runtime's registry name.")
    output = Field[str]("output", TEXT, "The graph output.")
    axis = Field[str]("axis", TEXT, "What x counts: 'position', 'distance i-j'...")
    bin_width = Field[int]("bin_width", WHOLE, "Positions per point (1: unbinned).")
    x = Field[list[int]]("x", LIST, "Each point's first position [n].")
    max_abs = Field[list[float | None]]("max_abs", LIST, "Each bin's worst absolute error [n] (None: not finite).")
    max_ratio = Field[list[float | None]]("max_ratio", LIST, "Each bin's worst error over its allowance [n] "
                                          "(1: the tolerance envelope).")  # fmt: skip


class TableRecord(View):
    """``tables``: a table the graph stores (cos/sin, slopes, biases), checked in ulps against its float64 oracle."""

    name = Field[str]("name", TEXT, "The table's initializer name (without a block's prefix).")
    dtype = Field[str]("dtype", TEXT, "The dtype the table is stored in.")
    expected_shape = Field[list[int]]("expected_shape", LIST, "The shape the oracle gives.")
    shape = Field[list[int] | None]("shape", LIST, "The stored shape; None when the table is missing.",
                                    nullable=True)  # fmt: skip
    max_ulp = Field[float | None]("max_ulp", NUMBER, "Largest distance from the oracle in ulps of the dtype; None "
                                  "when the shape is wrong.", nullable=True)  # fmt: skip
    worst_row = Field[int | None]("worst_row", WHOLE, "The row (position) of that distance (rope, sinusoidal, "
                                  "TUPE tables).", optional=True)  # fmt: skip
    worst_distance = Field[int | None]("worst_distance", WHOLE, "The relative distance of that distance "
                                       "(Transformer-XL's r_head_table).", optional=True)  # fmt: skip
    reason = Field[str | None]("reason", TEXT, "Why it fails when its shape or dtype is wrong.", optional=True)
    passed = Field[bool]("passed", FLAG, "Within the table's ulp bound.")


class GuardRecord(View):
    """``guards``: a call with a position outside the table, which the graph must refuse."""

    runtime = Field[str]("runtime", TEXT, "The runtime's registry name.")
    case = Field[str]("case", TEXT, "The input and the bad value: 'position_ids -1'.")
    passed = Field[bool]("passed", FLAG, "The graph refused it, at a range guard.")
    error = Field[str]("error", TEXT, "What the runtime said, or why the refusal does not count.")


class PropertyCurve(View):
    """A property's curve, drawn in report.html."""

    x_label = Field[str]("x_label", TEXT, "What x is.")
    y_label = Field[str]("y_label", TEXT, "What y is.")
    x = Field[list[float]]("x", LIST, "[n]")
    y = Field[list[float]]("y", LIST, "[n]")


class PropertyRecord(View):
    """``properties``: a claim about the encoding measured through a runtime (shift invariance, long-term decay)."""

    runtime = Field[str]("runtime", TEXT, "The runtime's registry name.")
    name = Field[str]("name", TEXT, "The property.")
    passed = Field[bool | None]("passed", FLAG, "Whether it holds; None: informational (not measured, or a curve "
                                "to look at), no vote in the verdict.", nullable=True)  # fmt: skip
    summary = Field[str]("summary", TEXT, "One line of what was measured.")
    curve = Field[PropertyCurve | None]("curve", OBJECT, "Its curve, where it has one (RoPE's long-term decay).",
                                        optional=True, view=PropertyCurve)  # fmt: skip


class RuntimeRecord(View):
    """``runtimes``: a runtime asked for, verified or skipped."""

    name = Field[str]("name", TEXT, "The runtime's registry name.")
    status = Field[str]("status", TEXT, "'verified' or 'skipped'.")
    device = Field[str | None]("device", TEXT, "What ran (the runner's words); absent when skipped.", optional=True)
    reason = Field[str | None]("reason", TEXT, "Why it could not run here; absent when verified.", optional=True)


class ProbeRecord(View):
    """``probes``: one verification call: its name, the shapes of its inputs and the positions it covers."""

    name = Field[str]("name", TEXT, "The probe.")
    min_position = Field[int]("min_position", WHOLE, "Smallest position of any position input.")
    max_position = Field[int]("max_position", WHOLE, "Largest position of any position input.")

    @property
    def shapes(self) -> dict[str, list[int]]:
        """{input name: its shape} (each ``<input>_shape`` field)."""
        return {k.removesuffix("_shape"): v for k, v in self.data.items() if k.endswith("_shape")}


class EncodingReport(View):
    """An encoding artifact's report.json (``report.report_dict``, schema ``ropeexport.report/2``)."""

    schema = Field[str]("schema", TEXT, "'ropeexport.report/2'.")
    name = Field[str]("name", TEXT, "The artifact's name.")
    encoding = Field[str]("encoding", TEXT, "The encoding family.")
    artifact = Field[str]("artifact", TEXT, "The artifact kind: rope, apply, bias, scores, attention, block...")
    passed = Field[bool]("passed", FLAG, "A runtime ran and every comparison, table, guard and voting property "
                         "passed.")  # fmt: skip
    comparisons = Field[list[ComparisonRecord]]("comparisons", LIST, "Every (reference, runtime, output).",
                                                view=ComparisonRecord)  # fmt: skip
    positions = Field[list[CurveRecord]]("positions", LIST, "The per-position curves of the comparisons that have "
                                         "a position axis.", view=CurveRecord)  # fmt: skip
    properties = Field[list[PropertyRecord]]("properties", LIST, "The claims measured.", view=PropertyRecord)
    tables = Field[list[TableRecord]]("tables", LIST, "The stored tables checked.", view=TableRecord)
    guards = Field[list[GuardRecord]]("guards", LIST, "The out-of-range calls refused.", view=GuardRecord)
    runtimes = Field[list[RuntimeRecord]]("runtimes", LIST, "Every runtime asked for.", view=RuntimeRecord)
    coverage = Field[JsonObject]("coverage", OBJECT, "What the probes cover (the recipe's fields) and "
                                 "``tolerance``: the dtype's atol, rtol and why.")  # fmt: skip
    probes = Field[list[ProbeRecord]]("probes", LIST, "Every verification call.", view=ProbeRecord)
    spec = Field[JsonObject]("spec", OBJECT, "The spec's fields (``spec.to_dict()``).")
    spec_sha256 = Field[str]("spec_sha256", TEXT, "sha256 of the spec's canonical JSON (64 hex digits).")
    files = Field[JsonObject]("files", OBJECT, "{file name: sha256} of the artifact's files.")
    environment = Field[JsonObject]("environment", OBJECT, "Library versions, python, machine, cpu, gpu.")
    model = Field[JsonObject]("model", OBJECT, "Facts of the model file: inputs, outputs, opset ({} when none).")
    layers = Field[LayerUse | None]("layers", OBJECT, "Which layers use this encoding: built from a config that "
                                    "names its layers.", optional=True, view=LayerUse)  # fmt: skip
    optimizer = Field[JsonObject | None]("optimizer", OBJECT, "What ONNX Runtime's optimizer did to the rotations "
                                         "(the audit's record, ``audits.optimizer``): written by verify.",
                                         optional=True)  # fmt: skip

    def __init__(self, data: Mapping[str, Any], path: str = "", source: str = "report.json") -> None:
        super().__init__(data, path, source)
        if data.get("artifact") == "decoder":
            raise ArtifactError(self.where("artifact"), "is 'decoder': read it as a DecoderReport")
