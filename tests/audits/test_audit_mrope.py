"""audit and graft of multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL), position_ids [3, batch, seq].

ropeexport's own Qwen-VL text decoders audit exact in each site form they build (the fused and gqa forms'
RotaryEmbedding per token, the decomposed form's tables one axis gathers each), the axis of every frequency pair
read against the config's ``mrope_section`` and interleaving. Planted into those decoders, each fault is named as
what it is, with its effect as users run the model (its own cache, an image grid in the prompt, to the far end of
max_positions): sections in another order, Qwen3-VL's interleaved pairs read as Qwen2-VL's contiguous blocks, a
model taking one-axis positions, float32 tables, partial rotary dropped (maxtext #4616). graft puts exact rows in and
its proof runs calls with an image grid in them against the float64 recompute, the original's error beside.
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.graph.onnx_io import save_model


def _decoder(folder: Path, ckpt: Path, graph: str, dtype: str = "fp32", plant: Any = None) -> Path:
    """The decoder's model.onnx as ropeexport builds it (no scenarios run), its encoding changed by ``plant``: position
    fields (a dict), or ``"float32"``: its tables recomputed with float32 angles.
    """  # noqa: D205
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph, dtype=dtype))
    if isinstance(plant, dict):
        spec = spec.replace(position={**spec.default.position, **plant})  # type: ignore[dict-item]
    folder.mkdir(parents=True, exist_ok=True)
    save_model(build_decoder_graph(spec, load_checkpoint(spec, ckpt), str(ckpt)), folder)
    model = folder / "model.onnx"
    if plant == "float32":  # the angle position x frequency in float32, as torch computes it
        proto = onnx.load(str(model))
        for table in proto.graph.initializer:
            if table.name.endswith(("cos_table", "sin_table")):
                rows, width = table.dims
                exponent = np.arange(0, 2 * width, 2, dtype=np.float32) / np.float32(2 * width)
                inv = (np.float32(1) / np.float32(10000.0) ** exponent).astype(np.float32)
                angles = np.arange(rows, dtype=np.float32)[:, None] * inv[None]
                values = np.cos(angles) if table.name.endswith("cos_table") else np.sin(angles)
                table.CopyFrom(numpy_helper.from_array(values.astype(np.float32), table.name))
        onnx.save(proto, str(model))
    return model


# (checkpoint, graph form, dtype): each site form the Qwen-VL decoders build, chunked and interleaved
OWN = [("qwen2_5_vl", "decomposed", "fp32"), ("qwen2_5_vl", "gqa", "fp32"), ("qwen3_vl", "fused", "fp16")]


@pytest.mark.parametrize(("name", "graph", "dtype"), OWN, ids=["-".join(c) for c in OWN])
def test_ropeexports_own_qwen_vl_decoders_audit_exact_pair_by_pair(
    name: str, graph: str, dtype: str, tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    ckpt = tiny_checkpoint(name)
    model = _decoder(tmp_path, ckpt, graph, dtype)
    result = rx.audit(model, ckpt / "config.json", effects=False)
    assert result.verdict == "exact", [f["text"] for s in result.sites for f in s["findings"]]
    spec = rx.from_hf_config(ckpt / "config.json")[0]
    per_token = [s for s in result.sites if not s["table"]]
    assert all(s["pair_axes"] == list(spec.pair_axes()) for s in per_token), [s["pair_axes"] for s in per_token]
    assert per_token or graph == "decomposed"  # the decomposed form's sites are its per-axis tables
    assert sorted({i for s in result.sites for i in s["layers"]}) == [0, 1]


def test_an_fp16_decomposed_decoders_optimized_graph_is_read_through_the_cast_onnx_runtime_inserts(
    tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    """ONNX Runtime's CPU provider has no float16 Where: the decomposed form's Where per axis after its three lookups
    makes its optimizer cast each float16 table to float32 where it is stored, the lookups reading the cast. The
    audit of that graph reads through the Cast (before: no rotary site in the optimized graph, exit 2), the tables
    at float16's bound, as stored. (A Llama fp16 decomposed graph keeps its lookups float16, the Cast after them.)
    """  # noqa: D205
    from ropeexport.audits.optimizer import optimize

    ckpt = tiny_checkpoint("qwen3_vl")
    model = _decoder(tmp_path, ckpt, "decomposed", "fp16")
    (tmp_path / "optimized").mkdir()
    saved = onnx.load(str(optimize(model, "all", tmp_path / "optimized")))
    tables = {t.name for t in saved.graph.initializer if t.name.endswith(("cos_table", "sin_table"))}
    casts = {o for n in saved.graph.node if n.op_type == "Cast" and n.input[0] in tables for o in n.output}
    assert tables and casts & {n.input[0] for n in saved.graph.node if n.op_type == "Gather"}  # the case it names
    result = rx.audit(model, ckpt / "config.json", optimized="all", effects=False)
    record = result.optimized
    assert record is not None and record["verdict"] == "exact" and not record["changed"], record
    read = {i for s in record["sites"] for i in s["layers"]}
    assert read == {i for s in result.sites for i in s["layers"]} == {0, 1}  # every layer read in what runs
    assert {p["tolerance"] for s in record["sites"] for p in s["probes"]} == {
        p["tolerance"] for s in result.sites for p in s["probes"]}  # float16's bound, not float32's  # fmt: skip


PARTIAL = {"encoding": "rope", "head_dim": 16, "rotary_dim": 8, "num_heads": 4, "num_kv_heads": 2,
           "max_positions": 256, "mrope_section": [2, 1, 1]}  # fmt: skip
# (label, checkpoint, form, plant, --spec fields instead of the config, finding, its level, words of its text)
PLANTED = [
    ("sections swapped", "qwen2_5_vl", "fused", {"mrope_section": [3, 2, 3]}, None, "mrope-sections-swapped",
     "wrong", "pairs split by mrope_section [3, 2, 3] where the config says [2, 3, 3]"),
    # the decomposed form picks each pair's axis after its tables (a Where per axis): read there, not graftable
    ("sections swapped, picked after the tables", "qwen2_5_vl", "decomposed", {"mrope_section": [3, 2, 3]}, None,
     "mrope-sections-swapped", "unmeasured", "pairs split by mrope_section [3, 2, 3]"),
    ("Qwen3-VL exported as Qwen2-VL", "qwen3_vl", "gqa", {"mrope_interleaved": False}, None, "mrope-interleaving",
     "wrong", "read as contiguous mrope_section blocks [3, 3, 2] (Qwen2-VL's) where the config interleaves"),
    ("one-axis positions", "qwen2_5_vl", "fused", {"mrope_section": [], "mrope_interleaved": False}, None,
     "mrope-positions-1d", "unmeasured", "computed from position_ids [batch, seq], one axis"),
    ("float32 tables", "qwen2_5_vl", "fused", "float32", None, "float32-angles", "harmless", "float32 angles"),
    ("partial rotary dropped", "qwen2_5_vl", "fused", None, PARTIAL, "partial-rotary-ignored", "unmeasured",
     "partial rotary 0.5 but all 16 channels rotated"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "name", "graph", "plant", "fields", "expected", "level", "words"), PLANTED,
                         ids=[c[0] for c in PLANTED])  # fmt: skip
def test_each_planted_mrope_fault_is_named_with_its_effect(
    label: str, name: str, graph: str, plant: Any, fields: dict[str, Any] | None, expected: str, level: str,
    words: str, tiny_checkpoint: Callable[..., Path], tmp_path: Path,
) -> None:  # fmt: skip
    ckpt = tiny_checkpoint(name)
    model = _decoder(tmp_path / "model", ckpt, graph, plant=plant)
    given: dict[str, Any] = {"hf_config": ckpt / "config.json"}
    if fields is not None:
        (tmp_path / "spec.json").write_text(json.dumps(fields))
        given = {"spec_file": tmp_path / "spec.json"}
    result = rx.audit(model, **given)
    assert result.verdict == "findings" and not result.gate["passed"] or level == "harmless", label
    named = {f["name"]: f for f in result.findings}
    assert set(named) == {expected}, (label, [f["text"] for f in result.findings])
    found = named[expected]
    assert words in found["text"], found["text"]
    assert found["severity"]["level"] == level, (label, found["severity"], found["effect"])
    assert sorted({i for s in found["sites"] for i in result.sites[s]["layers"]}) == [0, 1]
    effect = found["effect"]
    if level == "unmeasured":  # graft cannot repair it: said, never measured as zero
        assert "not_measured" in effect and "relative" not in effect, effect
        return
    assert "[3, batch, seq]" in effect["how"] and "image grid" in effect["how"], effect["how"]
    assert effect["places"][-1]["name"].startswith("the far end"), effect["places"][-1]
    if level == "wrong":  # the image grid's positions show it
        assert effect["relative"] > 1e-2
    else:
        assert 0.0 < effect["relative"] <= 1e-4


# (label, checkpoint, form, plant, trust): what values repair, proven on calls with an image grid
GRAFTED = [
    ("float32 tables", "qwen2_5_vl", "decomposed", "float32", "model"),
    ("sections swapped", "qwen2_5_vl", "fused", {"mrope_section": [3, 2, 3]}, "config"),
]


@pytest.mark.parametrize(("label", "name", "graph", "plant", "trust"), GRAFTED, ids=[c[0] for c in GRAFTED])
def test_graft_repairs_an_mrope_model_and_proves_it_on_image_grid_calls(
    label: str, name: str, graph: str, plant: Any, trust: str, tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    ckpt = tiny_checkpoint(name)
    model = _decoder(tmp_path / "model", ckpt, graph, plant=plant)
    out = tmp_path / "grafted.onnx"
    result = rx.graft(model, ckpt / "config.json", out, trust=trust, checkpoint=ckpt).to_dict()
    assert result["before"] == "findings" and result["after"]["verdict"] == "exact", label
    assert result["verdict"] == "proven" and result["decoder"]["truth"]["kind"] == "oracle", result["text"]
    calls = result["decoder"]["calls"]
    assert calls[-1]["positions"][1] == 255  # the far end of max_positions
    grafted = max(c["models"]["grafted"]["rel"] for c in calls)
    original = max(c["models"]["original"]["rel"] for c in calls)
    assert grafted < 1e-5, calls
    if trust == "config":  # the sections swapped: the image grid in each call shows it, graft repairs it
        assert original > 1e-2 and not result["decoder"]["passed"]["original"], calls
    else:  # float32 angles at 256 positions: within the bound either way; the tables replaced change the logits
        assert original < 1e-4 and result["replaced"], calls
        assert 0.0 < result["decoder"]["use"]["relative"] < 1e-4, result["decoder"]["use"]
    for site in result["after"]["sites"]:
        assert site["pair_axes"] in (None, [0, 0, 1, 1, 1, 2, 2, 2]), site["pair_axes"]


# (label, the operator's mrope_section and mrope_layout, the spec's section and interleaving, finding or None): what
# com.microsoft MRotaryEmbedding (onnxruntime-genai 0.18's Qwen-VL export) does, read by running it alone
OPERATOR = [
    ("Qwen2.5-VL, contiguous sections", [2, 3, 3], 0, [2, 3, 3], False, None),
    ("Qwen3-VL, interleaved", [3, 3, 2], 1, [3, 3, 2], True, None),
    ("sections swapped", [3, 2, 3], 0, [2, 3, 3], False, "mrope-sections-swapped"),
    ("Qwen3-VL exported as Qwen2.5-VL", [3, 3, 2], 0, [3, 3, 2], True, "mrope-interleaving"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "section", "layout", "config", "interleaved", "expected"), OPERATOR,
                         ids=[c[0] for c in OPERATOR])  # fmt: skip
def test_an_operator_with_its_own_mrope_tables_is_read_pair_by_pair(
    label: str, section: list[int], layout: int, config: list[int], interleaved: bool, expected: str | None,
    tmp_path: Path,
) -> None:  # fmt: skip
    """An MRotaryEmbedding's tables are a site (rows 0 .. L - 1 against the spec's, exact here: float64 rounded once)
    and the axis of each of its pairs is read by running the operator with one axis counting at a time, not from its
    attributes' names: the config's sections and interleaving read right, any other named as what it is.
    """  # noqa: D205
    from onnx import TensorProto, helper

    rows, width = 64, 8
    inv = 10000.0 ** (-np.arange(width) / width)
    angles = np.outer(np.arange(rows), inv)
    rotate = helper.make_node("MRotaryEmbedding", ["query", "position_ids", "cos_cache", "sin_cache"], ["rotated"],
                              name="/model/layers.0/attn/q_rotary/MRotaryEmbedding", domain="com.microsoft",
                              interleaved=0, rotary_embedding_dim=0, num_heads=4, mrope_section=section,
                              mrope_layout=layout)  # fmt: skip
    tables = [numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos_cache"),
              numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin_cache")]  # fmt: skip
    graph = helper.make_graph([rotate], "g", [helper.make_tensor_value_info("query", TensorProto.FLOAT, [1, "s", 64]),
                                              helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                                            [3, 1, "s"])],
                              [helper.make_tensor_value_info("rotated", TensorProto.FLOAT, None)], tables)  # fmt: skip
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets, ir_version=10), str(tmp_path / "model.onnx"))
    fields = {**PARTIAL, "rotary_dim": 16, "mrope_section": config, "mrope_interleaved": interleaved,
              "max_positions": rows}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(fields))
    result = rx.audit(tmp_path / "model.onnx", spec_file=tmp_path / "spec.json", effects=False)
    (site,) = result.sites
    assert site["kind"] == "MRotaryEmbedding (com.microsoft)" and site["layers"] == [0], site
    spec = rx.spec(**{k: v for k, v in fields.items() if k != "encoding"})
    if expected is None:
        assert result.verdict == "exact" and site["pair_axes"] == list(spec.pair_axes()), (label, site)
        return
    assert [f["name"] for f in result.findings] == [expected], (label, [f["text"] for f in result.findings])
    assert site["pair_axes"] != list(spec.pair_axes()), site["pair_axes"]
