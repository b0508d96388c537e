"""Foreign-style models with planted RoPE faults: what audit must find and name (and say nothing about when exact).

Each model is the part of a decoder that reads the rotary tables, as other tools write it: onnxruntime-genai's
GroupQueryAttention with do_rotary and cos/sin caches (LongRoPE: an If on the attention mask's length picking one of
two), opset-23 RotaryEmbedding with caches and position_ids, or cos/sin computed in the graph from position_ids
(the dynamo form: inv_freq x positions, Cos/Sin, times the attention factor, multiplied into the query); ALiBi as
BLOOM's exporters write it (slopes x the key positions counted from the attention mask, added to the scores beside
an additive mask). Only the cos/sin (or bias) part is ever evaluated; the attention nodes are there to be found.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ropeexport.families.rope.regimes import frequencies
from ropeexport.families.rope.spec import RopeSpec

P, ORIGINAL, HEADS, KV, D = 4096, 1024, 4, 2, 16
BASE = {"model_type": "llama", "vocab_size": 64, "hidden_size": HEADS * D, "num_attention_heads": HEADS,
        "num_key_value_heads": KV, "num_hidden_layers": 1, "intermediate_size": 64, "rope_theta": 10000.0,
        "max_position_embeddings": P}  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {
    "default": BASE,
    "linear": BASE | {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
    "llama3": BASE | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": ORIGINAL}},
    "yarn": BASE | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIGINAL}},
    "dynamic": BASE | {"rope_scaling": {"rope_type": "dynamic", "factor": 4.0,
                                         "original_max_position_embeddings": ORIGINAL}},
    "longrope": BASE | {"model_type": "phi3", "original_max_position_embeddings": ORIGINAL,
                        "rope_scaling": {"type": "longrope", "short_factor": [1.0 + i / 16 for i in range(D // 2)],
                                         "long_factor": [2.0 + i / 4 for i in range(D // 2)]}},
    # Phi-4-mini's shape: head_dim 32 with partial rotary 0.75, so the caches are 12 wide (ORT's GQA wants 8k wide)
    "phi4": BASE | {"hidden_size": HEADS * 32, "head_dim": 32, "partial_rotary_factor": 0.75},
    "long": BASE | {"max_position_embeddings": 4 * P},  # long enough to clamp at 8192
    # Llama 3.1's schedule and length: float32 angles at 131072 are off by more than fp16's unit
    "llama3-128k": BASE | {"max_position_embeddings": 131072, "rope_theta": 500000.0,
                           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
    "alibi12": {"model_type": "bloom", "vocab_size": 64, "hidden_size": 96, "n_head": 12, "n_layer": 1},
    "alibi8": {"model_type": "bloom", "vocab_size": 64, "hidden_size": 64, "n_head": 8, "n_layer": 1},
}  # fmt: skip


def write_config(folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(CONFIGS[name]))
    return path


def tables(
    spec: RopeSpec, length: int, rows: int | None = None, f32: bool = False, **params: Any
) -> tuple[np.ndarray, ...]:
    """cos/sin [rows (default max_positions), D/2] of ``spec``'s schedule (``params`` changed) at call L, float32:
    rounded once from float64, or (``f32``) with position x frequency computed in float32 as the peers do.
    """  # noqa: D205
    rows = spec.max_positions if rows is None else rows
    inv, factor = frequencies(spec, length, **params)
    if f32:
        angles = np.outer(np.arange(rows, dtype=np.float32), inv.astype(np.float32)).astype(np.float64)
    else:
        angles = np.outer(np.arange(rows, dtype=np.float64), inv)
    return (factor * np.cos(angles)).astype(np.float32), (factor * np.sin(angles)).astype(np.float32)


def _io(name: str, elem: int, dims: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _save(nodes: list, inputs: list, outputs: list, inits: list, path: Path, opsets: dict[str, int]) -> Path:
    graph = helper.make_graph(nodes, "planted", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def gqa_model(
    path: Path,
    cos: np.ndarray,
    sin: np.ndarray,
    long: tuple[np.ndarray, np.ndarray] | None = None,
    threshold: int = ORIGINAL,
    head_dim: int = D,
    batch: int | str = 1,
) -> Path:
    """GroupQueryAttention reading cos/sin caches (with ``long``: an If on the mask length > threshold), ``batch``
    rows.
    """  # noqa: D205
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes = []
    if long is None:
        inits += [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
    else:

        def branch(c: np.ndarray, s: np.ndarray, tag: str) -> onnx.GraphProto:
            made = [
                helper.make_node("Constant", [], [f"{tag}_cos"], value=numpy_helper.from_array(c)),
                helper.make_node("Constant", [], [f"{tag}_sin"], value=numpy_helper.from_array(s)),
            ]
            return helper.make_graph(
                made, tag, [], [_io(f"{tag}_cos", TensorProto.FLOAT, None), _io(f"{tag}_sin", TensorProto.FLOAT, None)]
            )

        inits.append(numpy_helper.from_array(np.array(threshold, np.int64), "threshold"))
        nodes += [
            helper.make_node("Shape", ["attention_mask"], ["mask_shape"]),
            helper.make_node("Gather", ["mask_shape", "one"], ["total_1"], axis=0),
            helper.make_node("Squeeze", ["total_1"], ["total"]),
            helper.make_node("Greater", ["total", "threshold"], ["use_long"]),
            helper.make_node(
                "If",
                ["use_long"],
                ["cos_cache", "sin_cache"],
                name="rope_caches",
                then_branch=branch(*long, "large"),
                else_branch=branch(cos, sin, "small"),
            ),
        ]
    nodes.append(helper.make_node(
        "GroupQueryAttention", ["qkv", "", "", "past_key", "past_value", "seqlens_k", "total_sequence_length",
                                "cos_cache", "sin_cache"], ["attn", "present_key", "present_value"],
        name="/model/layers.0/attn/GroupQueryAttention", domain="com.microsoft", num_heads=HEADS,
        kv_num_heads=KV, do_rotary=1, rotary_interleaved=0))  # fmt: skip
    inputs = [
        _io("qkv", TensorProto.FLOAT, [batch, "s", (HEADS + 2 * KV) * head_dim]),
        _io("attention_mask", TensorProto.INT64, [batch, "total"]),
        _io("past_key", TensorProto.FLOAT, [batch, KV, "past", head_dim]),
        _io("past_value", TensorProto.FLOAT, [batch, KV, "past", head_dim]),
        _io("seqlens_k", TensorProto.INT32, [batch]),
        _io("total_sequence_length", TensorProto.INT32, []),
    ]
    outputs = [_io("attn", TensorProto.FLOAT, [batch, "s", HEADS * head_dim])]
    return _save(nodes, inputs, outputs, inits, path, {"": 21, "com.microsoft": 1})


def rotary23_model(path: Path, cos: np.ndarray, sin: np.ndarray, batch: int | str = 1) -> Path:
    """Opset-23 RotaryEmbedding on the query with caches and position_ids, ``batch`` rows."""
    nodes = [helper.make_node("RotaryEmbedding", ["query", "cos_cache", "sin_cache", "position_ids"], ["rotated"],
                              num_heads=HEADS)]  # fmt: skip
    inits = [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
    inputs = [_io("query", TensorProto.FLOAT, [batch, "s", HEADS * D]),
              _io("position_ids", TensorProto.INT64, [batch, "s"])]  # fmt: skip
    outputs = [_io("rotated", TensorProto.FLOAT, [batch, "s", HEADS * D])]
    return _save(nodes, inputs, outputs, inits, path, {"": 23})


def rotary_ms_model(path: Path, cos: np.ndarray, sin: np.ndarray) -> Path:
    """com.microsoft RotaryEmbedding on the query [1, s, H * D] with caches and position_ids (Optimum's form; the
    builder's CPU form too), in the caches' dtype (float32 or float16).
    """  # noqa: D205
    nodes = [helper.make_node("RotaryEmbedding", ["query", "position_ids", "cos_cache", "sin_cache"], ["rotated"],
                              domain="com.microsoft", num_heads=HEADS)]  # fmt: skip
    inits = [numpy_helper.from_array(cos, "cos_cache"), numpy_helper.from_array(sin, "sin_cache")]
    elem = helper.np_dtype_to_tensor_dtype(cos.dtype)
    inputs = [_io("query", elem, [1, "s", HEADS * D]), _io("position_ids", TensorProto.INT64, [1, "s"])]
    outputs = [_io("rotated", elem, [1, "s", HEADS * D])]
    return _save(nodes, inputs, outputs, inits, path, {"": 21, "com.microsoft": 1})


def alibi_model(path: Path, slopes: np.ndarray) -> Path:
    """BLOOM's form: key positions (cumsum of the mask - 1) x slopes [heads, 1], added to q.k scores [1, heads, s, t]
    with an additive mask ((1 - mask) x -1e9) before the Softmax.
    """  # noqa: D205
    heads = len(slopes)
    inits = [numpy_helper.from_array(slopes.astype(np.float32).reshape(1, heads, 1, 1), "slopes"),
             numpy_helper.from_array(np.array(1, np.int64), "axis1"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one_f"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "big_negative"),
             numpy_helper.from_array(np.array([1, 2], np.int64), "axes12")]  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("CumSum", ["mask_f", "axis1"], ["count"]),
        helper.make_node("Sub", ["count", "one_f"], ["from_zero"]),
        helper.make_node("Mul", ["from_zero", "mask_f"], ["key_positions"]),
        helper.make_node("Unsqueeze", ["key_positions", "axes12"], ["key_positions_4d"]),
        helper.make_node("Mul", ["slopes", "key_positions_4d"], ["alibi"]),
        helper.make_node("Sub", ["one_f", "mask_f"], ["padding"]),
        helper.make_node("Mul", ["padding", "big_negative"], ["additive"]),
        helper.make_node("Unsqueeze", ["additive", "axes12"], ["additive_4d"]),
        helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["query", "key_t"], ["scores"]),
        helper.make_node("Add", ["scores", "alibi"], ["biased"]),
        helper.make_node("Add", ["biased", "additive_4d"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=-1),
    ]
    inputs = [_io("query", TensorProto.FLOAT, [1, heads, "s", 8]), _io("key", TensorProto.FLOAT, [1, heads, "t", 8]),
              _io("attention_mask", TensorProto.INT64, [1, "t"])]  # fmt: skip
    return _save(nodes, inputs, [_io("probs", TensorProto.FLOAT, [1, heads, "s", "t"])], inits, path, {"": 17})


def alibi_lengths_model(path: Path, slopes: np.ndarray) -> Path:
    """mobius-onnx's BLOOM form: no attention_mask, no position_ids; the query and key positions are Ranges over the
    lengths of input_ids and of the cache (their Shapes, never their values), the bias -|q - k| x slopes [heads, 1, 1]
    plus a causal mask (Where q >= k: 0, else -inf), added to q.k scores [1, heads, s, t] before the Softmax.
    """  # noqa: D205
    heads = len(slopes)
    inits = [numpy_helper.from_array(slopes.astype(np.float32).reshape(heads, 1, 1), "slopes"),
             numpy_helper.from_array(np.array([1], np.int64), "at1"),
             numpy_helper.from_array(np.array([2], np.int64), "at2"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(0.0, np.float32), "open"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "shut")]  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "at1"], ["s_1"], axis=0),
        helper.make_node("Shape", ["past_key"], ["past_shape"]),
        helper.make_node("Gather", ["past_shape", "at2"], ["p_1"], axis=0),
        helper.make_node("Squeeze", ["s_1", "axis0"], ["s"]),
        helper.make_node("Squeeze", ["p_1", "axis0"], ["p"]),
        helper.make_node("Add", ["s", "p"], ["t"]),
        helper.make_node("Range", ["zero", "s", "one"], ["q_from_zero"]),
        helper.make_node("Add", ["q_from_zero", "p"], ["q_pos"]),
        helper.make_node("Range", ["zero", "t", "one"], ["k_pos"]),
        helper.make_node("Unsqueeze", ["q_pos", "at1"], ["q_col"]),  # [s, 1]
        helper.make_node("Unsqueeze", ["k_pos", "axis0"], ["k_row"]),  # [1, t]
        helper.make_node("Sub", ["q_col", "k_row"], ["distance"]),
        helper.make_node("Abs", ["distance"], ["far"]),
        helper.make_node("Neg", ["far"], ["near_first"]),
        helper.make_node("Cast", ["near_first"], ["near_first_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["slopes", "near_first_f"], ["alibi"]),  # [heads, s, t]
        helper.make_node("GreaterOrEqual", ["q_col", "k_row"], ["causal"]),
        helper.make_node("Where", ["causal", "open", "shut"], ["mask"]),
        helper.make_node("Add", ["alibi", "mask"], ["bias"]),
        helper.make_node("Transpose", ["key"], ["key_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["query", "key_t"], ["scores"]),
        helper.make_node("Add", ["scores", "bias"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["probs"], axis=-1),
    ]
    inputs = [_io("input_ids", TensorProto.INT64, [1, "s"]), _io("past_key", TensorProto.FLOAT, [1, heads, "p", 8]),
              _io("query", TensorProto.FLOAT, [1, heads, "s", 8]), _io("key", TensorProto.FLOAT, [1, heads, "t", 8])]
    return _save(nodes, inputs, [_io("probs", TensorProto.FLOAT, [1, heads, "s", "t"])], inits, path, {"": 21})


def computed_model(path: Path, inv_freq: np.ndarray, factor: float, f32: bool, lengths: bool = False) -> Path:
    """cos/sin computed from position_ids as transformers' dynamo export writes them, rotate-half applied to q.

    ``f32``: positions x inv_freq in float32 (every exporter of transformers models); else in float64, rounded once.
    ``lengths``: no position_ids input; each token's position is the cache's length plus 0 .. s - 1, from the Shapes
    of input_ids [1, s] and past_key [1, H, p, D] (Optimum's Gemma and gpt-oss exports).
    """
    compute = TensorProto.FLOAT if f32 else TensorProto.DOUBLE
    dtype = np.float32 if f32 else np.float64
    half = D // 2
    inits = [numpy_helper.from_array(inv_freq.astype(dtype).reshape(1, half, 1), "inv_freq"),
             numpy_helper.from_array(np.array(factor, dtype), "attention_scaling"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([half, half], np.int64), "halves")]  # fmt: skip
    made: list[onnx.NodeProto] = []
    if lengths:
        inits += [numpy_helper.from_array(np.array([2], np.int64), "axis2"),
                  numpy_helper.from_array(np.array([0], np.int64), "axis0"),
                  numpy_helper.from_array(np.array(1, np.int64), "step")]  # fmt: skip
        made = [helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
                helper.make_node("Gather", ["ids_shape", "axis1"], ["s_1"], axis=0),
                helper.make_node("Shape", ["past_key"], ["past_shape"]),
                helper.make_node("Gather", ["past_shape", "axis2"], ["p_1"], axis=0),
                helper.make_node("Squeeze", ["s_1", "axis0"], ["s"]),
                helper.make_node("Squeeze", ["p_1", "axis0"], ["p"]),
                helper.make_node("Add", ["p", "s"], ["t"]),
                helper.make_node("Range", ["p", "t", "step"], ["steps"]),
                helper.make_node("Unsqueeze", ["steps", "axis0"], ["position_ids"])]  # fmt: skip
    nodes = [
        *made,
        helper.make_node("Cast", ["position_ids"], ["positions"], to=compute),
        helper.make_node("Unsqueeze", ["positions", "axis1"], ["positions_1"]),  # [1, 1, s]
        helper.make_node("MatMul", ["inv_freq", "positions_1"], ["freqs_t"]),  # [1, half, s]
        helper.make_node("Transpose", ["freqs_t"], ["freqs"], perm=[0, 2, 1]),  # [1, s, half]
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos_raw"]),
        helper.make_node("Sin", ["emb"], ["sin_raw"]),
        helper.make_node("Mul", ["cos_raw", "attention_scaling"], ["cos_scaled"]),
        helper.make_node("Mul", ["sin_raw", "attention_scaling"], ["sin_scaled"]),
        helper.make_node("Cast", ["cos_scaled"], ["cos_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["sin_scaled"], ["sin_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["cos_f", "axis1"], ["cos"]),  # [1, 1, s, D]
        helper.make_node("Unsqueeze", ["sin_f", "axis1"], ["sin"]),
        helper.make_node("Split", ["query", "halves"], ["q1", "q2"], axis=-1),
        helper.make_node("Neg", ["q2"], ["minus_q2"]),
        helper.make_node("Concat", ["minus_q2", "q1"], ["rotated_half"], axis=-1),
        helper.make_node("Mul", ["query", "cos"], ["q_cos"]),
        helper.make_node("Mul", ["rotated_half", "sin"], ["q_sin"]),
        helper.make_node("Add", ["q_cos", "q_sin"], ["rotated"]),
    ]
    inputs = [_io("query", TensorProto.FLOAT, [1, HEADS, "s", D]), _io("position_ids", TensorProto.INT64, [1, "s"])]
    if lengths:
        inputs = [_io("query", TensorProto.FLOAT, [1, HEADS, "s", D]), _io("input_ids", TensorProto.INT64, [1, "s"]),
                  _io("past_key", TensorProto.FLOAT, [1, HEADS, "p", D])]  # fmt: skip
    return _save(nodes, inputs, [_io("rotated", TensorProto.FLOAT, [1, HEADS, "s", D])], inits, path, {"": 21})


def _const(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _innermost(tag: str, tables: tuple[np.ndarray, np.ndarray], computed: bool, step: str | None) -> list:
    """The nodes of the deepest subgraph: tables (or angles) as Constants, rotating the outer ``q4`` [1, H, s, D]
    into ``{tag}_out``; with ``step`` (a Loop body's iteration count), the tables scaled by step + 1.
    """  # noqa: D205
    if computed:  # tables[0] is inv_freq [D/2]: cos/sin of position_ids x inv_freq in the branch
        half = D // 2
        return [
            _const(f"{tag}_inv", tables[0].astype(np.float32).reshape(1, half, 1)),
            _const(f"{tag}_axis1", np.array([1], np.int64)),
            _const(f"{tag}_halves", np.array([half, half], np.int64)),
            helper.make_node("Cast", ["position_ids"], [f"{tag}_pos"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", [f"{tag}_pos", f"{tag}_axis1"], [f"{tag}_pos1"]),
            helper.make_node("MatMul", [f"{tag}_inv", f"{tag}_pos1"], [f"{tag}_freqs_t"]),
            helper.make_node("Transpose", [f"{tag}_freqs_t"], [f"{tag}_freqs"], perm=[0, 2, 1]),
            helper.make_node("Concat", [f"{tag}_freqs", f"{tag}_freqs"], [f"{tag}_emb"], axis=-1),
            helper.make_node("Cos", [f"{tag}_emb"], [f"{tag}_cos3"]),
            helper.make_node("Sin", [f"{tag}_emb"], [f"{tag}_sin3"]),
            helper.make_node("Unsqueeze", [f"{tag}_cos3", f"{tag}_axis1"], [f"{tag}_cos"]),
            helper.make_node("Unsqueeze", [f"{tag}_sin3", f"{tag}_axis1"], [f"{tag}_sin"]),
            helper.make_node("Split", ["q4", f"{tag}_halves"], [f"{tag}_q1", f"{tag}_q2"], axis=-1),
            helper.make_node("Neg", [f"{tag}_q2"], [f"{tag}_minus_q2"]),
            helper.make_node("Concat", [f"{tag}_minus_q2", f"{tag}_q1"], [f"{tag}_half"], axis=-1),
            helper.make_node("Mul", ["q4", f"{tag}_cos"], [f"{tag}_qc"]),
            helper.make_node("Mul", [f"{tag}_half", f"{tag}_sin"], [f"{tag}_qs"]),
            helper.make_node("Add", [f"{tag}_qc", f"{tag}_qs"], [f"{tag}_out"]),
        ]
    nodes = [_const(f"{tag}_cos_table", tables[0]), _const(f"{tag}_sin_table", tables[1])]
    cos, sin = f"{tag}_cos_table", f"{tag}_sin_table"
    if step is not None:  # tables that change with the iteration: nothing outside the loop can evaluate them
        nodes += [_const(f"{tag}_one", np.array(1, np.int64)),
                  helper.make_node("Add", [step, f"{tag}_one"], [f"{tag}_count"]),
                  helper.make_node("Cast", [f"{tag}_count"], [f"{tag}_scale"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", [cos, f"{tag}_scale"], [f"{tag}_cos_scaled"]),
                  helper.make_node("Mul", [sin, f"{tag}_scale"], [f"{tag}_sin_scaled"])]  # fmt: skip
        cos, sin = f"{tag}_cos_scaled", f"{tag}_sin_scaled"
    return nodes + [helper.make_node("RotaryEmbedding", ["q4", cos, sin, "position_ids"], [f"{tag}_out"])]


def _nest(kinds: tuple[str, ...], tag: str, tables: tuple[np.ndarray, np.ndarray], computed: bool,
          varying: bool, step: str | None = None) -> list:  # fmt: skip
    """Nodes producing ``{tag}_out``: ``kinds`` (If / Loop) nested outermost first around ``_innermost``. An If's
    condition is true and its else branch returns q4 as it is; a Loop runs once and returns its body's value stacked
    ([1, ...]).
    """  # noqa: D205
    if not kinds:
        return _innermost(tag, tables, computed, step if varying else None)
    inner = f"{tag}_{kinds[0].lower()}"
    body = _nest(kinds[1:], inner, tables, computed, varying, f"{inner}_i" if kinds[0] == "Loop" else step)
    out = [_io(f"{inner}_out", TensorProto.FLOAT, None)]
    if kinds[0] == "If":
        then = helper.make_graph(body, f"{inner}_then", [], out)
        other = helper.make_graph([helper.make_node("Identity", ["q4"], [f"{inner}_same"])], f"{inner}_else", [],
                                  [_io(f"{inner}_same", TensorProto.FLOAT, None)])  # fmt: skip
        return [helper.make_node("If", ["always"], [f"{tag}_out"], name=f"{inner}_If", then_branch=then,
                                 else_branch=other)]  # fmt: skip
    loop = helper.make_graph(
        [*body, helper.make_node("Identity", [f"{inner}_cond"], [f"{inner}_cond_out"])], f"{inner}_body",
        [_io(f"{inner}_i", TensorProto.INT64, []), _io(f"{inner}_cond", TensorProto.BOOL, [])],
        [_io(f"{inner}_cond_out", TensorProto.BOOL, []), *out],
    )  # fmt: skip
    return [helper.make_node("Loop", ["once", "always"], [f"{tag}_out"], name=f"{inner}_Loop", body=loop)]


def subgraph_model(
    path: Path,
    outer: tuple[np.ndarray, np.ndarray],
    inner: tuple[np.ndarray, ...],
    kinds: tuple[str, ...],
    computed: bool = False,
    varying: bool = False,
) -> Path:
    """An opset-23 RotaryEmbedding in the main graph reading ``outer`` tables, and a second rotation inside ``kinds``
    (If / Loop, nested outermost first): a RotaryEmbedding reading ``inner`` tables stored as Constants in the deepest
    body, or (``computed``) cos/sin of position_ids x ``inner[0]`` (inverse frequencies) computed there. Query
    [1, H, s, D] (``q4``); both rotations are outputs.
    """  # noqa: D205
    inits = [numpy_helper.from_array(outer[0], "cos_cache"), numpy_helper.from_array(outer[1], "sin_cache"),
             numpy_helper.from_array(np.array(True), "always"), numpy_helper.from_array(np.array(1, np.int64), "once")]
    nodes = [helper.make_node("Identity", ["query"], ["q4"]),
             helper.make_node("RotaryEmbedding", ["q4", "cos_cache", "sin_cache", "position_ids"], ["rotated"]),
             *_nest(kinds, "deep", inner, computed, varying)]  # fmt: skip
    inputs = [_io("query", TensorProto.FLOAT, [1, HEADS, "s", D]), _io("position_ids", TensorProto.INT64, [1, "s"])]
    outputs = [_io("rotated", TensorProto.FLOAT, [1, HEADS, "s", D]), _io("deep_out", TensorProto.FLOAT, None)]
    return _save(nodes, inputs, outputs, inits, path, {"": 23})


# What ONNX Runtime refuses to load, planted into a model that is otherwise right: (name, how).
def _opset_1000(model: onnx.ModelProto) -> None:
    model.opset_import[0].version = 1000


def _cycle(model: onnx.ModelProto) -> None:
    out = model.graph.output[0].name
    model.graph.node.extend([helper.make_node("Add", ["cycle_b", out], ["cycle_a"]),
                             helper.make_node("Neg", ["cycle_a"], ["cycle_b"])])  # fmt: skip
    model.graph.output.append(_io("cycle_b", TensorProto.FLOAT, None))


def _unknown_domain(model: onnx.ModelProto) -> None:
    model.graph.node.append(helper.make_node("Mystery", [model.graph.output[0].name], ["odd"], domain="x.unknown"))
    model.graph.output.append(_io("odd", TensorProto.FLOAT, None))
    model.opset_import.append(helper.make_opsetid("x.unknown", 1))


def _scales_claim_1024x(model: onnx.ModelProto) -> None:
    """An int4 projection (MatMulNBits) of the model's first input whose scales tensor claims 1024 x its bytes: its
    dims say [32 x 1024] floats, its raw data holds 32 (the outside check's int4 model ONNX Runtime refuses to load).
    """  # noqa: D205
    k, n, block = 128, 8, 32
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.integers(0, 256, (n, k // block, block // 2), dtype=np.uint8), "proj_Q4")
    scales = numpy_helper.from_array((rng.standard_normal(n * k // block) * 0.01).astype(np.float32), "proj_scales")
    scales.dims[0] *= 1024
    model.graph.initializer.extend([weight, scales])
    first = model.graph.input[0].name
    model.graph.node.append(helper.make_node("MatMulNBits", [first, "proj_Q4", "proj_scales"], ["proj"], name="proj",
                                             domain="com.microsoft", K=k, N=n, bits=4, block_size=block))  # fmt: skip
    model.graph.output.append(_io("proj", TensorProto.FLOAT, None))


ORT_REFUSES = {"opset-1000": _opset_1000, "cyclic-graph": _cycle, "unknown-domain": _unknown_domain,
               "int4-scales-claim-1024x-bytes": _scales_claim_1024x}  # fmt: skip


def ort_refused(path: Path, how: str) -> Path:
    """The model at ``path`` rewritten with ``ORT_REFUSES[how]`` planted."""
    model = onnx.load(str(path))
    ORT_REFUSES[how](model)
    onnx.save(model, str(path))
    return path


def _tensors_named(graph: onnx.GraphProto) -> dict[str, onnx.TensorProto]:
    """Every tensor of ``graph`` and its subgraphs by name: initializers and Constant values."""
    found = {t.name: t for t in graph.initializer}
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                found[node.output[0]] = attr.t
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                found |= _tensors_named(sub)
    return found


def external(model: onnx.ModelProto, name: str, folder: Path, location: str, offset: int = 0,
             length: int | None = None, pad: int = 0) -> None:  # fmt: skip
    """The tensor ``name`` (an initializer or a Constant's value, at any depth) moved into external data at
    ``location`` (relative to ``folder``, written there with ``pad`` bytes after it); ``offset`` and ``length`` are
    what the model says, true or not.
    """  # noqa: D205
    tensor = _tensors_named(model.graph)[name]
    data = numpy_helper.to_array(tensor).tobytes()
    target = (folder / location).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data + bytes(pad))
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), **({} if length is None else {"length": str(length)})}
    del tensor.external_data[:]
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)


def longrope_with(tmp: Path, change: Callable[[onnx.ModelProto, Path], None]) -> tuple[Path, Path]:
    """The builder's LongRoPE form (an If between two Constant tables) in ``tmp/inner``, changed by ``change``."""
    import ropeexport as rx

    config = write_config(tmp, "longrope")
    spec = rx.from_hf_config(config)[0]
    folder = tmp / "inner"
    folder.mkdir()
    path = gqa_model(folder / "model.onnx", *tables(spec, ORIGINAL, rows=ORIGINAL), long=tables(spec, ORIGINAL + 1))
    model = onnx.load(str(path))
    change(model, folder)
    onnx.save(model, str(path))
    return path, config


def sparse_external(model: onnx.ModelProto, folder: Path, location: str) -> None:
    """A sparse initializer (4 float values of a [64] tensor) whose values are external data at ``location``."""
    values = numpy_helper.from_array(np.arange(4, dtype=np.float32), "sparse_table")
    indices = numpy_helper.from_array(np.array([0, 5, 9, 63], np.int64), "sparse_table_indices")
    sparse = helper.make_sparse_tensor(values, indices, [64])
    model.graph.sparse_initializer.append(sparse)
    (folder / location).resolve().write_bytes(np.arange(4, dtype=np.float32).tobytes())
    part = model.graph.sparse_initializer[-1].values
    part.ClearField("float_data")
    part.data_location = TensorProto.EXTERNAL
    part.external_data.add(key="location", value=location)


@dataclass(frozen=True)
class Planted:
    """A model of ``config`` with a fault; ``expected``: a phrase every finding list must contain (None: exact)."""

    name: str
    config: str
    build: Callable[[Path, RopeSpec], Path]
    expected: str | None


def _gqa(
    rows: int | None = None, f32: bool = False, swap: bool = False, **params: Any
) -> Callable[[Path, RopeSpec], Path]:
    def build(path: Path, spec: RopeSpec) -> Path:
        cos, sin = tables(spec, spec.max_positions, rows, f32, **params)
        return gqa_model(path, *((sin, cos) if swap else (cos, sin)))

    return build


def _default_gqa(path: Path, spec: RopeSpec) -> Path:
    inv, _ = frequencies(spec, P, "default")
    angles = np.outer(np.arange(spec.max_positions, dtype=np.float64), inv)
    return gqa_model(path, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))


def _longrope(threshold: int) -> Callable[[Path, RopeSpec], Path]:
    def build(path: Path, spec: RopeSpec) -> Path:
        short = tables(spec, ORIGINAL, rows=ORIGINAL)
        return gqa_model(path, *short, long=tables(spec, ORIGINAL + 1), threshold=threshold)

    return build


def _dynamic_frozen(path: Path, spec: RopeSpec) -> Path:
    return gqa_model(path, *tables(spec, spec.max_positions))  # the frequencies of the longest call at every length


def _computed(f32: bool, lengths: bool = False) -> Callable[[Path, RopeSpec], Path]:
    def build(path: Path, spec: RopeSpec) -> Path:
        inv, factor = frequencies(spec, P)
        return computed_model(path, inv, factor, f32, lengths)

    return build


def _rotary23(path: Path, spec: RopeSpec) -> Path:
    return rotary23_model(path, *tables(spec, P))


def _alibi(change: Callable[[np.ndarray], np.ndarray] = lambda m: m,
           form: Callable[[Path, np.ndarray], Path] = alibi_model) -> Callable[[Path, Any], Path]:  # fmt: skip
    def build(path: Path, spec: Any) -> Path:
        from ropeexport.families.alibi.reference import spec_slopes

        return form(path, change(spec_slopes(spec)))

    return build


def _naive(m: np.ndarray) -> np.ndarray:
    """The power-of-two recipe 2^(-8h/n) applied to any n (the mistake for a head count that is not one)."""
    return np.array([2.0 ** (-8.0 * h / len(m)) for h in range(1, len(m) + 1)])


def _exact_fp16(path: Path, spec: RopeSpec) -> Path:
    """The builder's fp16 CPU form with the exact table rounded once to float16."""
    return rotary_ms_model(path, *(t.astype(np.float16) for t in tables(spec, spec.max_positions)))


def builder_fp16_tables(spec: RopeSpec) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [P, r/2] as onnxruntime-genai's builder writes an fp16 model's caches: the inverse frequencies, the
    angles position x frequency and their cos/sin all in float32 (``make_rotary_embedding_caches_from_scratch``),
    then rounded to float16.
    """  # noqa: D205
    inv = frequencies(spec, spec.max_positions)[0].astype(np.float32)
    angles = np.outer(np.arange(spec.max_positions, dtype=np.float32), inv)  # float32, as torch.outer computes it
    return np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)


def _builder_fp16(path: Path, spec: RopeSpec) -> Path:
    return rotary_ms_model(path, *builder_fp16_tables(spec))


def _theta(base: float) -> Callable[[Path, RopeSpec], Path]:
    """The config's schedule with ``base`` for theta."""

    def build(path: Path, spec: RopeSpec) -> Path:
        return gqa_model(path, *tables(replace(spec, theta=base), spec.max_positions))

    return build


def _offset(shift: int) -> Callable[[Path, RopeSpec], Path]:
    """Row p holds position p + ``shift`` (shift >= 0)."""

    def build(path: Path, spec: RopeSpec) -> Path:
        cos, sin = tables(spec, spec.max_positions, rows=spec.max_positions + shift)
        return gqa_model(path, cos[shift:], sin[shift:])

    return build


def _sin_negated(path: Path, spec: RopeSpec) -> Path:
    cos, sin = tables(spec, spec.max_positions)
    return gqa_model(path, cos, -sin)


def _clamped(row: int) -> Callable[[Path, RopeSpec], Path]:
    """Rows past ``row`` repeat it (a table frozen at length row + 1, padded to max_positions)."""

    def build(path: Path, spec: RopeSpec) -> Path:
        cos, sin = tables(spec, spec.max_positions)
        cos[row + 1 :], sin[row + 1 :] = cos[row], sin[row]
        return gqa_model(path, cos, sin)

    return build


@dataclass(frozen=True)
class Named:
    """A planted fault and the one finding audit must report for it: its ``finding`` name and ``words`` in its text."""

    name: str
    config: str
    build: Callable[[Path, RopeSpec], Path]
    finding: str
    words: str


NAMED = [
    Named("theta", "default", _theta(500000.0), "theta", "theta 500000 where the config says 10000"),
    Named("theta-llama3", "llama3", _theta(500000.0), "theta", "theta 500000 where the config says 10000"),
    Named("position-offset", "default", _offset(1), "position-offset",
          "positions offset by +1 (row p holds position p+1)"),
    Named("sin-negated", "default", _sin_negated, "sin-negated", "sin negated (rotation in the opposite direction)"),
    Named("clamped-8191", "long", _clamped(8191), "clamped",
          "rows past 8191 repeat row 8191 (table clamped / frozen at length 8192)"),
    Named("builder-fp16-cpu", "llama3-128k", _builder_fp16, "float32-through-fp16",
          "float32 frequencies seen through fp16 rounding"),
    Named("scaling-factor-linear", "linear", _gqa(factor=2.0), "scaling-factor",
          "rope_scaling factor 2 where the config says 4 (inverse frequencies 2 x the config's linear ones)"),
    Named("cos-sin-exchanged", "default", _gqa(swap=True), "cos-sin-exchanged", "cos and sin exchanged"),
]  # fmt: skip

CASES = [
    Planted("exact-gqa-llama3", "llama3", _gqa(), None),
    Planted("exact-gqa-long", "long", _gqa(), None),
    Planted("exact-fp16-llama3-128k", "llama3-128k", _exact_fp16, None),
    Planted("exact-rotary23-yarn", "yarn", _rotary23, None),
    Planted("exact-computed-default", "default", _computed(f32=False), None),
    Planted("exact-gqa-longrope", "longrope", _longrope(ORIGINAL), None),
    Planted("float32-gqa-llama3", "llama3", _gqa(f32=True), "float32 angles"),
    Planted("float32-computed-default", "default", _computed(f32=True), "float32 angles"),
    # no position_ids input: positions from the lengths of input_ids and the cache (Optimum's Gemma, gpt-oss)
    Planted("float32-computed-from-lengths", "default", _computed(f32=True, lengths=True), "float32 angles"),
    Planted("scaling-ignored-llama3", "llama3", _default_gqa, "rope_scaling ignored"),
    Planted("wrong-factor-linear", "linear", _gqa(factor=2.0), "inverse frequencies 2 x"),
    Planted("yarn-untruncated", "yarn", _gqa(truncate=False), "YaRN correction range not truncated"),
    Planted("yarn-attention-factor", "yarn", _gqa(attention_factor=1.0), "attention factor 1 where"),
    Planted("longrope-switch-never", "longrope", _longrope(P), "long factors never used"),
    Planted("longrope-switch-always", "longrope", _longrope(0), "long factors used at L = 1024"),
    Planted("frozen-at-trace", "llama3", _gqa(rows=2048), "the table has 2048 rows"),
    Planted("cos-sin-swapped", "default", _gqa(swap=True), "cos and sin exchanged"),
    Planted("dynamic-unscaled", "dynamic", _default_gqa, "rope_scaling ignored"),
    Planted("dynamic-frozen", "dynamic", _dynamic_frozen, "dynamic NTK frozen at L = 16384"),
    Planted("exact-alibi-12-heads", "alibi12", _alibi(), None),
    Planted("exact-alibi-8-heads", "alibi8", _alibi(), None),
    Planted("alibi-naive-12-heads", "alibi12", _alibi(_naive), "ALiBi slopes wrong for 12 heads"),
    Planted("alibi-reversed", "alibi8", _alibi(lambda m: m[::-1].copy()), "in reverse head order"),
    # mobius-onnx's form: positions from the lengths of input_ids and the cache (their Shapes), no mask input
    Planted("exact-alibi-from-lengths", "alibi12", _alibi(form=alibi_lengths_model), None),
    Planted("alibi-naive-from-lengths", "alibi12", _alibi(_naive, alibi_lengths_model),
            "ALiBi slopes wrong for 12 heads"),
    Planted(
        "alibi-one-slope-off",
        "alibi12",
        _alibi(lambda m: m * (np.arange(len(m)) != 9) + 0.3 * (np.arange(len(m)) == 9)),
        "head 9 has 0.3 where",
    ),
]


def graft_as_planted(model: Path, config: Path, checkpoint: Path, out: Path, graft: str) -> None:
    """graft of a planted model into ``out`` trusting ``config``, proven against ``checkpoint``'s float64 decoder, as
    its row says: ``graft`` "proven": the tables exact after, the grafted model passing where the original fails;
    else a pattern of the refusal's words (the finding graft cannot repair), and nothing written.
    """  # noqa: D205
    import pytest

    import ropeexport as rx

    out.parent.mkdir(parents=True)
    if graft != "proven":
        with pytest.raises(rx.errors.SpecError, match=graft):
            rx.graft(model, config, out, trust="config", checkpoint=checkpoint)
        assert not out.exists()
        return
    result = rx.graft(model, config, out, trust="config", checkpoint=checkpoint)
    assert result.proven and result.after is not None and result.after.verdict == "exact", result.to_dict()
    assert result.decoder is not None and result.decoder["passed"] == {"original": False, "grafted": True}
