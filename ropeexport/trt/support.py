"""What the TensorRT ONNX parser accepts, version by version: one table, every fact with its source.

Only the operators ropeexport's artifacts use (collected from every kind, fused and decomposed, fp32/fp16/bf16,
If-branches included) and a few neighbours are recorded; ``compat.check_trt`` reads nothing else.

Versions: 8.6, every 10.x from 10.0 to 10.15, and 11 (= 11.0). How each column was filled:
- 10.15: onnx-tensorrt ``docs/operators.md`` at the 10.15 commit (``SOURCES["ops-10.15"]``), row by row.
- 10.0 .. 10.14: not read row by row (those versions of operators.md were not in the sources available). An
  operator's types at 10.x are the 10.15 row minus what the onnx-tensorrt Changelog says was added after 10.x
  (``OpSupport.added``); an operator exists from the release whose Changelog entry added it (``since``). This
  assumes the Changelog lists every addition; where it does not, the checker can be too lenient for 10.1 .. 10.14.
- 8.6: the 8.5 operators.md (``SOURCES["ops-8.5"]``) plus the 8.6 EA/GA Changelog entries, which add no types
  to the operators below (the 8.6 operators.md itself was not in the sources available).
- 11: no onnx-tensorrt operators.md or Changelog entry for 11 was in the sources available. Policy: 11 parses
  what 10.15 parses (the 11.0 release notes list parser additions only: Swish, TRT_Attention, TRT_MoE,
  TRT_KVCacheUpdate; nothing removed from the ONNX parser), with the documented 11.0 changes noted in every result.

Opsets: the parser dispatches nodes by op_type and refuses no model for its opset number (``SOURCES["importer"]``),
but operators change meaning with the opset, so a model is held to the highest opset documented for the version:
8.6 -> 17, 10.0 -> 20, 10.15 -> 24; 10.14 -> 23 (inferred: it added the opset-23 Attention); 11 -> 24 (policy:
10.15's, and the 11.5 release notes add opset 25); 10.1 .. 10.13 -> not stated (opsets up to 20 are known good).

Element types: DOUBLE and COMPLEX are refused at every version (project rule: the parser casts DOUBLE down to
FLOAT, which silently undoes a float64 computation); BF16 exists from 9.0 (Changelog 9.0 GA); 8.6 casts INT64
down to INT32 (8.5 operators.md), so INT64 meets an operator's INT32 column there.

Unknowns (a fact the sources do not state: ``None`` here, or an operator missing from ``OPS``) are reported as
incompatible with a reason saying they are unknown: an unknown is not a pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ropeexport.errors import SpecError


@dataclass(frozen=True)
class Source:
    """Where a fact was read: repository (or site), path, and which version of the file."""

    repo: str
    path: str
    version: str
    label: str  # how reasons cite it


SOURCES: dict[str, Source] = {
    "ops-10.15": Source(
        "onnx/onnx-tensorrt",
        "docs/operators.md",
        "commit fa5aa9f61e7781d2ca8f5351d42c1f19525a6124 ('TensorRT 10.15 supports operators in the inclusive range "
        "of opset 9 to opset 24'; DOUBLE has limited support: cast down to FLOAT)",
        "onnx-tensorrt operators.md (10.15)",
    ),
    "ops-10.0": Source(
        "onnx/onnx-tensorrt",
        "docs/operators.md",
        "the 10.0 version, header only ('TensorRT 10.0 supports operators in the inclusive range of opset 9 to opset "
        "20'; types DOUBLE, FLOAT32, FLOAT16, BFLOAT16, INT32, INT64, FP8, INT8, INT4, UINT8, BOOL); commit not shown "
        "by the index, rows not read",
        "onnx-tensorrt operators.md (10.0)",
    ),
    "ops-8.5": Source(
        "onnx/onnx-tensorrt",
        "docs/operators.md",
        "commit 6d0ab7be324d02c7feb3a306b6fdbeae84f71ddc ('TensorRT 8.5 supports operators up to Opset 17'; INT64 "
        "cast down to INT32 and DOUBLE down to FLOAT, clamping)",
        "onnx-tensorrt operators.md (8.5)",
    ),
    "changelog": Source(
        "onnx/onnx-tensorrt",
        "docs/Changelog.md",
        "the version whose newest entry is 'TensorRT 10.15 GA Release - 2026-2-2' (commit not shown by the index)",
        "onnx-tensorrt Changelog",
    ),
    "dla-8.6": Source(
        "NVIDIA/Deep-Learning-Accelerator-SW",
        "operators/README.md",
        "the version listing TensorRT 8.6.11 ('TensorRT 8.6 supports operators up to Opset 17'); commit not shown",
        "NVIDIA DLA operators README (8.6)",
    ),
    "importer": Source(
        "onnx/onnx-tensorrt",
        "ModelImporter.cpp",
        "commit 009d6541b4ee1fa3f3150cd7cbabe7e56aa54840: importModel only warns below opset 7 (no upper opset "
        "check); nodes are dispatched by op_type; an unknown op_type goes to the plugin fallback importer",
        "onnx-tensorrt ModelImporter.cpp",
    ),
    "onnx-defs": Source(
        "onnx/onnx", "onnx.defs (onnx 1.23 installed here)", "Attention, RotaryEmbedding: opset 23", "ONNX schemas"
    ),
    "rope-layer": Source(
        "docs.nvidia.com",
        "deeplearning/tensorrt/latest/inference-library/transformers-rope.html",
        "IRotaryEmbeddingLayer: input [B, N, S, H]; cos/sin [B, S, H/2], or [maxPositionId + 1, H/2] with the "
        "optional positionIds [B, S]",
        "TensorRT RoPE guide",
    ),
    "qdp": Source(
        "NVIDIA/TensorRT",
        "samples/python/quickly_deployable_plugins/README.md",
        "a node maps to a plugin when its op_type is the plugin name and a string attribute plugin_namespace holds "
        "the namespace",
        "TensorRT quickly deployable plugins README",
    ),
    "rn-11.0": Source(
        "docs.nvidia.com, github.com/NVIDIA/TensorRT",
        "tensorrt/11.0.0/getting-started/release-notes-11/11.0.0.html; releases/tag/v11.0",
        "11.0: strongly typed networks by default, weak typing and IPluginV2 removed; parsers: added Swish and the "
        "custom ops TRT_Attention, TRT_MoE, TRT_KVCacheUpdate",
        "TensorRT 11.0 release notes",
    ),
    "rn-11.5": Source(
        "github.com/NVIDIA/TensorRT",
        "releases/tag/v11.5",
        "'Added support for ONNX opset 25' (so 11.0 .. 11.4 stop at 24; the 11.x opset guide's 'maximum opset 25' "
        "describes the latest 11.x)",
        "TensorRT 11.5 release notes",
    ),
    "opset-guide-11": Source(
        "docs.nvidia.com",
        "deeplearning/tensorrt/latest/reference/onnx-opset-guide.html",
        "'TensorRT 11.x': ONNX package 1.20.0, maximum opset 25, minimum opset 9",
        "TensorRT ONNX opset guide (11.x)",
    ),
    "policy": Source("ropeexport", "ropeexport/trt/support.py", "derivations stated in this docstring", "policy"),
}


def cite(keys: str) -> str:
    """Source keys as reasons print them: "changelog 10.14, ops-10.15" -> "onnx-tensorrt Changelog 10.14, ..."."""
    out = []
    for item in keys.split(","):
        key, _, rest = item.strip().partition(" ")
        label = SOURCES[key].label if key in SOURCES else key
        out.append(f"{label} {rest}".strip())
    return ", ".join(out)


VERSIONS: tuple[str, ...] = ("8.6", *(f"10.{minor}" for minor in range(16)), "11")
HEADLINE_VERSIONS: tuple[str, ...] = ("8.6", "10.13", "10.15", "11")  # the verdict table and the manifest


def version_key(version: str) -> tuple[int, int]:
    """(major, minor) of a table version, for ordering ("11" is 11.0)."""
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


def resolve_version(text: str) -> str:
    """The table version a ``--trt-version`` string names ("10.14.1" -> "10.14", "11.0" -> "11"); else SpecError."""
    known = ", ".join(VERSIONS)
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?(?:\.\d+)*", value)
    if not match:
        raise SpecError("trt_version", f"{text!r} is not a version string like 10.15; known versions: {known}")
    major, minor = int(match.group(1)), int(match.group(2) or 0)
    for version in VERSIONS:
        if version_key(version) == (major, minor):
            return version
    raise SpecError("trt_version", f"TensorRT {value} is not in the support table; known versions: {known}")


@dataclass(frozen=True)
class VersionFacts:
    """Parser-wide facts of one version: highest documented opset and the tensor types it imports."""

    max_opset: int | None  # None: not stated by the sources
    opset_source: str
    types: frozenset[str]  # element types the parser imports (DOUBLE is never allowed: see compat)
    int64_to_int32: bool  # 8.x: INT64 is cast down to INT32, clamping


_TYPES_8 = frozenset({"FP32", "FP16", "INT32", "INT64", "INT8", "BOOL", "UINT8", "DOUBLE"})  # ops-8.5
_TYPES_10 = frozenset({"FP32", "FP16", "BF16", "INT32", "INT64", "FP8", "INT8", "INT4", "UINT8", "BOOL", "DOUBLE"})


def version_facts(version: str) -> VersionFacts:
    """The parser-wide facts of a table version (sources in the strings)."""
    if version == "8.6":
        return VersionFacts(17, "dla-8.6, ops-8.5", _TYPES_8, True)
    fp4 = {"FP4"} if version_key(version) >= (10, 8) else set()  # changelog 10.8: FLOAT4E2M1 for quantized networks
    types = _TYPES_10 | fp4
    if version == "10.0":
        return VersionFacts(20, "ops-10.0", types, False)
    if version == "10.14":
        # Inferred, not stated: 10.14 added the Attention importer (changelog) and Attention exists only from
        # opset 23 (onnx-defs), so 10.14 reads opset-23 models.
        return VersionFacts(
            23, "changelog 10.14 (Attention importer), onnx-defs (Attention is opset 23): inferred", types, False
        )
    if version == "10.15":
        return VersionFacts(24, "ops-10.15", types, False)
    if version == "11":
        return VersionFacts(24, "policy (10.15's), rn-11.5 (opset 25 only from 11.5)", types, False)
    return VersionFacts(None, "not stated for this version", types, False)


def opset_floor(version: str) -> tuple[int, str]:
    """The highest opset known to be accepted: the version's own, else the newest documented earlier one.

    Assumes a later parser reads at least what an earlier one did (no Changelog entry removes an opset).
    """
    for earlier in reversed(VERSIONS[: VERSIONS.index(version) + 1]):
        facts = version_facts(earlier)
        if facts.max_opset is not None:
            return facts.max_opset, f"TensorRT {earlier}: {cite(facts.opset_source)}"
    raise AssertionError("8.6 documents its opset")


FLOAT = ("FP32", "FP16")
INTS = ("INT32", "INT64")
ALL_10 = ("FP32", "FP16", "BF16", "INT32", "INT64", "BOOL")
ALL_8 = ("FP32", "FP16", "INT32", "INT8", "BOOL")


@dataclass(frozen=True)
class OpSupport:
    """One ONNX operator (default domain): from which version the parser imports it, types, and restrictions.

    ``types_8_6`` / ``types_10_15``: the operators.md "Supported Types" column (8.5 doc for 8.6). ``added``: types
    the Changelog says arrived at a given 10.x. ``data_inputs``: the inputs that column constrains (indices,
    shapes and axes are integer by the ONNX spec and are not checked against it); None = every input.
    ``check_outputs``: the column also constrains the outputs (Cast's target type, If's branch outputs...).
    """

    since: str  # first table version whose parser imports the op ("8.6": at 8.6 or earlier)
    types_8_6: tuple[str, ...] | None
    types_10_15: tuple[str, ...]
    data_inputs: tuple[int, ...] | None = None
    check_outputs: bool = False
    constant_axes: int | None = None  # input index that must be an initializer or a Constant's output
    notes: str = ""
    sources: str = "ops-8.5, ops-10.15"
    added: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _ew(ints: bool = True, bf16: bool = True) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    return FLOAT + (("INT32",) if ints else ()), FLOAT + (("BF16",) if bf16 else ()) + (INTS if ints else ())


_MATH = _ew(ints=False)  # Cos, Sin, Exp, Log, ... : FP32, FP16 (8.6); + BF16 (10.15)
_ARITH = _ew()  # Add, Sub, Mul, Div, Max, Min, Abs, comparisons: + INT32 (8.6); + BF16, INT32, INT64 (10.15)
_MOVE_8 = ("FP32", "FP16", "INT32", "INT8", "BOOL")  # Reshape, Transpose, Shape, Unsqueeze, ... at 8.6

OPS: dict[str, OpSupport] = {
    # Elementwise arithmetic and comparisons.
    "Add": OpSupport("8.6", *_ARITH),
    "Sub": OpSupport("8.6", *_ARITH),
    "Mul": OpSupport("8.6", *_ARITH),
    "Div": OpSupport("8.6", *_ARITH),
    "Max": OpSupport("8.6", *_ARITH),
    "Min": OpSupport("8.6", *_ARITH),
    "Abs": OpSupport("8.6", *_ARITH),
    "Neg": OpSupport("8.6", *_ARITH),
    "Pow": OpSupport(
        "8.6",
        FLOAT,
        ALL_10[:5],
        added=(("10.8", ("INT32", "INT64")),),
        notes="integer exponents since 10.8 and integer bases since 10.12 (changelog); tracked as INT types at 10.8",
    ),
    "Less": OpSupport("8.6", *_ARITH),
    "LessOrEqual": OpSupport("8.6", *_ARITH),
    "Greater": OpSupport("8.6", *_ARITH),
    "GreaterOrEqual": OpSupport("8.6", *_ARITH),
    "Equal": OpSupport("8.6", *_ARITH),
    "Not": OpSupport("8.6", ("BOOL",), ("BOOL",)),
    "Or": OpSupport("8.6", ("BOOL",), ("BOOL",)),
    "And": OpSupport("8.6", ("BOOL",), ("BOOL",)),
    "Where": OpSupport("8.6", FLOAT + ("INT32", "BOOL"), ALL_10, data_inputs=(1, 2)),
    "Clip": OpSupport("8.6", FLOAT + ("INT8",), FLOAT + ("BF16",), notes="no integer types at 10.15"),
    # Transcendental and rounding.
    "Cos": OpSupport("8.6", *_MATH),
    "Sin": OpSupport("8.6", *_MATH),
    "Exp": OpSupport("8.6", *_MATH),
    "Log": OpSupport("8.6", *_MATH),
    "Sqrt": OpSupport("8.6", *_MATH),
    "Reciprocal": OpSupport("8.6", *_MATH),
    "Floor": OpSupport("8.6", *_MATH),
    "Ceil": OpSupport("8.6", *_MATH),
    "Softmax": OpSupport("8.6", *_MATH),
    "Tanh": OpSupport("8.6", FLOAT + ("INT8",), FLOAT + ("BF16",)),  # a soft-capped attention's logits
    "MatMul": OpSupport("8.6", *_MATH),
    # Reductions: axes as an input (opset 18+) must be an initializer at 10.15.
    "ReduceMax": OpSupport("8.6", FLOAT, FLOAT + ("BF16",) + INTS, data_inputs=(0,), constant_axes=1),
    "ReduceMin": OpSupport("8.6", FLOAT, FLOAT + ("BF16",) + INTS, data_inputs=(0,), constant_axes=1),
    "ReduceSum": OpSupport("8.6", FLOAT, FLOAT + ("BF16",) + INTS, data_inputs=(0,), constant_axes=1),
    "ReduceMean": OpSupport("8.6", FLOAT, FLOAT + ("BF16",) + INTS, data_inputs=(0,), constant_axes=1),  # RMSNorm
    "CumSum": OpSupport(
        "8.6",
        FLOAT,
        FLOAT + ("BF16",),
        data_inputs=(0,),
        constant_axes=1,
        notes="no integer types; axis must be an initializer (8.5) / a build-time constant (10.15)",
    ),
    # Data movement and shapes.
    "Cast": OpSupport("8.6", ALL_8, ALL_10 + ("UINT8",), check_outputs=True),
    "Identity": OpSupport("8.6", ALL_8, ALL_10),
    "Concat": OpSupport("8.6", ALL_8, ALL_10),
    "Reshape": OpSupport("8.6", _MOVE_8, ALL_10, data_inputs=(0,)),
    "Transpose": OpSupport("8.6", _MOVE_8, ALL_10),
    "Expand": OpSupport("8.6", FLOAT + ("INT32", "BOOL"), ALL_10, data_inputs=(0,)),
    "Tile": OpSupport("8.6", FLOAT + ("INT32", "BOOL"), ALL_10, data_inputs=(0,)),
    "Shape": OpSupport("8.6", _MOVE_8, ALL_10),
    "Size": OpSupport("8.6", _MOVE_8, ALL_10),
    "Unsqueeze": OpSupport("8.6", _MOVE_8, ALL_10, data_inputs=(0,), constant_axes=1, notes="axes must be constant"),
    "Squeeze": OpSupport(
        "8.6",
        _MOVE_8,
        ALL_10,
        data_inputs=(0,),
        constant_axes=1,
        notes="axes must be an initializer (8.6), resolvable to a constant (10.15); dynamic axes since 10.7",
    ),
    "Slice": OpSupport("8.6", _MOVE_8, ALL_10, data_inputs=(0,), notes="tensor axes since 10.3 (changelog)"),
    "Split": OpSupport("8.6", FLOAT + ("INT32", "BOOL"), ALL_10, data_inputs=(0,)),
    "Gather": OpSupport("8.6", FLOAT + ("INT8", "INT32", "BOOL"), ALL_10, data_inputs=(0,)),
    "GatherElements": OpSupport("8.6", FLOAT + ("INT8", "INT32", "BOOL"), ALL_10, data_inputs=(0,)),
    "ScatterElements": OpSupport(
        "8.6",
        FLOAT + ("INT8", "INT32"),
        FLOAT + ("BF16",) + INTS,
        data_inputs=(0, 2),
        notes="reduction attribute since 10.0 (changelog)",
    ),
    "Range": OpSupport("8.6", FLOAT + ("INT32",), FLOAT + ("BF16",) + INTS),
    "ConstantOfShape": OpSupport(
        "8.6", ("FP32",), ALL_10, data_inputs=(), check_outputs=True, notes="FP32 only at 8.6 (8.5 doc)"
    ),
    "Constant": OpSupport("8.6", ALL_8, ALL_10, data_inputs=(), check_outputs=True),
    "Trilu": OpSupport("8.6", ALL_8, ALL_10, data_inputs=(0,)),
    # Control flow: the type column constrains the branch / body outputs.
    "If": OpSupport(
        "8.6",
        FLOAT + ("INT32", "BOOL"),
        ALL_10,
        data_inputs=(),
        check_outputs=True,
        notes="branch outputs must have different names, and broadcastable shapes (8.6) / the same rank (10.15)",
    ),
    "Loop": OpSupport(
        "8.6",
        FLOAT + ("INT32", "BOOL"),
        ALL_10,
        data_inputs=(),
        check_outputs=True,
        notes="scan output length cannot be dynamic; loop-carried shapes must not change (10.15)",
    ),
    # Transformer operators (opset 23).
    "Attention": OpSupport(
        "10.14",
        None,
        FLOAT + ("BF16", "INT8", "FP8"),
        data_inputs=(0, 1, 2, 3),
        notes="Q, K, V and attn_mask must be 4-D; past_key, past_value, nonpad_kv_seqlen inputs, present_key, "
        "present_value, qk_matmul_output outputs, qk_matmul_output_mode and softcap attributes are unsupported",
        sources="changelog 10.14 ('Added support for the Attention operator'), ops-10.15",
    ),
    "RotaryEmbedding": OpSupport(
        "10.15",
        None,
        FLOAT + ("BF16",),
        data_inputs=(0, 1, 2),
        notes="position_ids must be INT64 (ops-10.15); input [B, N, S, H] (rope-layer); IRotaryEmbeddingLayer",
        sources="changelog 10.15 ('Added support for RotaryEmbedding'), ops-10.15, rope-layer",
    ),
}

# Custom domains. The ropeexport plugin is a quickly deployable (tensorrt.plugin, IPluginV3) plugin.
PLUGIN_DOMAIN = "ropeexport"
PLUGIN_QDP_SINCE = "10.6"  # changelog 10.6: "Added support for parsing nodes with Quickly Deployable Plugins"
PLUGIN_DOMAIN_NAMESPACE_SINCE = "10.10"  # changelog 10.10: "Plugin fallback importer ... namespace from domain"
NEVER_DOMAINS = {"com.microsoft": "ONNX Runtime contrib ops: ropeexport never sends them to TensorRT (project rule)"}


def op_support(op_type: str) -> OpSupport | None:
    """The table row of a default-domain operator; None when the table does not record it."""
    return OPS.get(op_type)


def op_types(op: OpSupport, version: str) -> tuple[str, ...] | None:
    """The types ``op`` imports at ``version`` (derivation in the module docstring); None when not parsed there."""
    if version_key(version) < version_key(op.since):
        return None
    if version == "8.6":
        return op.types_8_6
    later = [t for at, added in op.added if version_key(at) > version_key(version) for t in added]
    return tuple(t for t in op.types_10_15 if t not in later)
