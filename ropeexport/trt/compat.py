"""Would the TensorRT ONNX parser of a given version take this model? Checked on the CPU, without TensorRT.

``check_trt(model, "10.13")`` walks every node, If/Loop/Scan bodies included, against ``support`` (the table and its
sources) and returns a ``CompatResult`` with one reason per offending node:
- the operator: known to the table and parsed at that version; ``com.microsoft`` ops never (project rule);
  ``ropeexport`` domain ops only as the ropeexport plugin (a note says to load it); anything else is unknown;
- the model's ai.onnx opset against the highest opset documented for the version;
- element types of every tensor the parser would see: no DOUBLE or COMPLEX anywhere (the parser casts DOUBLE down
  to FLOAT, which silently defeats a float64 computation), the version's types (no BF16 at 8.6), and the operator's
  documented types (8.6 casts INT64 down to INT32 first);
- RotaryEmbedding (INT64 position_ids, 4-D input), Attention (4-D, no KV-cache inputs or outputs), If (different
  branch output names, same rank), constant axes.
An unknown (a fact the sources do not state) is reported as incompatible with the reason saying it is unknown.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from onnx import AttributeProto, TensorProto

from ropeexport.errors import SpecError
from ropeexport.inputs import check_regular_file
from ropeexport.trt import support
from ropeexport.trt.support import op_support, op_types, resolve_version, version_facts, version_key

# ONNX element type -> the name operators.md uses.
TYPE_NAMES: dict[int, str] = {
    TensorProto.FLOAT: "FP32",
    TensorProto.FLOAT16: "FP16",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.DOUBLE: "DOUBLE",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.INT8: "INT8",
    TensorProto.UINT8: "UINT8",
    TensorProto.BOOL: "BOOL",
    TensorProto.INT4: "INT4",
    TensorProto.FLOAT8E4M3FN: "FP8",
    TensorProto.FLOAT4E2M1: "FP4",
}
FLOAT64_TYPES = {TensorProto.DOUBLE, TensorProto.COMPLEX64, TensorProto.COMPLEX128}
MODEL = "(model)"
DOC = "onnx-tensorrt operators.md 10.15"  # the citation most reasons carry


@dataclass
class CompatResult:
    """A verdict for one TensorRT version: ``compatible``, one reason per offending node, and notes."""

    version: str
    compatible: bool
    reasons: list[dict[str, str]] = field(default_factory=list)  # [{node, op_type, reason}]
    notes: list[str] = field(default_factory=list)
    path: Path | None = None  # the model file checked (None for a model handed in memory)

    @property
    def passed(self) -> bool:
        """``compatible`` (``results.Result``)."""
        return self.compatible

    def __bool__(self) -> bool:
        return self.compatible

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the manifest's ``trt_compat``)."""
        return {
            "version": self.version,
            "compatible": self.compatible,
            "reasons": [dict(r) for r in self.reasons],
            "notes": list(self.notes),
        }


def load_model(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    """The model itself, or read from a path (external data is not needed: only types and structure are)."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = check_regular_file(model, "model", max_bytes=None)  # not a FIFO or device
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends: the file is not an ONNX model
        raise SpecError("model", f"{str(path)!r} is not a readable ONNX model ({type(exc).__name__})") from None
    # An empty file parses as an empty ModelProto: nothing to check is not "compatible".
    if not proto.HasField("graph") or not (proto.graph.node or proto.graph.output):
        raise SpecError("model", f"{str(path)!r} holds no graph (empty or not an ONNX model)")
    return proto


def check_trt(model: onnx.ModelProto | str | Path, trt_version: str) -> CompatResult:
    """Check ``model`` (a ModelProto or a path) against the TensorRT ONNX parser of ``trt_version``."""
    version = resolve_version(trt_version)
    proto = load_model(model)
    notes: list[str] = []
    try:
        typed = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
    except Exception as exc:  # inference is a help, not a requirement: declared types still get checked
        typed = proto
        notes.append(f"shape inference failed ({type(exc).__name__}); only declared tensor types were checked")
    checker = _Checker(version, typed)
    checker.check_graph(typed.graph, ChainMap(), ChainMap(), set(), "", top=True)
    checker.check_opset()
    notes.extend(checker.notes)
    notes.extend(_version_notes(version, checker.seen_int64))
    where = None if isinstance(model, onnx.ModelProto) else Path(model)
    return CompatResult(version, not checker.reasons, checker.reasons, list(dict.fromkeys(notes)), where)


def trt_compat(
    model: onnx.ModelProto | str | Path, versions: tuple[str, ...] = support.HEADLINE_VERSIONS
) -> dict[str, dict[str, Any]]:
    """{version: CompatResult.to_dict()} for each version: the manifest's ``trt_compat``."""
    proto = load_model(model)
    return {resolve_version(v): check_trt(proto, v).to_dict() for v in versions}


def _version_notes(version: str, seen_int64: bool) -> list[str]:
    notes = []
    if version == "8.6" and seen_int64:
        notes.append(
            "TensorRT 8.6 casts INT64 tensors down to INT32, clamping to +-INT_MAX (onnx-tensorrt operators.md 8.5); "
            "TensorRT >= 9.0 keeps INT64 (onnx-tensorrt Changelog 9.0 EA)"
        )
    if version == "11":
        notes.append(
            "TensorRT 11: no onnx-tensorrt operators.md for 11 was in the sources read; checked against 10.15's "
            "table (policy: 11.0 release notes list parser additions only). 11.0 builds strongly typed networks "
            "(weak typing removed): each tensor runs in the dtype the ONNX declares"
        )
    if version.startswith("10.") and version != "10.15":
        notes.append(
            f"TensorRT {version}: per-operator types derived from the 10.15 operators.md minus later Changelog "
            "additions (not read row by row for this version)"
        )
    return notes


def _type_of(value: onnx.ValueInfoProto) -> tuple[int, int | None]:
    """(element type, rank or None) of a tensor value info; (0, None) when not a typed tensor."""
    tensor = value.type.tensor_type
    rank = len(tensor.shape.dim) if tensor.HasField("shape") else None
    return tensor.elem_type, rank


def _subgraphs(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


class _Checker:
    """Walks graphs, collecting one reason per offending node."""

    def __init__(self, version: str, model: onnx.ModelProto) -> None:
        self.version = version
        self.facts = version_facts(version)
        self.opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        self.reasons: list[dict[str, str]] = []
        self.notes: list[str] = []
        self.seen_int64 = False

    # Graph walking ---------------------------------------------------------------------------------------------
    def check_graph(
        self,
        graph: onnx.GraphProto,
        types: ChainMap[str, int],
        ranks: ChainMap[str, int | None],
        constants: set[str],
        prefix: str,
        top: bool = False,
    ) -> None:
        """Record the graph's tensors (a scope over the outer ones), then check its I/O and every node."""
        types, ranks = types.new_child(), ranks.new_child()
        for init in graph.initializer:
            types[init.name], ranks[init.name] = init.data_type, len(init.dims)
            constants.add(init.name)
        for value in (*graph.input, *graph.value_info, *graph.output):
            elem, rank = _type_of(value)
            if elem:
                types[value.name], ranks[value.name] = elem, rank
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                constants.update(node.output)
                for attr in node.attribute:
                    if attr.name == "value":
                        types[node.output[0]] = attr.t.data_type
        if top:
            for kind, values in (("graph input", graph.input), ("graph output", graph.output)):
                for value in values:
                    if value.name not in constants:
                        problem = self._tensor_problem(value.name, types.get(value.name))
                        if problem:
                            self._add(value.name, f"({kind})", problem)
        for node in graph.node:
            name = prefix + (node.name or f"{node.op_type}({','.join(node.output)})")
            problems = self._node_problems(node, types, ranks, constants)
            if problems:
                self._add(name, node.op_type if not node.domain else f"{node.domain}::{node.op_type}", problems)
            for attr_name, sub in _subgraphs(node):
                self.check_graph(sub, types, ranks, set(constants), f"{name}/{attr_name}/")

    def _add(self, node: str, op_type: str, problems: str | list[str]) -> None:
        text = problems if isinstance(problems, str) else "; ".join(problems)
        self.reasons.append({"node": node, "op_type": op_type, "reason": text})

    def check_opset(self) -> None:
        """The model's ai.onnx opset against the highest opset documented for the version (a model-level reason)."""
        opset = self.opsets.get("ai.onnx")
        if opset is None:
            return
        floor, where = support.opset_floor(self.version)
        if opset <= floor:
            return
        if self.facts.max_opset is not None:
            text = (
                f"the model imports ai.onnx opset {opset}; TensorRT {self.version} documents operators up to opset "
                f"{self.facts.max_opset} ({support.cite(self.facts.opset_source)}); export at opset "
                f"{self.facts.max_opset} or lower (--graph decomposed is opset 17)"
            )
        else:
            text = (
                f"the model imports ai.onnx opset {opset}; the highest opset TensorRT {self.version} parses is not "
                f"stated by the sources read (known: up to {floor} from {where}): unknown, treated as incompatible; "
                "--graph decomposed exports opset 17"
            )
        self._add(MODEL, "opset_import", text)

    # One node ----------------------------------------------------------------------------------------------------
    def _node_problems(
        self, node: onnx.NodeProto, types: Mapping[str, int], ranks: Mapping[str, int | None], constants: set[str]
    ) -> list[str]:
        domain = node.domain or "ai.onnx"
        problems: list[str] = []
        tensors = [t for t in (*node.input, *node.output) if t]
        if any(types.get(t) == TensorProto.INT64 for t in tensors):
            self.seen_int64 = True
        float64 = self._float64_problem(node, types)
        if float64:
            problems.append(float64)
        if domain in support.NEVER_DOMAINS:
            return [
                f"{domain}::{node.op_type} is a {support.NEVER_DOMAINS[domain]}; the TensorRT parser has no importer "
                "for it (it would look for a plugin of that name); export the standard ONNX graph instead",
                *problems,
            ]
        if domain == support.PLUGIN_DOMAIN:
            return self._plugin_problems(node) + problems
        if domain != "ai.onnx":
            return [
                f"custom domain {domain!r}: TensorRT would need a plugin named {node.op_type} that ropeexport does "
                "not provide: unknown, treated as incompatible",
                *problems,
            ]
        op = op_support(node.op_type)
        if op is None:
            return [
                f"{node.op_type} is not in ropeexport's TensorRT support table (ropeexport/trt/support.py records "
                "the operators its artifacts use): unknown, treated as incompatible",
                *problems,
            ]
        allowed = op_types(op, self.version)
        if allowed is None:
            return [self._too_old(node.op_type, op), *problems]
        problems += self._restriction_problems(node, types, ranks, constants)
        if not float64:
            problems += self._type_problems(node, op, allowed, types)
        return problems

    def _too_old(self, op_type: str, op: support.OpSupport) -> str:
        fix = {
            "RotaryEmbedding": "; export with --graph decomposed, or use the ropeexport::RotaryEmbedding plugin",
            "Attention": "; export with --graph decomposed (MatMul / Softmax / MatMul)",
        }.get(op_type, "")
        return (
            f"{op_type} is parsed by TensorRT {op.since} and newer ({support.cite(op.sources)}); this is TensorRT "
            f"{self.version}{fix}"
        )

    def _float64_problem(self, node: onnx.NodeProto, types: Mapping[str, int]) -> str | None:
        """A sentence for a node that reads or writes DOUBLE/COMPLEX tensors (every version: project rule)."""
        outputs = [types.get(t) for t in node.output if t]
        inputs = [types.get(t) for t in node.input if t]
        bad_out = next((t for t in outputs if t in FLOAT64_TYPES), None)
        bad_in = next((t for t in inputs if t in FLOAT64_TYPES), None)
        if bad_out is None and bad_in is None:
            return None
        kind = TensorProto.DataType.Name(bad_out if bad_out is not None else bad_in)
        if node.op_type == "Cast" and bad_out is not None:
            what = f"Cast to {kind}"
        elif bad_in is not None:
            what = f"{node.op_type} on {kind}"
        else:
            what = f"{node.op_type} producing {kind}"
        return (
            f"{what}: TensorRT has no float64 or complex tensors (the parser casts DOUBLE down to FLOAT: {DOC}), so "
            "this computation would silently run in float32; keep it out of the graph TensorRT sees"
        )

    def _tensor_problem(self, name: str, elem: int | None) -> str | None:
        """A graph input's or output's type against the version-wide type list."""
        if elem is None or elem == 0:
            return None
        if elem in FLOAT64_TYPES:
            kind = TensorProto.DataType.Name(elem)
            return f"{kind} tensor {name}: TensorRT has no float64 or complex tensors (parser casts DOUBLE to FLOAT)"
        trt = TYPE_NAMES.get(elem)
        if trt is None or trt not in self.facts.types:
            kind = TensorProto.DataType.Name(elem)
            added = " (BF16 arrived in TensorRT 9.0: onnx-tensorrt Changelog 9.0 GA)" if trt == "BF16" else ""
            return f"{kind} tensor {name}: TensorRT {self.version} has no {kind} tensors{added}"
        return None

    def _type_problems(
        self, node: onnx.NodeProto, op: support.OpSupport, allowed: tuple[str, ...], types: Mapping[str, int]
    ) -> list[str]:
        """Every tensor against the version's types; the constrained ones against the operator's column."""
        for tensor in (t for t in (*node.input, *node.output) if t):
            problem = self._tensor_problem(tensor, types.get(tensor))
            if problem:
                return [problem]
        positions = range(len(node.input)) if op.data_inputs is None else op.data_inputs
        checked = [node.input[i] for i in positions if i < len(node.input) and node.input[i]]
        if op.check_outputs:
            checked += [t for t in node.output if t]
        for tensor in checked:
            elem = types.get(tensor)
            if not elem:
                continue
            trt = TYPE_NAMES.get(elem, TensorProto.DataType.Name(elem))
            seen = "INT32" if (trt == "INT64" and self.facts.int64_to_int32) else trt
            if seen not in allowed:
                via = " (8.6 casts INT64 down to INT32)" if seen != trt else ""
                return [
                    f"{node.op_type} on {trt}{via} tensor {tensor}: TensorRT {self.version} documents "
                    f"{node.op_type} for {', '.join(allowed)} ({support.cite(op.sources)})"
                ]
        return []

    def _restriction_problems(
        self, node: onnx.NodeProto, types: Mapping[str, int], ranks: Mapping[str, int | None], constants: set[str]
    ) -> list[str]:
        out: list[str] = []
        op = node.op_type
        inputs = list(node.input)
        if op == "RotaryEmbedding":
            if len(inputs) > 3 and inputs[3] and types.get(inputs[3]) not in (None, 0, TensorProto.INT64):
                kind = TensorProto.DataType.Name(types[inputs[3]])
                out.append(f"RotaryEmbedding position_ids {inputs[3]} is {kind}; TensorRT needs INT64 ({DOC})")
            if ranks.get(inputs[0]) not in (None, 4):
                out.append(
                    f"RotaryEmbedding input {inputs[0]} has rank {ranks[inputs[0]]}; IRotaryEmbeddingLayer takes "
                    "[B, N, S, H] (TensorRT RoPE guide)"
                )
        if op == "Attention":
            for i, name in enumerate(("past_key", "past_value", "nonpad_kv_seqlen"), start=4):
                if len(inputs) > i and inputs[i]:
                    out.append(f"Attention input {name} (KV cache) is unsupported by TensorRT ({DOC})")
            for i, name in enumerate(("present_key", "present_value", "qk_matmul_output"), start=1):
                if len(node.output) > i and node.output[i]:
                    out.append(f"Attention output {name} is unsupported by TensorRT ({DOC})")
            for attr in node.attribute:
                if attr.name in ("qk_matmul_output_mode", "softcap") and (attr.i or attr.f):
                    out.append(f"Attention attribute {attr.name} is unsupported by TensorRT ({DOC})")
            for i, name in enumerate(("Q", "K", "V", "attn_mask")):
                if len(inputs) > i and inputs[i] and ranks.get(inputs[i]) not in (None, 4):
                    out.append(f"Attention {name} has rank {ranks[inputs[i]]}; TensorRT needs 4-D ({DOC})")
        if op == "If":
            branches = {a.name: a.g for a in node.attribute if a.type == AttributeProto.GRAPH}
            then, other = branches.get("then_branch"), branches.get("else_branch")
            if then is not None and other is not None:
                for a, b in zip(then.output, other.output, strict=False):
                    if a.name == b.name:
                        out.append(f"If branches both name an output {a.name}; TensorRT needs different names")
                    ra, rb = _type_of(a)[1], _type_of(b)[1]
                    if ra is not None and rb is not None and ra != rb:
                        out.append(f"If branch outputs {a.name} / {b.name} differ in rank; TensorRT needs the same")
        row = op_support(op)
        axes = row.constant_axes if row is not None else None
        if axes is not None and len(inputs) > axes and inputs[axes] and inputs[axes] not in constants:
            out.append(f"{op} axes {inputs[axes]} must be an initializer or Constant for TensorRT ({DOC})")
        return out

    def _plugin_problems(self, node: onnx.NodeProto) -> list[str]:
        """A ropeexport-domain node runs as the ropeexport quickly deployable plugin."""
        plugin = f"{support.PLUGIN_DOMAIN}::{node.op_type}"
        if version_key(self.version) < version_key(support.PLUGIN_QDP_SINCE):
            return [
                f"{plugin} is a quickly deployable (tensorrt.plugin) plugin; the parser maps nodes to those from "
                f"TensorRT {support.PLUGIN_QDP_SINCE} (onnx-tensorrt Changelog 10.6); this is TensorRT "
                f"{self.version}: export with --graph decomposed"
            ]
        namespace = next((a.s.decode() for a in node.attribute if a.name == "plugin_namespace"), None)
        if version_key(self.version) < version_key(support.PLUGIN_DOMAIN_NAMESPACE_SINCE) and namespace != (
            support.PLUGIN_DOMAIN
        ):
            return [
                f"{plugin}: before TensorRT {support.PLUGIN_DOMAIN_NAMESPACE_SINCE} the parser reads a plugin's "
                "namespace only from a plugin_namespace attribute, which this node lacks (TensorRT quickly deployable "
                "plugins README; onnx-tensorrt Changelog 10.10)"
            ]
        self.notes.append(
            f"{plugin} runs as the ropeexport plugin: load it (import the module that registers it with "
            "tensorrt.plugin) before parsing, or the parser fails on this node"
        )
        native = op_support(node.op_type)
        if native is not None and version_key(self.version) >= version_key(native.since):
            self.notes.append(
                f"{plugin} shares its op_type with TensorRT {self.version}'s native {node.op_type} importer: set "
                "the parser flag kENABLE_PLUGIN_OVERRIDE (onnx-tensorrt Changelog 10.15) so the plugin is used, or "
                "export the fused graph for this version"
            )
        return []
