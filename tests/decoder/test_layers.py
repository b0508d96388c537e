"""Decoders whose layers differ (``DecoderSpec.layers``): built, verified by generation, serialized, refused.

Each case takes a tiny seeded config and says its layers (as ``to_dict`` writes them: the fields where a layer
differs from the model's default one). The decoder built from it passes every scenario against the float64 recompute
of the same layers; the same weights exported with every layer the default one fail that truth (the layers are
what is judged, not ignored); each layer's graph holds its own position piece or none, a table once per distinct
position spec; transformers is skipped with the reason; the spec round-trips through to_dict, decoder.json and the
model's metadata.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from ropeexport.architectures.feedforward import FeedForward
from ropeexport.architectures.layers import AttentionLayer
from ropeexport.components.norm import norm64
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.config import from_config
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.kind import rebuild_spec, run_scenarios
from ropeexport.decoder.parts import attention_spec, position_pieces
from ropeexport.decoder.spec import DecoderSpec, LayerSpec
from ropeexport.decoder.verify import verify_decoder
from ropeexport.decoder.weights import expected, seeded_weights
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import save_model
from ropeexport.report.views import DecoderReport, ScenarioRecord
from ropeexport.runtimes.ort import OrtRunner
from tests.decoder.tiny import CONFIGS

LLAMA = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 3, "intermediate_size": 48, "vocab_size": 96, "max_position_embeddings": 256}  # fmt: skip
BLOOM = {"model_type": "bloom", "hidden_size": 32, "n_head": 4, "n_layer": 2, "vocab_size": 96}
SLIDING = {"attention": "sliding", "window": 6}
ATTENTION, MLP = AttentionLayer(4, 2, 8), FeedForward("gated", "silu", 48)  # LLAMA's layers, as objects
LOCAL = {**SLIDING, "position": {"theta": 1e4}}  # Gemma 3's local layers: theta 10000, a window
MOE = {"mlp": "moe", "num_experts": 4, "experts_per_token": 2, "router": "topk_softmax", "swiglu_alpha": 1.702,
       "swiglu_limit": 7.0}  # fmt: skip
GLOBAL = {"position": {"theta": 1e6, "scaling": "linear", "scaling_params": {"factor": 8.0}}}  # its global ones

# (label, config, per layer the fields where it differs from the model's default layer (a "position" table: the
# changes to the model's position fields), graph forms)
CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], tuple[str, ...]]] = [
    ("layer 1 without positional encoding", LLAMA, [{}, {"position": None}, {}], ("fused", "gqa", "decomposed")),
    ("windows per layer", LLAMA, [{"attention": "sliding", "window": 4}, {}, {"attention": "sliding", "window": 9}],
     ("fused", "tensorrt")),
    ("theta per layer, windows on the local ones (Gemma 3's pattern)", LLAMA, [LOCAL, GLOBAL, LOCAL],
     ("fused", "gqa")),
    ("ALiBi with a layer without it", BLOOM, [{"position": None}, {}], ("fused",)),
    # What a layer holds beyond its position and window (``architectures.layers``), each in the graph and its twin:
    ("layer 1 with 2 heads of 16 (Gemma 4's per-layer head_dim)", LLAMA,
     [{}, {"position": {"num_heads": 2, "num_kv_heads": 1, "head_dim": 16}}, {}], ("fused", "gqa", "decomposed")),
    ("a logit scale, a cap and a parallel residual, each on one layer", LLAMA,
     [{"attn_scale": 0.5}, {"attn_softcap": 20.0}, {"residual": "parallel"}], ("fused", "gqa")),
    ("experts on layer 1 only (Llama 4's pattern)", LLAMA, [{}, MOE, {}], ("fused", "gqa")),
    ("q/k norms on layer 0, sinks on layer 1", LLAMA, [{"qk_norm": "rms"}, {"sinks": True}, {}],
     ("fused", "decomposed")),
    ("norms after attention and MLP only (EXAONE 4), and a q/k norm over the whole projection (OLMo 3)", LLAMA,
     [{"residual": "post", "norms": ["norm2", "norm4"]}, {"qk_norm": "rms", "qk_norm_over": "projection"}, {}],
     ("fused", "gqa", "decomposed")),
    # Gemma 4's pattern: local layers of head_dim 8, a global one of 2 heads of 16 with proportional RoPE (a quarter
    # of its pairs real, the rest at frequency 0, rotate-half over all 16)
    ("a global layer of its own head_dim with proportional RoPE (Gemma 4's pattern)", LLAMA,
     [LOCAL, {"position": {"num_heads": 2, "num_kv_heads": 1, "head_dim": 16, "theta": 1e6, "scaling": "proportional",
                           "scaling_params": {"partial_rotary_factor": 0.25}}}, LOCAL], ("fused", "gqa", "decomposed")),
    # a query scale on one layer (Ministral 3's formula; Llama 4's every 4th layer), its steps at 16, 32, ...
    ("a query scale on layer 1 only", LLAMA,
     [{}, {"query_scale": {"kind": "log_floor", "beta": 0.5, "original_max_position_embeddings": 16}}, {}],
     ("fused", "gqa", "tensorrt")),
    # Gemma 4's value pieces: a weightless RMSNorm of each value head (the same weights without it fail the truth),
    # and values read off the key projection (no v_proj) beside the residual stream times a learned layer_scalar
    ("a weightless value norm on layers 0 and 2 (Gemma 4's v_norm)", LLAMA,
     [{"v_norm": True}, {}, {"v_norm": True}], ("fused", "gqa", "decomposed")),
    ("keys as values on layer 1, a layer scalar on layer 2 (Gemma 4's)", LLAMA,
     [{}, {"k_eq_v": True}, {"layer_scale": True}], ("fused", "gqa")),
]  # fmt: skip
PARAMS = [(label, config, layers, graph) for label, config, layers, forms in CASES for graph in forms]


def _layers(layers: list[Any], position: Mapping[str, Any]) -> list[Any]:
    """The layers with each "position" table of changes applied to the model's ``position``."""
    changed = lambda layer: isinstance(layer, dict) and isinstance(layer.get("position"), dict)  # noqa: E731
    return [{**layer, "position": {**position, **layer["position"]}} if changed(layer) else layer for layer in layers]


def _mixed(config: dict[str, Any], layers: list[Any], graph: str = "fused") -> tuple[DecoderSpec, dict[str, Any]]:
    spec, used = resolve(DecoderRequest(config=config, graph=graph, name="layers"))
    return spec.replace(layers=_layers(layers, spec.position)), used


def _failed(spec: DecoderSpec, model: onnx.ModelProto, weights: Any, folder: Path) -> set[str]:
    save_model(model, folder)
    runner = OrtRunner(folder / "model.onnx", providers=["CPUExecutionProvider"])
    results = [ScenarioRecord(r) for r in verify_decoder(runner.infer, spec, weights, position_pieces(spec))]
    return {r.name for r in results if not r.passed}


@pytest.mark.parametrize(("label", "config", "layers", "graph"), PARAMS, ids=[f"{p[0]}-{p[3]}" for p in PARAMS])
def test_mixed_layers_pass_their_float64_truth(
    label: str, config: dict[str, Any], layers: list[Any], graph: str, tmp_path: Path
) -> None:
    spec, _ = _mixed(config, layers, graph)
    assert not spec.uniform, label
    weights = seeded_weights(spec)
    model = build_decoder_graph(spec, weights, "seeded")
    assert _failed(spec, model, weights, tmp_path / "mixed") == set(), label
    # The same weights with every layer the default one: the truth of the layers tells them apart (where the
    # default layers hold the same weights; a layer of another shape is told apart by its weights already).
    same = {layer.geometry for layer in spec.layers} == {spec.default.geometry}
    if same and expected(spec) == expected(spec.replace(layers=())):
        uniform = build_decoder_graph(spec.replace(layers=()), weights, "seeded")
        assert _failed(spec, uniform, weights, tmp_path / "uniform"), f"{label}: the layers changed nothing"
    # Each layer calls its own piece or none; a table is stored once per distinct position spec.
    piece = "/rope/" if spec.position["encoding"] == "rope" else "/bias/"
    calling = {n.name.split("/")[0] for n in model.graph.node if piece in n.name}
    assert calling == {f"layers.{i}" for i, layer in enumerate(spec.layers) if layer.position is not None}, label
    pieces = position_pieces(spec)
    assert len({id(p) for p in pieces if p is not None}) == len(spec.position_specs())
    if piece == "/rope/":
        tables = [t.name for t in model.graph.initializer if t.name.endswith("cos_table")]
        assert len(tables) == len(spec.position_specs()), tables
    # The model embeds the spec: a mixed one reads back as itself.
    meta = {p.key: p.value for p in model.metadata_props}
    assert DecoderSpec.from_dict(json.loads(meta["ropeexport.spec"])) == spec


def test_transformers_reference_is_skipped_with_the_reason(tmp_path: Path) -> None:
    spec, used = _mixed(LLAMA, CASES[0][2])
    weights = seeded_weights(spec)
    save_model(build_decoder_graph(spec, weights, "seeded"), tmp_path)
    report = DecoderReport(run_scenarios(spec, used, weights, None, tmp_path / "model.onnx", True, None))
    assert report.passed
    assert report.references.transformers == (
        "skipped: transformers' llama config cannot express per-layer position (layers 1 differ from the model's "
        "default layer)"
    )
    assert report.spec["layers"] == [{}, {"position": None}, {}]


SMOLLM3 = {**LLAMA, "model_type": "smollm3", "num_hidden_layers": 4, "pad_token_id": 0, "no_rope_layers": [1, 0, 1, 0],
           "use_sliding_window": True, "sliding_window": 6,
           "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2}  # fmt: skip
QWEN2_4X = {**LLAMA, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}
WINDOW = {"attention": "sliding", "window": 6}
# Qwen3-MoE: layers 1 and 3 sparse (decoder_sparse_step 2), 2 dense by mlp_only_layers, the router not renormalized
QWEN3_MOE = {**LLAMA, "model_type": "qwen3_moe", "num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2,
             "moe_intermediate_size": 24, "decoder_sparse_step": 2, "mlp_only_layers": [2]}  # fmt: skip
DENSE = {"mlp": "gated", "intermediate_size": 48, "num_experts": 0, "experts_per_token": 0, "router": ""}
# (label, config, the layers the config implies, as to_dict writes them)
FROM_CONFIG = [
    ("smollm3: no RoPE on layers 1 and 3, windows on 2 and 3", SMOLLM3,
     [{}, {"position": None}, WINDOW, {"position": None, **WINDOW}]),
    ("qwen2 4.x keys: windows from max_window_layers on", QWEN2_4X,
     [{}, {**WINDOW, "window": 5}, {**WINDOW, "window": 5}]),
    ("qwen2 with windows off: every layer attends fully", {**QWEN2_4X, "use_sliding_window": False}, ()),
    ("qwen3_moe: dense layers 0 and 2 among sparse ones, softmax_topk", QWEN3_MOE,
     [DENSE, {"router": "softmax_topk"}, DENSE, {"router": "softmax_topk"}]),
]  # fmt: skip


@pytest.mark.parametrize(("config", "layers"), [c[1:] for c in FROM_CONFIG], ids=[c[0] for c in FROM_CONFIG])
def test_a_configs_layers_are_built_and_judged(config: dict[str, Any], layers: list[Any], tmp_path: Path) -> None:
    spec, used = resolve(DecoderRequest(config=config, graph="fused", name="layers"))
    assert spec.to_dict().get("layers", ()) == layers
    weights = seeded_weights(spec)
    save_model(build_decoder_graph(spec, weights, "seeded"), tmp_path)
    report = DecoderReport(run_scenarios(spec, used, weights, None, tmp_path / "model.onnx", True, None))
    assert report.passed, [s.name for s in report.scenarios if not s.passed]
    # transformers reads the same layers from the same config: it stands as the reference, and agrees
    assert report.references.transformers.startswith("transformers"), report.references.data
    near = {s.name: s.summary.worst_rel_transformers for s in report.scenarios if s.summary.positions[1] < 4096}
    assert max(near.values()) <= 1e-4, near
    if layers:
        plain: Any = ()  # every layer the default one; where that needs other weights (dense layers made sparse),
        if expected(spec.replace(layers=())) != expected(spec):  # the same layers with the default router
            plain = [{k: v for k, v in layer.items() if not (k == "router" and v)} for layer in layers]
        uniform = build_decoder_graph(spec.replace(layers=plain), weights, "seeded")
        assert _failed(spec, uniform, weights, tmp_path / "uniform"), "the config's layers changed nothing"


def test_weights_follow_each_layer() -> None:
    spec, _ = resolve(DecoderRequest(config=LLAMA))
    mixed, _ = _mixed(LLAMA, CASES[0][2])
    assert expected(mixed) == expected(spec)  # a layer without positions keeps its projections


# (label, the spec's layers, to_dict's layers)
ROUND_TRIPS = [
    ("no positions on layer 1", [{}, {"position": None}, {}], [{}, {"position": None}, {}]),
    ("one sliding layer", [None, SLIDING, {}], [{}, SLIDING, {}]),
    ("another theta", [{}, {}, {"position": {"theta": 5e5}}], "theta"),
    ("LayerSpec objects", [LayerSpec(ATTENTION, MLP), LayerSpec(replace(ATTENTION, mask="sliding", window=2), MLP),
                           LayerSpec(ATTENTION, MLP)],
     [{"position": None}, {"position": None, "attention": "sliding", "window": 2}, {"position": None}]),
    ("another head_dim (Gemma 4's global layers)", [{}, {"position": {"head_dim": 16}}, {}], "head_dim"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "layers", "stored"), ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS])
def test_a_mixed_spec_round_trips(label: str, layers: list[Any], stored: list[dict[str, Any]]) -> None:
    spec, _ = _mixed(LLAMA, layers)
    data = spec.to_dict()
    if stored == "theta":  # a changed position is written whole
        assert data["layers"][:2] == [{}, {}] and data["layers"][2]["position"] == {**spec.position, "theta": 5e5}
    elif stored == "head_dim":  # the layer's attention takes its encoding's head_dim, both written
        assert data["layers"][1]["head_dim"] == 16 and data["layers"][1]["position"]["head_dim"] == 16
    else:
        assert data["layers"] == stored, label
    assert list(data)[-1] == "layers"  # after every field a uniform spec has, in their order
    again = DecoderSpec.from_dict(json.loads(json.dumps(data)))
    assert again == spec and again.digest_text() == spec.digest_text()
    record = json.loads(json.dumps({"spec": data, "sources": dict(spec.sources)}, indent=2, default=list))
    assert rebuild_spec(record) == spec  # decoder.json, as verify reads it


def test_a_uniform_spec_serializes_as_before() -> None:
    spec, _ = resolve(DecoderRequest(config=LLAMA))
    before = ["name", "model_type", "num_layers", "hidden_size", "vocab_size", "intermediate_size", "norm_eps", "act",
              "residual", "position", "qkv_bias", "o_bias", "mlp_bias", "tie_embeddings", "sliding_window", "dtype",
              "graph"]  # fmt: skip
    assert list(spec.to_dict()) == before
    assert spec.uniform and spec.layers == (spec.default_layer(),) * 3
    for said in ([{}, None, {}], [spec.default_layer()] * 3, [dict(spec.default_layer().to_dict())] * 3):
        assert spec.replace(layers=said).digest_text() == spec.digest_text()
    windowed = spec.replace(sliding_window=5)  # default layers follow the default
    assert windowed.uniform and windowed.layer(2).window == 5 and "layers" not in windowed.to_dict()
    mixed, _ = _mixed(LLAMA, [{}, {"position": None}, {}])
    moved = mixed.replace(sliding_window=5)
    assert [layer.window for layer in moved.layers] == [5, 0, 5]  # the layer said otherwise keeps its own


def _bad_position(**changes: Any) -> list[dict[str, Any]]:
    return [{}, {"position": changes}, {}]


# (the layers, the field the SpecError names)
REFUSED = [
    ([{}, {"window": 3}, {}], "layers[1].window"),
    ([{}, {}, {"attention": "sliding"}], "layers[2].window"),
    ([{}, {}, {"attention": "local", "window": 2}], "layers[2].attention"),
    ([{"norms": ["norm1"]}, {}, {}], "layers[0].norms"),
    ([{"residual": "post"}, {}, {}], "layers[0].norms"),  # the post residual's norms are norm2 and norm4
    ([{}, {"qk_norm": "rms", "qk_norm_over": "rows"}, {}], "layers[1].qk_norm_over"),
    ([{}, {}, {"heads": 2}], "layers[2].heads"),
    ([{}, {}], "layers"),
    ([{}, 7, {}], "layers[1]"),
    ([{}, {"num_heads": 2, "position": {"num_heads": 4}}, {}], "layers[1].position.num_heads"),
    ([{}, {"head_dim": 16, "position": {"head_dim": 4}}, {}], "layers[1].position.head_dim"),
    ([{}, {"num_heads": 3}, {}], "layers[1].num_kv_heads"),
    ([{}, {"attention": "chunked"}, {}], "layers[1].window"),  # a chunked layer's chunk (Llama 4's)
    ([{}, {"kv_from": 2}, {}], "layers[1].kv_from"),  # keys and values read from a later layer
    ([{}, {"kv_from": 0}, {"kv_from": 1}], "layers[2].kv_from"),  # from a layer that reads another's itself
    ([{}, {"kv_from": 0, "head_dim": 16, "position": None}, {}], "layers[1].kv_from"),  # of another width
    ([{}, {"mlp": "moe"}, {}], "layers[1].num_experts"),
    # described, not built: each named
    ([{}, {"attn_gate": True}, {}], "layers[1].attn_gate"),
    ([{}, {}, {"query_scale": {"kind": "log_floor", "beta": 0.1, "original_max_position_embeddings": 16.5}}],
     "layers[2].query_scale.original_max_position_embeddings"),
    ([{}, {}, {"query_scale": {"kind": "temperature", "floor_scale": 8192}}], "layers[2].query_scale.attn_scale"),
    # latent attention is built full and causal only (DeepSeek's): a window beside it is named
    ([{}, {"attention_kind": "latent", "num_kv_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
           "v_head_dim": 8, "attention": "sliding", "window": 4}, {}], "layers[1].attention_kind"),
    # nor beside Gemma 4's value norm or keys as values, nor biases: the latent component reads none of them
    *(([{}, {"attention_kind": "latent", "num_kv_heads": 4, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
             "v_head_dim": 8, field: True}, {}], "layers[1].attention_kind")
      for field in ("v_norm", "k_eq_v", "qkv_bias", "o_bias")),
    # a latent layer's widths (DeepSeek's MLA), checked on construction
    ([{}, {"attention_kind": "latent", "num_kv_heads": 4}, {}], "layers[1].kv_lora_rank"),
    ([{}, {"attention_kind": "latent", "kv_lora_rank": 16, "v_head_dim": 8}, {}], "layers[1].num_kv_heads"),
    ([{}, {"kv_lora_rank": 16}, {}], "layers[1].kv_lora_rank"),  # a standard layer has no latent
    ([{}, {"v_head_dim": 8}, {}], "layers[1].v_head_dim"),
    (_bad_position(max_positions=128), "layers[1].position.max_positions"),
    (_bad_position(theta="x"), "layers[1].position.theta"),
    (_bad_position(scaling="dynamic", scaling_params={"factor": 2.0, "original_max_position_embeddings": 128}),
     "layers[1].position.scaling"),
]


@pytest.mark.parametrize(("layers", "field"), REFUSED, ids=[r[1] for r in REFUSED])
def test_a_wrong_layer_field_is_named(layers: Any, field: str) -> None:
    spec, _ = resolve(DecoderRequest(config=LLAMA))
    with pytest.raises(SpecError) as error:
        spec.replace(layers=_layers(layers, spec.position))
    assert error.value.field == field, str(error.value)


def test_the_docs_example_runs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "decoders.md").read_text()
    section = page.split("\n## A model is a list of layers\n", 1)[1].split("\n## ", 1)[0]
    (code,) = [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", section, re.S)]
    scope: dict[str, Any] = {"__name__": "__docs__"}
    exec(compile(code, "decoders.md example", "exec"), scope)
    assert [layer.window for layer in scope["mixed"].layers] == [512, 0, 0]
    assert len([t for t in scope["model"].graph.initializer if t.name.endswith("cos_table")]) == 2


# (tiny architecture, its layer 0's q/k norm, the offset that layer's norm must take): Llama 4's weightless L2 norm is
# x / sqrt(mean(x^2) + eps) whatever the model's own RMSNorm; Gemma's 1 + weight over its ones would be twice that
L2_NORMS = [("gemma3", "l2", 0.0), ("gemma3", "rms", 1.0), ("olmo3", "l2", 0.0), ("llama4", "l2", 0.0)]


@pytest.mark.parametrize(("name", "qk_norm", "offset"), L2_NORMS, ids=[f"{n}-{q}" for n, q, _ in L2_NORMS])
def test_the_l2_qk_norm_is_weightless_in_every_architecture(name: str, qk_norm: str, offset: float) -> None:
    model_type, config = CONFIGS[name]
    spec = from_config({**config, "model_type": model_type}, name)
    spec = spec.replace(layers=[{"qk_norm": qk_norm}] + [None] * (spec.num_layers - 1))
    attention = attention_spec(spec, 0, None)
    assert attention.qk_norm is not None and attention.qk_norm.offset == offset
    assert attention.qk_weights == (qk_norm == "rms")
    if qk_norm == "l2":  # the twin's norm of a head over its ones: the L2 norm itself
        x = np.random.default_rng(0).standard_normal((2, 3, attention.head_dim))
        want = x / np.sqrt((x**2).mean(-1, keepdims=True) + spec.norm_eps)
        np.testing.assert_allclose(norm64(attention.qk_norm, x, np.ones(attention.head_dim)), want, rtol=1e-12)
