"""Each component's graph against its float64 twin, and the typed specs' refusals (``ropeexport.components``).

One case table per component: the graph, run in ONNX Runtime on dtype inputs, agrees with the twin on the same
(stored) values within the dtype's tolerance; a planted change of the spec (another eps, activation, window) is
seen, so the comparison can fail.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from ropeexport.components.attention import AttentionSpec
from ropeexport.components.attention.float64 import attention64
from ropeexport.components.attention.graph import attention_model
from ropeexport.components.linear import WeightFormat, is_weight, linear, linear64
from ropeexport.components.mlp import MLPSpec, activation64, joined, mlp, mlp64
from ropeexport.components.norm import NormSpec, add_norm, norm64
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once

pytestmark = pytest.mark.fast  # components against their float64 twins

TOL = {"fp32": 2e-6, "fp16": 2e-3}  # relative to the output's scale
RNG = np.random.default_rng(0)


def _run(g: GraphBuilder, out: str, feeds: dict[str, np.ndarray], dtype: str, opset: int = 23,
         domains: Any = None) -> np.ndarray:  # fmt: skip
    """``out`` of the graph ``g`` built, run in ONNX Runtime on ``feeds`` (every input in ``dtype``), in float64."""
    g.name_output(out, "y")
    io, elem = helper.make_tensor_value_info, DTYPES[dtype].onnx
    inputs = [io(n, elem, list(v.shape)) for n, v in feeds.items()]
    graph = helper.make_graph(g.nodes, "t", inputs, [io("y", elem, None)], g.initializers)
    model = make_model(graph, opset, {}, domains)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].astype(np.float64)


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    return float(np.abs(got - want).max()) <= TOL[dtype] * float(np.abs(want).max())


def _stored(values: np.ndarray, dtype: str) -> np.ndarray:
    return round_once(values, dtype).astype(np.float64)


# (norm kind, dtype, opset, fused residual add, offset: 1 is Gemma's normed * (1 + w))
NORMS = [("rms", "fp32", 23, False, 0.0), ("rms", "fp16", 17, False, 0.0), ("layer", "fp32", 23, False, 0.0),
         ("layer", "fp16", 23, False, 0.0), ("rms", "fp32", 23, True, 0.0), ("rms", "fp32", 23, False, 1.0),
         ("rms", "fp16", 17, False, 1.0), ("rms", "fp16", 23, False, 1.0), ("rms", "fp32", 23, True, 1.0)]  # fmt: skip


@pytest.mark.parametrize(("kind", "dtype", "opset", "fused", "offset"), NORMS)
def test_norm_graph_matches_its_twin(kind: str, dtype: str, opset: int, fused: bool, offset: float) -> None:
    spec = NormSpec(kind, 1e-5, dtype, offset=offset)
    x, delta = (_stored(RNG.standard_normal((2, 3, 16)), dtype) for _ in range(2))
    weight = _stored(1 - offset + 0.1 * RNG.standard_normal(16), dtype)  # Gemma's weight is near 0: its gain 1 + w
    bias = _stored(0.1 * RNG.standard_normal(16), dtype)
    g = GraphBuilder()
    w, b = g.const("w", round_once(weight, dtype)), g.const("b", round_once(bias, dtype)) if kind == "layer" else None
    _, out = add_norm(g, spec, "x", "delta", w, b, opset, fused=fused)
    feeds = {"x": round_once(x, dtype), "delta": round_once(delta, dtype)}
    got = _run(g, out, feeds, dtype, opset, {"com.microsoft": 1} if fused else None)
    want = norm64(spec, x + delta, weight, bias if kind == "layer" else None)
    assert _close(got, want, dtype)
    assert not _close(got, norm64(NormSpec(kind, 1e-1, dtype, offset=offset), x + delta, weight, bias), dtype)
    if kind == "rms":  # the offset is seen
        assert not _close(got, norm64(NormSpec(kind, 1e-5, dtype, offset=1.0 - offset), x + delta, weight), dtype)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_gemma_norm_graph_is_transformers_gemma3_norm(dtype: str) -> None:
    # Gemma3RMSNorm run by torch in the dtype: normed and 1 + w in float32, one cast at the end. In fp16 the graph
    # gives the same bits (measured: all 3072), and Llama's order (cast, then times 1 + w in fp16) does not; in fp32
    # they differ by rsqrt against sqrt and a division (4 ulp seen), within the fp32 tolerance.
    torch = pytest.importorskip("torch")
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    rng = np.random.default_rng(1)
    x, weight = round_once(rng.standard_normal((64, 3, 16)), dtype), round_once(0.5 * rng.standard_normal(16), dtype)
    module = Gemma3RMSNorm(16, eps=1e-6).to(DTYPES[dtype].torch)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weight))
        want = module(torch.from_numpy(x)).float().numpy().astype(np.float64)
    g = GraphBuilder()
    out = add_norm(g, NormSpec("rms", 1e-6, dtype, offset=1.0), "x", None, g.const("w", weight), None, 23)[1]
    got = _run(g, out, {"x": x}, dtype)
    if dtype == "fp32":
        assert _close(got, want, dtype)
        return
    np.testing.assert_array_equal(got, want)
    wide = x.astype(np.float32)
    normed = wide / np.sqrt((wide**2).mean(axis=-1, keepdims=True) + np.float32(1e-6))
    llama = normed.astype(np.float16) * round_once(1.0 + weight.astype(np.float64), dtype)
    assert np.any(llama.astype(np.float64) != want)


# (kind, activation, dtype, biases)
MLPS = [("gated", "silu", "fp32", False), ("gated", "gelu_tanh", "fp16", True), ("plain", "gelu", "fp32", True),
        ("plain", "relu", "fp32", False), ("plain", "gelu_tanh", "fp32", False)]  # fmt: skip


@pytest.mark.parametrize(("kind", "act", "dtype", "biased"), MLPS)
def test_mlp_graph_matches_its_twin(kind: str, act: str, dtype: str, biased: bool) -> None:
    spec = MLPSpec(kind, act, 24, dtype)
    shapes = {"up_proj": (16, 24), "down_proj": (24, 16)} | ({"gate_proj": (16, 24)} if kind == "gated" else {})
    if biased:
        shapes |= {"up_bias": (24,), "down_bias": (16,)} | ({"gate_bias": (24,)} if kind == "gated" else {})
    weights = {n: _stored(RNG.standard_normal(s) / 4, dtype) for n, s in shapes.items()}
    x = _stored(RNG.standard_normal((2, 3, 16)), dtype)
    g = GraphBuilder()
    arrays = joined(weights) if kind == "gated" else weights
    stored = {n: g.const(n, round_once(v, dtype)) for n, v in arrays.items()}
    got = _run(g, mlp(g, spec, "x", stored), {"x": round_once(x, dtype)}, dtype)
    assert _close(got, mlp64(spec, x, weights), dtype)
    other = "silu" if act != "silu" else "gelu"
    assert not _close(got, mlp64(MLPSpec(kind, other, 24, dtype), x, weights), dtype)  # the activation is seen


# (activation, input, its limit): far out on the saturated side, where a formula's exp overflows (a checkpoint with
# large weights, x1000, reaches it) and numpy printed "overflow encountered in exp" mid-build
SATURATED = [("silu", -1000.0, -0.0), ("silu", 1000.0, 1000.0)]


@pytest.mark.parametrize(("act", "x", "limit"), SATURATED)
def test_an_activation_twin_saturates_without_a_warning(act: str, x: float, limit: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = activation64(act, np.array([x]))
    assert got[0] == limit


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_linear_twin_reads_the_stored_values(dtype: str) -> None:
    weight, x = RNG.standard_normal((16, 8)), RNG.standard_normal((2, 3, 16))
    fmt, g = WeightFormat(dtype), GraphBuilder()
    name = fmt.store(g, "w_proj", weight)
    held = numpy_helper.to_array(g.initializers[0]).astype(np.float64)
    assert np.array_equal(held, fmt.read64(weight)) and name == "w_proj"
    if dtype != "bf16":  # ONNX Runtime's CPU MatMul takes no bf16
        got = _run(g, linear(g, "x", name), {"x": round_once(x, dtype)}, dtype)
        assert _close(got, linear64(_stored(x, dtype), fmt.read64(weight)), dtype)
    assert is_weight("layers.3.q_proj") and is_weight("lm_head") and not is_weight("layers.3.q_bias")


# (graph form, window)
ATTENTION = [("fused", 0), ("decomposed", 3), ("tensorrt", 0), ("gqa", 3), ("gqa", 0)]


@pytest.mark.parametrize(("graph", "window"), ATTENTION)
def test_attention_without_positions_matches_its_twin(graph: str, window: int) -> None:
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8, graph=graph, window=window)
    sizes = {"q_proj": (32, 32), "k_proj": (32, 16), "v_proj": (32, 16), "o_proj": (32, 32)}
    weights = {n: _stored(RNG.standard_normal(s) / np.sqrt(s[0]), "fp32") for n, s in sizes.items()}
    model = attention_model(spec, weights)
    assert not any("rope" in n.name or "guard" in n.name for n in model.graph.node)  # no piece, nothing to guard
    b, past, s = 2, 5, 1 if graph == "gqa" else 3  # GroupQueryAttention takes a batched prompt only without a cache
    feeds = {"hidden": RNG.standard_normal((b, s, 32)).astype(np.float32),
             "position_ids": np.tile(np.arange(past, past + s), (b, 1)).astype(np.int64),
             "attention_mask": np.ones((b, past + s), np.int64),
             "past_key": RNG.standard_normal((b, 2, past, 8)).astype(np.float32),
             "past_value": RNG.standard_normal((b, 2, past, 8)).astype(np.float32)}  # fmt: skip
    feeds["attention_mask"][1, :2] = 0  # a left-padded row
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(["output"], feeds)[0].astype(np.float64)
    assert _close(got, attention64(spec, feeds, weights)["output"], "fp32")
    other = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8, graph=graph, window=0 if window else 2)
    assert not _close(got, attention64(other, feeds, weights)["output"], "fp32")  # the window is seen


# (window, sinks, what hides keys besides GroupQueryAttention's causal rule): only padding, or the full mask
GQA_PATHS = [(0, False, "padding"), (3, False, "mask"), (0, True, "mask")]


@pytest.mark.parametrize(("window", "sinks", "path"), GQA_PATHS)
def test_gqa_builds_the_full_mask_only_when_something_but_padding_hides_keys(window: int, sinks: bool,
                                                                              path: str) -> None:  # fmt: skip
    spec = AttentionSpec(num_heads=4, num_kv_heads=2, head_dim=8, graph="gqa", window=window, sinks=sinks)
    sizes = {"q_proj": (32, 32), "k_proj": (32, 16), "v_proj": (32, 16), "o_proj": (32, 32)}
    weights = {n: _stored(RNG.standard_normal(s) / np.sqrt(s[0]), "fp32") for n, s in sizes.items()}
    weights |= {"sinks": _stored(RNG.standard_normal(4), "fp32")} if sinks else {}
    nodes = attention_model(spec, weights).graph.node
    gqa = next(n for n in nodes if n.op_type == "GroupQueryAttention")
    readers = [n.op_type for n in nodes if gqa.output[0] in n.input]
    smooth = {a.name: a.i for a in gqa.attribute}.get("smooth_softmax", 0)
    if path == "padding":  # no [s, t] causal mask, no per-layer factor: the empty rows are zeroed by head_sink
        assert not any(n.op_type in ("LessOrEqual", "ReduceMax") for n in nodes)
        assert readers == ["MatMul"] and smooth == 1
    else:
        assert any(n.op_type == "LessOrEqual" for n in nodes) and readers == ["Mul"]
        assert smooth == int(sinks)


# (fields, the field the SpecError names)
REFUSED = [
    ({"qk_norm": NormSpec("layer", 1e-6)}, "qk_norm"),
    ({"qk_norm": NormSpec("rms", 1e-6, "fp16")}, "qk_norm"),
    ({"qk_norm": "rms"}, "qk_norm"),
    ({"logit_softcap": -50.0}, "logit_softcap"),
    ({"logit_softcap": float("nan")}, "logit_softcap"),
    ({"logit_softcap": True}, "logit_softcap"),
    ({"scale": -0.125}, "scale"),
    ({"scale": float("inf")}, "scale"),
    ({"sinks": 1}, "sinks"),
    ({"sinks": True, "graph": "static-cache"}, "sinks"),
    ({"logit_softcap": 30.0, "graph": "tensorrt"}, "logit_softcap"),
    ({"num_kv_heads": 3}, "num_kv_heads"),
    ({"graph": "plugin"}, "graph"),
    ({"window": -1}, "window"),
    ({"position": "rope"}, "position"),
]


@pytest.mark.parametrize(("fields", "field"), REFUSED, ids=[r[1] for r in REFUSED])
def test_attention_spec_refuses_what_is_not_allowed(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        AttentionSpec(**({"num_heads": 4, "num_kv_heads": 2, "head_dim": 8} | fields))
    assert error.value.field == field


@pytest.mark.parametrize(("fields", "field"), [({"offset": 0.5}, "norm_offset"), ({"offset": True}, "norm_offset"),
                                               ({"kind": "layer", "offset": 1.0}, "norm_offset")])  # fmt: skip
def test_norm_spec_refuses_an_offset_it_does_not_build(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        NormSpec(**({"kind": "rms", "eps": 1e-6} | fields))
    assert error.value.field == field and "\n" not in str(error.value)
