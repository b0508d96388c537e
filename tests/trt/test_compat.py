"""The TensorRT compatibility checker on real artifacts and hand-made graphs: verdicts and their reasons."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ropeexport.catalog import recipes, spec_from_dict
from ropeexport.cli import _Parser, error_line
from ropeexport.cli import check_trt as check_trt_cli
from ropeexport.errors import RopeExportError, SpecError
from ropeexport.graph.onnx_io import save_model
from ropeexport.trt import HEADLINE_VERSIONS, check_trt, resolve_version, trt_compat

ROPE = {"head_dim": 16, "num_heads": 4, "num_kv_heads": 2, "max_positions": 64}
DYNAMIC = {"scaling": "dynamic", "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 32}}
LONGROPE = {
    "scaling": "longrope",
    "scaling_params": {"original_max_position_embeddings": 32, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
}
ALIBI = {"encoding": "alibi", "artifact": "attention", "num_heads": 4, "head_dim": 16, "max_positions": 64}

NEEDS_1015 = "RotaryEmbedding is parsed by TensorRT 10.15 and newer"
NEEDS_1014 = "Attention is parsed by TensorRT 10.14 and newer"
OPSET_UNKNOWN = "the highest opset TensorRT 10.13 parses is not stated by the sources read"
OPSET_ABOVE_86 = "TensorRT 8.6 documents operators up to opset 17"
FLOAT64 = "TensorRT has no float64 or complex tensors"
REDUCEMAX_86 = (
    "ReduceMax on INT64 (8.6 casts INT64 down to INT32) tensor position_ids__checked: TensorRT 8.6 documents "
    "ReduceMax for FP32, FP16"
)


def export(**fields: Any) -> onnx.ModelProto:
    spec = spec_from_dict(fields)
    return recipes()[(spec.encoding, spec.artifact)].export(spec)


def by_node(result: Any) -> dict[str, dict[str, str]]:
    return {r["node"]: r for r in result.reasons}


# (case, spec fields, TensorRT version, compatible, {offending node: (op_type, fragment of its reason)})
CASES: list[tuple[str, dict[str, Any], str, bool, dict[str, tuple[str, str]]]] = [
    (
        "fused rope needs 10.15",
        {**ROPE, "graph": "fused"},
        "10.13",
        False,
        {
            "query_out_node": ("RotaryEmbedding", NEEDS_1015 + " (onnx-tensorrt Changelog 10.15"),
            "key_out_node": ("RotaryEmbedding", "export with --graph decomposed, or use the ropeexport::RotaryEmb"),
            "(model)": ("opset_import", OPSET_UNKNOWN),
        },
    ),
    (
        "fused rope at 10.14",
        {**ROPE, "graph": "fused"},
        "10.14",
        False,
        {
            "query_out_node": ("RotaryEmbedding", NEEDS_1015 + " (onnx-tensorrt Changelog 10.15"),
            "key_out_node": ("RotaryEmbedding", "this is TensorRT 10.14"),
        },
    ),
    ("fused rope at 10.15", {**ROPE, "graph": "fused"}, "10.15", True, {}),
    ("fused rope at 11", {**ROPE, "graph": "fused"}, "11", True, {}),
    ("fused bf16 rope at 10.15", {**ROPE, "graph": "fused", "dtype": "bf16"}, "10.15", True, {}),
    ("decomposed rope at 8.6", {**ROPE, "graph": "decomposed"}, "8.6", True, {}),
    ("decomposed rope at 10.13", {**ROPE, "graph": "decomposed"}, "10.13", True, {}),
    ("decomposed interleaved fp16 at 8.6", {**ROPE, "graph": "decomposed", "layout": "interleaved"}, "8.6", True, {}),
    (
        "decomposed longrope at 8.6: the call length is a ReduceMax over int64 positions",
        {**ROPE, **LONGROPE, "graph": "decomposed"},
        "8.6",
        False,
        {"reducemax_1_node": ("ReduceMax", REDUCEMAX_86 + " (onnx-tensorrt operators.md (8.5)")},
    ),
    ("decomposed longrope at 10.13", {**ROPE, **LONGROPE, "graph": "decomposed"}, "10.13", True, {}),
    (
        "bf16 at 8.6",
        {**ROPE, "graph": "decomposed", "dtype": "bf16"},
        "8.6",
        False,
        {
            "query": ("(graph input)", "BFLOAT16 tensor query: TensorRT 8.6 has no BFLOAT16 tensors (BF16 arrived in"),
            "query_out": ("(graph output)", "TensorRT 8.6 has no BFLOAT16 tensors"),
        },
    ),
    (
        "alibi fused attention needs 10.14",
        ALIBI | {"graph": "fused"},
        "10.13",
        False,
        {
            "output_node": ("Attention", NEEDS_1014 + " (onnx-tensorrt Changelog 10.14"),
            "(model)": ("opset_import", OPSET_UNKNOWN),
        },
    ),
    ("alibi fused attention at 10.14", ALIBI | {"graph": "fused"}, "10.14", True, {}),
    ("alibi fused attention at 10.15", ALIBI | {"graph": "fused"}, "10.15", True, {}),
    (
        "alibi fused attention at 8.6",
        ALIBI | {"graph": "fused"},
        "8.6",
        False,
        {"output_node": ("Attention", "this is TensorRT 8.6"), "(model)": ("opset_import", OPSET_ABOVE_86)},
    ),
    ("alibi decomposed attention at 8.6", ALIBI | {"graph": "decomposed"}, "8.6", True, {}),
    (
        "shaw fused attention reads the softmax weights back: qk_matmul_output",
        ALIBI | {"encoding": "shaw", "clip": 4, "graph": "fused"},
        "10.15",
        False,
        {
            "attention_19_node": (
                "Attention",
                "Attention output qk_matmul_output is unsupported by TensorRT (onnx-tensorrt operators.md 10.15); "
                "Attention attribute qk_matmul_output_mode is unsupported by TensorRT",
            )
        },
    ),
    (
        "shaw decomposed attention at 8.6",
        ALIBI | {"encoding": "shaw", "clip": 4, "graph": "decomposed"},
        "8.6",
        True,
        {},
    ),
]


@pytest.mark.parametrize(("case", "fields", "version", "compatible", "expected"), CASES, ids=[c[0] for c in CASES])
def test_verdicts_name_their_reasons(
    case: str, fields: dict[str, Any], version: str, compatible: bool, expected: dict[str, tuple[str, str]]
) -> None:
    result = check_trt(export(**fields), version)
    assert result.compatible is compatible and bool(result) is compatible
    assert result.version == version
    reasons = by_node(result)
    if compatible:
        assert result.reasons == []
    else:
        assert set(expected) <= set(reasons), reasons
        for node, (op_type, fragment) in expected.items():
            assert reasons[node]["op_type"] == op_type
            assert fragment in reasons[node]["reason"], reasons[node]["reason"]
    if not compatible and "(model)" not in expected:
        assert "(model)" not in reasons  # the opset was fine: only the named nodes offend
    if case == "decomposed longrope at 8.6":
        assert set(reasons) == {"reducemax_1_node"}


@pytest.mark.parametrize("graph", ["fused", "decomposed"])
@pytest.mark.parametrize("version", ["8.6", "10.13", "10.15", "11"])
def test_dynamic_ntk_float64_branch_is_flagged_at_every_version(graph: str, version: str) -> None:
    result = check_trt(export(**ROPE, **DYNAMIC, graph=graph), version)
    assert not result.compatible
    reasons = by_node(result)
    branch = "position_ids_schedule_node/then_branch/"
    inside = {n: r for n, r in reasons.items() if n.startswith(branch)}  # the branch's nodes (numbered as built)
    of = lambda op: [r for r in inside.values() if r["op_type"] == op]  # noqa: E731
    casts = [r for r in of("Cast") if r["reason"].startswith("Cast to DOUBLE: " + FLOAT64)]
    assert casts and all("would silently run in float32" in r["reason"] for r in casts)
    [cos], [sin] = of("Cos"), of("Sin")
    assert cos["reason"].startswith("Cos on DOUBLE: " + FLOAT64) and sin["reason"].startswith("Sin on DOUBLE")
    # Every float64 node of the branch is named, and nothing outside it is blamed for float64.
    float64 = {n for n, r in reasons.items() if FLOAT64 in r["reason"]}
    assert float64 and all(n.startswith(branch) for n in float64)
    assert len(float64) == 15  # Cast, Mul, Sub, Log, Mul, Add, Mul, Exp, Cast, Unsqueeze, Mul, Cos, Cast, Sin, Cast


def test_dynamic_ntk_fused_has_no_position_ids_and_passes_the_rope_restrictions() -> None:
    """Continuous schedules feed per-token cos/sin [b, s, r/2] to RotaryEmbedding: legal without position_ids."""
    reasons = by_node(check_trt(export(**ROPE, **DYNAMIC, graph="fused"), "10.15"))
    assert "query_out_node" not in reasons and "key_out_node" not in reasons


def _model(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any], opsets: dict[str, int]) -> Any:
    graph = helper.make_graph(nodes, "hand", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


def _rope_io(pos_type: int = TensorProto.INT64, rank: int = 4) -> tuple[list[Any], list[Any]]:
    x = ["b", 4, "s", 16][-rank:] if rank == 4 else ["b", "s", 64]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x),
        helper.make_tensor_value_info("cos", TensorProto.FLOAT, [64, 8]),
        helper.make_tensor_value_info("sin", TensorProto.FLOAT, [64, 8]),
        helper.make_tensor_value_info("pos", pos_type, ["b", "s"]),
    ]
    return inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, x)]


def test_com_microsoft_ops_are_rejected_at_every_version() -> None:
    inputs, outputs = _rope_io()
    node = helper.make_node(
        "RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="ms_rope", domain="com.microsoft"
    )
    model = _model([node], inputs, outputs, {"": 17, "com.microsoft": 1})
    for version in ("8.6", "10.15", "11"):
        result = check_trt(model, version)
        assert not result.compatible
        (reason,) = result.reasons
        assert reason["node"] == "ms_rope" and reason["op_type"] == "com.microsoft::RotaryEmbedding"
        assert "ropeexport never sends them to TensorRT" in reason["reason"]
        assert "the TensorRT parser has no importer for it" in reason["reason"]


@pytest.mark.parametrize(
    ("version", "namespace", "compatible", "fragment"),
    [
        ("10.15", None, True, ""),
        ("10.10", None, True, ""),
        ("10.8", None, False, "reads a plugin's namespace only from a plugin_namespace attribute"),
        ("10.8", "ropeexport", True, ""),
        ("10.0", "ropeexport", False, "the parser maps nodes to those from TensorRT 10.6"),
        ("8.6", None, False, "this is TensorRT 8.6: export with --graph decomposed"),
    ],
)
def test_ropeexport_plugin_nodes_need_the_plugin(version: str, namespace: str | None, compatible: bool, fragment: str):
    inputs, outputs = _rope_io()
    attrs = {"plugin_namespace": namespace} if namespace else {}
    node = helper.make_node(
        "RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="p", domain="ropeexport", **attrs
    )
    result = check_trt(_model([node], inputs, outputs, {"": 17, "ropeexport": 1}), version)
    assert result.compatible is compatible
    if compatible:
        assert any("runs as the ropeexport plugin: load it" in n for n in result.notes)
        override = any("set the parser flag kENABLE_PLUGIN_OVERRIDE" in n for n in result.notes)
        assert override is (version == "10.15")  # the native RotaryEmbedding importer shares the op_type
    else:
        assert result.reasons[0]["op_type"] == "ropeexport::RotaryEmbedding"
        assert fragment in result.reasons[0]["reason"]


def test_rotary_embedding_needs_int64_position_ids_and_4d_input() -> None:
    inputs, outputs = _rope_io(pos_type=TensorProto.INT32)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="r")
    (reason,) = check_trt(_model([node], inputs, outputs, {"": 23}), "10.15").reasons
    assert "RotaryEmbedding position_ids pos is INT32; TensorRT needs INT64" in reason["reason"]
    inputs, outputs = _rope_io(rank=3)
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="r", num_heads=4)
    (reason,) = check_trt(_model([node], inputs, outputs, {"": 23}), "10.15").reasons
    assert "RotaryEmbedding input x has rank 3; IRotaryEmbeddingLayer takes [B, N, S, H]" in reason["reason"]


def test_attention_with_a_kv_cache_is_rejected() -> None:
    f32 = TensorProto.FLOAT
    qkv = [helper.make_tensor_value_info(n, f32, ["b", 4, "s", 16]) for n in ("q", "k", "v", "pk", "pv")]
    outs = [helper.make_tensor_value_info(n, f32, None) for n in ("o", "present_k", "present_v")]
    node = helper.make_node(
        "Attention", ["q", "k", "v", "", "pk", "pv"], ["o", "present_k", "present_v"], name="attn", is_causal=1
    )
    (reason,) = check_trt(_model([node], qkv, outs, {"": 23}), "10.15").reasons
    assert "Attention input past_key (KV cache) is unsupported by TensorRT" in reason["reason"]
    assert "Attention output present_value is unsupported by TensorRT" in reason["reason"]
    three_d = [helper.make_tensor_value_info(n, f32, ["b", "s", 64]) for n in ("q", "k", "v")]
    node = helper.make_node("Attention", ["q", "k", "v"], ["o"], name="attn", q_num_heads=4, kv_num_heads=4)
    (reason,) = check_trt(_model([node], three_d, outs[:1], {"": 23}), "10.15").reasons
    assert "Attention Q has rank 3; TensorRT needs 4-D" in reason["reason"]


def test_an_operator_outside_the_table_is_unknown_and_rejected() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("Einsum", ["x"], ["y"], name="e", equation="ij->ij")
    (reason,) = check_trt(_model([node], [x], [y], {"": 17}), "10.15").reasons
    assert reason["reason"].startswith("Einsum is not in ropeexport's TensorRT support table")
    assert "unknown, treated as incompatible" in reason["reason"]


def test_a_double_graph_input_is_flagged() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.FLOAT)
    reasons = by_node(check_trt(_model([node], [x], [y], {"": 17}), "11"))
    assert reasons["x"]["op_type"] == "(graph input)" and "DOUBLE tensor x" in reasons["x"]["reason"]
    assert reasons["c"]["reason"].startswith("Cast on DOUBLE: " + FLOAT64)


@pytest.mark.parametrize(
    ("text", "version"), [("10.15", "10.15"), ("10.14.1", "10.14"), ("11", "11"), ("11.0", "11"), (" 8.6 ", "8.6")]
)
def test_version_strings_resolve(text: str, version: str) -> None:
    assert resolve_version(text) == version


@pytest.mark.parametrize("text", ["10.16", "9.0", "11.2", "abc", "", "10.x", "v10.15"])
def test_unknown_version_is_a_spec_error_listing_the_known_ones(text: str) -> None:
    with pytest.raises(SpecError) as info:
        check_trt(export(**ROPE), text)
    assert info.value.field == "trt_version"
    assert "known versions: 8.6, 10.0, 10.1" in str(info.value) and "10.15, 11" in str(info.value)


@pytest.mark.slow  # every kind exported (52 models) and checked node by node
def test_every_kind_uses_only_operators_the_table_records() -> None:
    """Coverage of the table: no artifact kind meets 'not in ropeexport's TensorRT support table'. That reason is the
    table's row for the operator (``op_support``), the same at every version; the headline versions take each way a
    version's types are read (8.6's own, 10.13 derived from 10.15, 10.15, 11 by policy). All 18 versions were most of
    this test's 42 s in the last whole-suite run, checking the same rows again.
    """  # noqa: D205
    for (encoding, artifact), _ in sorted(recipes().items()):
        for graph in ("fused", "decomposed"):
            model = export(encoding=encoding, artifact=artifact, graph=graph, max_positions=64)
            for version in HEADLINE_VERSIONS:
                for r in check_trt(model, version).reasons:
                    assert "not in ropeexport's TensorRT support table" not in r["reason"], (encoding, artifact, r)


def test_result_to_dict_is_json() -> None:
    result = check_trt(export(**ROPE, graph="fused"), "10.13")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["version"] == "10.13" and data["compatible"] is False
    assert {tuple(sorted(r)) for r in data["reasons"]} == {("node", "op_type", "reason")}
    assert any("derived from the 10.15 operators.md" in n for n in data["notes"])


def test_trt_compat_for_the_manifest(tmp_path: Path) -> None:
    save_model(export(**ROPE, graph="fused"), tmp_path)
    data = json.loads(json.dumps(trt_compat(tmp_path / "model.onnx")))
    assert list(data) == list(HEADLINE_VERSIONS) == ["8.6", "10.13", "10.15", "11"]
    assert [data[v]["compatible"] for v in HEADLINE_VERSIONS] == [False, False, True, True]
    assert NEEDS_1015 in data["10.13"]["reasons"][0]["reason"]


# The subcommand ------------------------------------------------------------------------------------------------


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Parse and run like ``ropeexport.cli.main`` (check-trt is registered there by the cli package)."""
    parser = _Parser(prog="ropeexport")
    check_trt_cli.add_parser(parser.add_subparsers(dest="command", required=True, parser_class=_Parser))
    try:
        args: argparse.Namespace = parser.parse_args(argv)
        code = int(args.run(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    except RopeExportError as exc:
        print(f"ropeexport: error: {error_line(exc)}", file=sys.stderr)
        code = 2
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def fused_rope(tmp_path: Path) -> Path:
    save_model(export(**ROPE, graph="fused"), tmp_path)
    return tmp_path / "model.onnx"


def test_cli_prints_one_reason_per_offending_node(fused_rope: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["check-trt", str(fused_rope), "--trt-version", "10.14"], capsys)
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == f"NOT compatible with TensorRT 10.14: {fused_rope} (2 offending node(s))"
    assert lines[1].startswith("  query_out_node [RotaryEmbedding]: " + NEEDS_1015)
    assert lines[2].startswith("  key_out_node [RotaryEmbedding]: " + NEEDS_1015)
    assert all(line.startswith("note: ") for line in lines[3:])


def test_cli_compatible_and_json(fused_rope: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["check-trt", str(fused_rope), "--trt-version", "10.15"], capsys)
    assert code == 0 and out.splitlines()[0] == f"compatible with TensorRT 10.15: {fused_rope}"
    code, out, _ = cli(["check-trt", str(fused_rope), "--trt-version", "10.13", "--json"], capsys)
    data = json.loads(out)
    assert code == 1 and data["model"] == str(fused_rope) and data["compatible"] is False
    assert [r["op_type"] for r in data["reasons"]] == ["RotaryEmbedding", "RotaryEmbedding", "opset_import"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--trt-version", "10.16"], "ropeexport: error: --trt-version: TensorRT 10.16 is not in the support table"),
        (["--trt-version", "ten"], "ropeexport: error: --trt-version: 'ten' is not a version string like 10.15"),
        ([], "the following arguments are required: --trt-version"),
    ],
)
def test_cli_bad_version_exits_2(
    fused_rope: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(["check-trt", str(fused_rope), *argv], capsys)
    assert code == 2 and out == "" and message in err and len(err.splitlines()) == 1


def test_cli_missing_or_unreadable_model_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["check-trt", str(tmp_path / "nope.onnx"), "--trt-version", "10.15"], capsys)
    assert code == 2 and "MODEL: " in err and "No such file or directory" in err
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.arange(64, dtype=np.uint8).tobytes())
    code, _, err = cli(["check-trt", str(garbage), "--trt-version", "10.15"], capsys)
    assert code == 2 and "is not a readable ONNX model" in err


def test_external_data_is_not_needed(tmp_path: Path) -> None:
    """Only structure and types are read: a model whose tables live in model.onnx.data checks the same."""
    model = export(**ROPE, graph="decomposed")
    onnx.save_model(model, tmp_path / "model.onnx", save_as_external_data=True, location="model.onnx.data")
    (tmp_path / "model.onnx.data").unlink()
    assert check_trt(tmp_path / "model.onnx", "8.6").compatible


def test_initializer_constants_satisfy_constant_axes() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])
    node = helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="u")
    (reason,) = check_trt(_model([node], [x, axes], [y], {"": 17}), "10.15").reasons
    assert "Unsqueeze axes axes must be an initializer or Constant for TensorRT" in reason["reason"]
    graph = helper.make_graph([node], "g", [x], [y], [numpy_helper.from_array(np.array([0], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert check_trt(model, "10.15").compatible
