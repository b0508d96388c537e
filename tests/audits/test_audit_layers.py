"""The per-layer audit: which layer reads a site (a case table of the names real exporters write), faults planted per
layer in ropeexport's own decoders, each named exactly with its effect on the logits, and grafted and proven.

A planted model is ropeexport's decoder of a checkpoint whose config says something else than the config audited
against (SmolLM3 built with every layer rotated, audited against its no-RoPE layers; Qwen3 built with YaRN truncated,
audited against truncate false), or the decoder itself rewired (Gemma 3's sliding layers reading the global layers'
table; its sliding table computed with float32 angles, what peers write). The peers' per-layer bugs of issue 27 are
rows of the same table, each naming its peer (``peer``; ``tools/planted_peer_bugs.py`` renders them as
tools/figures/planted-peer-bugs.md); windows on the wrong layers are read from the masks (``audits.windows``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.audits import windows
from ropeexport.audits.layers import layer_of
from ropeexport.audits.model import load_model as rx_load
from ropeexport.cli import main
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.spec import FORMS
from ropeexport.graph.onnx_io import save_model
from tests.audits.test_audit_own_decoders import _decoder

DYNAMO = "['', 'inner', 'inner.model', 'inner.model.layers.2', 'inner.model.layers.2.self_attn', 'mul_1008']"
# (node name, metadata, layer): names as each exporter writes them
NAMES = [
    ("layers.3/rope/query_out_node", {}, 3),  # ropeexport's decoders
    ("/model/layers.11/attn/GroupQueryAttention", {}, 11),  # onnxruntime-genai's builder
    ("/inner/model/layers.0/self_attn/Mul_2", {}, 0),  # torch.onnx.export (TorchScript)
    ("node_mul_1008", {"pkg.torch.onnx.name_scopes": DYNAMO}, 2),  # torch.onnx.export (dynamo): the module path
    ("node_Mul_5", {"namespace": ": Flat/inner.model.layers.7: Gemma3DecoderLayer/inner.model.layers.7.self_attn"}, 7),
    ("/transformer/h.4/attn/Mul", {}, 4),  # GPT-J / GPT-2 style module names
    ("/model/rotary_emb/Cos", {}, None),  # the model's own rotary module: no layer
    ("node_Cos_3", {"pkg.torch.onnx.name_scopes": "['', 'inner', 'inner.model', 'inner.model.rotary_emb']"}, None),
    ("/model/layers.1/mlp/experts.3/Mul", {}, 1),  # an expert's index is no layer
    ("RotaryEmbedding", {}, None),
]


@pytest.mark.parametrize(("name", "props", "layer"), NAMES, ids=[n[0] for n in NAMES])
def test_a_readers_layer_is_read_from_its_name_or_module_path(name: str, props: dict[str, str],
                                                              layer: int | None) -> None:  # fmt: skip
    assert layer_of(name, props) == layer


def _config(ckpt: Path, folder: Path, change: dict[str, Any]) -> Path:
    """A copy of the checkpoint whose config.json has ``change`` (a key set to None removed; ``rope_parameters``
    entries merged).
    """  # noqa: D205
    shutil.copytree(ckpt, folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in change.items():
        if key == "rope_parameters":
            config[key] = config[key] | value
        elif value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _rewire(model: Path) -> None:
    """Gemma 3's sliding layers read the global layers' table (layer 2's)."""
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        node.input[:] = [n.replace("layers.0/", "layers.2/") if n in ("layers.0/rope/cos_table",
                                                                        "layers.0/rope/sin_table") else n
                         for n in node.input]  # fmt: skip
    onnx.save(proto, str(model))


def _one_table(model: Path) -> None:
    """Every layer's RotaryEmbedding reads layer 2's table at layer 2's rows: one site read by both layer types, as a
    model with one table for every layer is.
    """  # noqa: D205
    proto = onnx.load(str(model))
    rotations = [n for n in proto.graph.node if n.op_type == "RotaryEmbedding"]
    source = next(n for n in rotations if n.name.startswith("layers.2/"))
    for node in rotations:
        node.input[1:4] = source.input[1:4]
    onnx.save(proto, str(model))


def _float32_angles(model: Path) -> None:
    """Gemma 3's sliding table (theta 10000) computed with float32 angles, as the peers compute theirs."""
    proto = onnx.load(str(model))
    for tensor in proto.graph.initializer:
        if tensor.name in ("layers.0/rope/cos_table", "layers.0/rope/sin_table"):
            rows, width = tensor.dims
            inv = (10000.0 ** (-np.arange(width, dtype=np.float64) * 2 / (2 * width))).astype(np.float32)
            angles = np.outer(np.arange(rows, dtype=np.float32), inv)  # float32, as torch computes them
            table = np.cos(angles) if "cos" in tensor.name else np.sin(angles)
            tensor.CopyFrom(numpy_helper.from_array(table.astype(np.float32), tensor.name))
    onnx.save(proto, str(model))


def _yarn_twice(model: Path) -> None:
    """Qwen3's YaRN x4 applied to its own output (TensorRT-LLM, PR #16378): each dimension's scale g (1/4 .. 1, the
    ramp's blend) squared, the attention factor multiplied in twice.
    """  # noqa: D205
    from ropeexport.families.rope.regimes import frequencies
    from tests.decoder.tiny import hf_config

    with tempfile.TemporaryDirectory() as folder:
        hf_config("qwen3-yarn").save_pretrained(folder)
        spec = rx.from_hf_config(Path(folder) / "config.json")[0]
    yarn, factor = frequencies(spec, spec.max_positions)
    base = frequencies(spec, spec.max_positions, "default")[0]
    inv = base * (yarn / base) ** 2
    proto = onnx.load(str(model))
    for tensor in proto.graph.initializer:
        if tensor.name in ("layers.0/rope/cos_table", "layers.0/rope/sin_table"):
            angles = np.outer(np.arange(tensor.dims[0], dtype=np.float64), inv)
            table = factor * factor * (np.cos(angles) if "cos" in tensor.name else np.sin(angles))
            tensor.CopyFrom(numpy_helper.from_array(table.astype(np.float32), tensor.name))
    onnx.save(proto, str(model))


def _pairs_interleaved(model: Path) -> None:
    """gpt-oss's rotate_half pairs read as interleaved pairs (TensorRT-LLM, PR #16378): every RotaryEmbedding's
    interleaved attribute set.
    """  # noqa: D205
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        name = {"RotaryEmbedding": "interleaved", "GroupQueryAttention": "rotary_interleaved"}.get(node.op_type)
        if name is not None:
            kept = [a for a in node.attribute if a.name != name]
            del node.attribute[:]
            node.attribute.extend([*kept, onnx.helper.make_attribute(name, 1)])
    onnx.save(proto, str(model))


@dataclass(frozen=True)
class LayerFault:
    """A decoder of ``name`` built from its config with ``built`` changed (or ``plant`` applied to the model), audited
    against its config with ``audited`` changed: the one finding ``finding`` with ``words``, its logit effect between
    ``effect`` (relative to the logit scale; None: not measured, with ``why``), and ``graft``: proven, or the refusal.
    """  # noqa: D205

    case: str
    name: str
    finding: str
    words: str
    effect: tuple[float, float] | None
    graft: str
    built: dict[str, Any] | None = None
    audited: dict[str, Any] | None = None
    plant: Callable[[Path], None] | None = None
    also: tuple[str, ...] = ()  # the findings found beside it at the same sites (the same effect)
    peer: str = ""  # the peer whose bug it is (the planted-bug table: tools/figures/planted-peer-bugs.md)


YARN_OFF = {"rope_parameters": {"truncate": False}}
LOCAL_X8 = {"rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4}}}
# Phi-4-mini's shape (partial rotary 0.75, LongRoPE): its short factors replaced by the long ones
LONG_ALWAYS = {"rope_parameters": {"short_factor": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}}
# The peers' bugs of issue 27 (``peer``) and the faults beside them: one row per bug. Not planted, and why: vLLM
# #27414 (the LongRoPE switch mid-generation) is a serving-time cache bug: the keys cached before the switch keep the
# short factors' rotation. A graph is a function of (tokens, cache, positions): fed a cache rotated one way it cannot
# tell, and every call's own tables are right, so no exported graph carries it (the audit checks each call length's
# tables; the decoder proof's calls each start from a cache rotated as the float64 recompute rotates it). Sliding
# windows on the wrong layers: a window is an attention mask, not a rotary site, read where the graph says it
# (``audits.windows``: ropeexport's mask constant, GroupQueryAttention's local_window_size; not dynamo's masks).
ALL_SLIDING = {"layer_types": ["sliding_attention"] * 4}
# SmolLM3's tiny checkpoint keeps transformers' 32768 positions: a rotation on a layer without RoPE is as wrong at
# position 255, and a prefill to 32768 (the effect) and a proof's call there made this row a minute of CI
SHORT = {"max_position_embeddings": 256}
FAULTS = [
    LayerFault("sliding-given-global", "gemma3", "other-layers-table",
               "sliding layers (0-1, 3-4) use the global layers' table: theta 1e+06 with linear x8; config: theta "
               "10000, unscaled", (0.05, 10.0), "proven", plant=_rewire, peer="llama.cpp #14367"),
    LayerFault("local-cache-global-x8", "gemma3", "other-layers-scaling",
               "sliding layers (0-1, 3-4) take the global layers' scaling: theta 10000 with linear x8; config: theta "
               "10000, unscaled", (0.05, 10.0), "proven", built=LOCAL_X8,
               peer="onnxruntime-genai builder (Gemma 3 local cache, read in its source)"),
    LayerFault("nope-layers-rotated", "smollm3-nope", "nope-rotated",
               "layers 1, 3 have no RoPE in the config but are rotated", (0.01, 10.0), "proven",
               built={"no_rope_layers": [1, 1, 1, 1], **SHORT}, audited=SHORT,
               peer="onnxruntime-genai builder (SmolLM3's no-RoPE layers, read in its source)"),
    LayerFault("rotated-layer-unrotated", "smollm3-nope", "not-rotated",
               "layer 2 is not rotated but the config rotates it", None, "it adds no rotation",
               built={"no_rope_layers": [1, 0, 0, 0]}),
    LayerFault("yarn-truncated-config-untruncated", "qwen3-yarn", "yarn-truncation",
               "YaRN correction range truncated (the config says truncate: false)", (1e-6, 10.0), "proven",
               audited=YARN_OFF),
    LayerFault("yarn-untruncated-config-truncated", "qwen3-yarn", "yarn-truncation",
               "YaRN correction range not truncated (the config says truncate: true)", (1e-6, 10.0), "proven",
               built=YARN_OFF, peer="onnxruntime-genai builder (YaRN never truncated, measured)"),
    LayerFault("yarn-applied-twice", "qwen3-yarn", "yarn-applied-twice",
               "YaRN applied twice: the frequencies are the config's YaRN x4 applied to its own output (x16 on the "
               "dimensions it interpolates fully, its ramp's blend squared)", (0.05, 10.0), "proven",
               plant=_yarn_twice, also=("attention-factor",), peer="TensorRT-LLM PR #16378 (YaRN applied twice)"),
    LayerFault("gpt-oss-pairs-interleaved", "gpt_oss", "pairing",
               "channels paired as interleaved pairs (2i, 2i + 1) (interleaved=1) where the config pairs halves "
               "(i, i + r/2: rotate_half)", (0.05, 10.0), "proven", plant=_pairs_interleaved,
               peer="TensorRT-LLM PR #16378 (gpt-oss paired wrongly)"),
    LayerFault("longrope-long-factors-always", "phi3-partial-longrope", "switch-on-wrong-length",
               "long factors used at L = 64 <= original_max_position_embeddings 64: the switch is on another length",
               (0.05, 10.0), "proven", built=LONG_ALWAYS,
               peer="llama.cpp #24823 (LongRoPE factor from the allocated context)"),
    LayerFault("windows-on-full-layers", "gemma2", "window",
               "layers 1, 3 attend to a window of 6 key slots where the config gives them every key (full_attention "
               "in layer_types)", None, "does not change an attention's window", built=ALL_SLIDING,
               peer="(issue 27's list: sliding windows on the wrong layers)"),
    LayerFault("partial-rotary-ignored", "qwen3", "partial-rotary-ignored",
               "partial rotary 0.5 but all 16 channels rotated (config: 8 of 16)", None,
               "does not change how many channels", audited={"partial_rotary_factor": 0.5},
               peer="(issue 27's list: partial rotary ignored)"),
    LayerFault("one-table-for-two-encodings", "gemma3", "shared-table",
               "one table read by layers the config gives different encodings (sliding layers (0-1, 3-4): theta "
               "10000, unscaled; global layers (2, 5): theta 1e+06 with linear x8): it matches the global layers'",
               (0.05, 10.0), "proven", plant=_one_table, also=("other-layers-table",)),
    LayerFault("float32-angles-sliding", "gemma3", "float32-angles", "float32 angles", (0.0, 1e-4), "proven",
               plant=_float32_angles),
]  # fmt: skip


def _planted(fault: LayerFault, tmp_path: Path, tiny_checkpoint: Any) -> tuple[Path, Path, Path]:
    """(model, the config audited against, the checkpoint its weights are in)."""
    ckpt = tiny_checkpoint(fault.name)
    built = _config(ckpt, tmp_path / "built" / fault.name, fault.built) if fault.built else ckpt
    audited = _config(ckpt, tmp_path / "audited" / fault.name, fault.audited) if fault.audited else ckpt
    (tmp_path / "model").mkdir(parents=True)
    model = _decoder(tmp_path / "model", built, "fused")
    if fault.plant is not None:
        fault.plant(model)
    return model, audited / "config.json", audited


@pytest.mark.parametrize("fault", FAULTS, ids=[f.case for f in FAULTS])
def test_a_planted_layer_fault_is_named_with_its_effect(fault: LayerFault, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    model, config, _ = _planted(fault, tmp_path, tiny_checkpoint)
    result = rx.audit(model, config)
    assert result.verdict == "findings"
    names = [f["name"] for f in result.findings]
    assert sorted(names) == sorted([fault.finding, *fault.also]), result.findings
    found = next(f for f in result.findings if f["name"] == fault.finding)
    assert fault.words in found["text"], found["text"]
    if fault.plant is _yarn_twice:  # the attention factor said as what it is too
        factor = next(f for f in result.findings if f["name"] == "attention-factor")["text"]
        assert "attention factor 1.29648 (its square: applied twice) where the config's yarn implies 1.13863" in factor
    effect = found["effect"]
    if fault.effect is None:
        assert "not_measured" in effect and "max_abs" not in effect, effect
    else:
        low, high = fault.effect
        assert low < effect["relative"] <= high, effect
        assert effect["positions"][1] == effect["position"] and effect["max_abs"] > 0
    assert f"| {found['text']} (`{found['name']}`)" in result.markdown()


@pytest.mark.parametrize("graph", FORMS)
def test_windows_are_read_per_layer_in_every_form(graph: str, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint("gpt_oss")  # layers 0, 2 slide over 6 slots, 1 and 3 see every key
    assert windows.observed(rx_load(_decoder(tmp_path, ckpt, graph))) == {0: 6, 1: 0, 2: 6, 3: 0}
    built = _config(ckpt, tmp_path / "swapped", {"layer_types": ["full_attention", "sliding_attention"] * 2})
    (tmp_path / "planted").mkdir()
    model = _decoder(tmp_path / "planted", built, graph)
    found = rx.audit(model, ckpt / "config.json", effects=False).findings
    assert sorted(f["text"] for f in found if f["name"] == "window") == [
        "layers 0, 2 attend to every key where the config gives them a window of 6 key slots (sliding_attention in "
        "layer_types)",
        "layers 1, 3 attend to a window of 6 key slots where the config gives them every key (full_attention in "
        "layer_types)"]  # fmt: skip
    if graph == "gqa":  # the builder's way: GroupQueryAttention's local_window_size, here 6 on every layer
        proto = onnx.load(str(model))
        for node in proto.graph.node:
            if node.op_type == "GroupQueryAttention":
                node.attribute.append(onnx.helper.make_attribute("local_window_size", 6))
        onnx.save(proto, str(model))
        assert windows.observed(rx_load(model)) == {0: 6, 1: 6, 2: 6, 3: 6}


@pytest.mark.parametrize("graph", ["fused", "gqa"])
def test_windows_are_read_through_int4_projections(graph: str, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    # an int4 projection (MatMulNBits) ends the walk down a mask as a MatMul does: read past it, layer 0's window
    # reached every later layer through the residual stream (gpt-oss's int4 experts: a MatMulNBits each in the fused
    # form, QMoE at block 16 in the gqa form)
    ckpt = tiny_checkpoint("gpt_oss")
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph, weight_format="int4", block_size=16))
    save_model(build_decoder_graph(spec, load_checkpoint(spec, ckpt), str(ckpt)), tmp_path)
    assert windows.observed(rx_load(tmp_path / "model.onnx")) == {0: 6, 1: 0, 2: 6, 3: 0}


def test_pairs_are_read_from_groupqueryattention_too_and_grafted(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The builder's form: GroupQueryAttention rotating (do_rotary) with rotary_interleaved set on a Llama config."""
    from tests.audits.planted import CASES, write_config

    case = next(c for c in CASES if c.name == "exact-gqa-llama3")
    config = write_config(tmp_path, case.config)
    model = case.build(tmp_path / "model.onnx", rx.from_hf_config(config)[0])
    _pairs_interleaved(model)
    (found,) = rx.audit(model, config).findings
    assert found["name"] == "pairing" and "(rotary_interleaved=1)" in found["text"], found
    out = tmp_path / "fixed.onnx"
    grafted = rx.graft(model, config, out, trust="config")
    assert grafted.proven and grafted.after is not None and grafted.after.verdict == "exact", grafted.to_dict()
    paired = {r["replaced_by"] for r in grafted.replaced if "node" in r}
    assert paired == {"rotary_interleaved=0 (the config's pairing)"}, grafted.replaced
    assert main(["graft", str(model), "--hf-config", str(config), "--trust", "config", "--out",
                 str(tmp_path / "cli.onnx")]) == 0  # fmt: skip
    assert ": rotary_interleaved=0 (the config's pairing)" in capsys.readouterr().out


def test_a_wrong_schedule_weighs_orders_of_magnitude_more_than_float32_rounding(tmp_path: Path,
                                                                                tiny_checkpoint) -> None:  # noqa: ANN001
    effects, levels = {}, {}
    for fault in (FAULTS[0], FAULTS[-1]):
        model, config, _ = _planted(fault, tmp_path / fault.case, tiny_checkpoint)
        found = rx.audit(model, config).findings[0]
        effects[fault.case], levels[fault.case] = found["effect"]["relative"], found["severity"]["level"]
    assert effects["sliding-given-global"] > 1e4 * effects["float32-angles-sliding"], effects
    # and reads so: float32 rounding is harmless, the global table on sliding layers wrong (``audits.advice``)
    assert levels == {"sliding-given-global": "wrong", "float32-angles-sliding": "harmless"}, (levels, effects)


@pytest.mark.slow  # a decoder built, audited, grafted and proven against float64 per fault (~10 s each)
@pytest.mark.usefixtures("graft_without_use")
@pytest.mark.parametrize("fault", FAULTS, ids=[f.case for f in FAULTS])
def test_a_planted_layer_fault_is_grafted_per_layer_and_proven(fault: LayerFault, tmp_path: Path,
                                                               tiny_checkpoint) -> None:  # noqa: ANN001
    model, config, checkpoint = _planted(fault, tmp_path, tiny_checkpoint)
    out = tmp_path / "fixed" / "model.onnx"
    out.parent.mkdir()
    if fault.graft != "proven":
        with pytest.raises(rx.errors.SpecError, match=fault.graft):
            rx.graft(model, config, out, trust="config", checkpoint=checkpoint)
        assert not out.exists()
        return
    result = rx.graft(model, config, out, trust="config", checkpoint=checkpoint)
    assert result.proven and result.after is not None and result.after.verdict == "exact", result.to_dict()
    assert result.decoder is not None and result.decoder["passed"]["grafted"], result.decoder
    if fault.plant is _rewire:  # the global table kept for layers 2 and 5 (exact sites), a copy made for the others
        assert [r.get("split_for") for r in result.replaced] == ["sliding"], result.replaced
    if fault.plant is _one_table:  # one site read by both: each encoding's readers get their own copy
        assert sorted(r.get("split_for") for r in result.replaced) == ["global", "sliding"], result.replaced


def test_a_site_whose_readers_name_no_layer_is_checked_against_each_encoding(tmp_path: Path,
                                                                            tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint("gemma3")
    model = _decoder(tmp_path, ckpt, "fused")
    _one_table(model)
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        node.name = ""  # no reader names its layer
    onnx.save(proto, str(model))
    result = rx.audit(model, ckpt / "config.json")
    (site,) = result.sites
    assert site["layers"] is None and site["checked_as"] == ["global"] and result.verdict == "exact"
    assert "its readers name no layer: it matches the global layers (2, 5)' encoding" in site["note"]
    _float32_angles(model)  # nothing reads that table now: the shared one's values planted with another theta
    for tensor in proto.graph.initializer:
        if tensor.name in ("layers.2/rope/cos_table", "layers.2/rope/sin_table"):
            rows, width = tensor.dims
            angles = np.outer(np.arange(rows), 5e5 ** (-np.arange(width) / width))
            table = np.cos(angles) if "cos" in tensor.name else np.sin(angles)
            tensor.CopyFrom(numpy_helper.from_array(table.astype(np.float32), tensor.name))
    onnx.save(proto, str(model))
    found = {f["name"]: f["text"] for f in rx.audit(model, ckpt / "config.json").findings}
    assert "it matches none of the encodings" in found["layers-unknown"], found


def _spec_file(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(content))
    return path


SLIDING = {"encoding": "rope", "head_dim": 16, "num_heads": 4, "num_kv_heads": 2, "theta": 10000.0,
           "max_positions": 512}  # fmt: skip
GLOBAL = SLIDING | {"theta": 1e6, "scaling": "linear", "scaling_params": {"factor": 8.0}}
LAYERS = ["local", "local", "global", "local", "local", "global"]


def test_a_per_layer_spec_file_audits_and_grafts_like_the_config(tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint("gemma3")
    model = _decoder(tmp_path, ckpt, "fused")
    spec = _spec_file(tmp_path, {"layers": LAYERS, "encodings": {"local": SLIDING, "global": GLOBAL}})
    result = rx.audit(model, spec_file=spec)
    assert result.verdict == "exact" and result.to_dict()["spec_file"] == str(spec)
    assert [s["checked_as"] for s in result.sites] == [[n] for n in LAYERS]
    _rewire(model)
    found = rx.audit(model, spec_file=spec).findings
    assert [f["text"] for f in found] == ["local layers (0-1, 3-4) use the global layers' table: theta 1e+06 with "
                                          "linear x8; config: theta 10000, unscaled"]  # fmt: skip
    assert main(["graft", str(model), "--spec", str(spec), "--trust", "config", "--out",
                 str(tmp_path / "fixed.onnx")]) == 0  # fmt: skip
    assert main(["audit", str(tmp_path / "fixed.onnx"), "--spec", str(spec)]) == 0


def test_a_single_spec_file_stands_for_every_layer(tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    model = _decoder(tmp_path, tiny_checkpoint("qwen3"), "fused")
    spec = _spec_file(tmp_path, SLIDING)
    assert rx.audit(model, spec_file=spec).verdict == "exact"
    wrong = _spec_file(tmp_path, SLIDING | {"theta": 1e6})
    assert [f["name"] for f in rx.audit(model, spec_file=wrong).findings] == ["theta"]


BAD_SPECS = [
    ("too-few-layers", {"layers": LAYERS[:4], "encodings": {"local": SLIDING, "global": GLOBAL}},
     "describes 4 layers but the model's nodes read a site in layer 4"),
    ("too-many-layers", {"layers": LAYERS * 2, "encodings": {"local": SLIDING, "global": GLOBAL}},
     "lists 12 layers but the model's nodes name layers 0-5"),
    ("unknown-encoding", {"layers": [*LAYERS[:5], "glob"], "encodings": {"local": SLIDING, "global": GLOBAL}},
     "layers[5] is 'glob', not an encoding of the file"),
    ("unused-encoding", {"layers": ["local"] * 6, "encodings": {"local": SLIDING, "global": GLOBAL}},
     "encodings.global is used by no layer"),
    ("no-encodings", {"layers": LAYERS}, "must hold layers (one encoding name or null per layer)"),
    ("every-layer-null", {"layers": [None] * 6, "encodings": {}}, "encodings must map names"),
    ("bad-field", SLIDING | {"thetta": 1.0}, "unknown field"),
    # issue 43, item 7: a field of one entry named by its path (it read "theta: must be > 1"), and a spec that does
    # not fit the model blamed on --spec (it named --hf-config, never given)
    ("per-layer-bad-field", {"layers": LAYERS, "encodings": {"local": SLIDING | {"theta": 0.5}, "global": GLOBAL}},
     "--spec: '{spec}': encodings.local.theta: must be > 1, got 0.5"),
    ("per-layer-unknown-field", {"layers": LAYERS, "encodings": {"local": SLIDING, "global": GLOBAL | {"thetta": 1}}},
     "--spec: '{spec}': encodings.global.thetta: unknown field for encoding 'rope'"),
    ("spec-not-fitting-the-model", SLIDING | {"head_dim": 8},
     "--spec: describes rotary_dim 8 (tables 4 wide) but the model's cos/sin at"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "content", "words"), BAD_SPECS, ids=[b[0] for b in BAD_SPECS])
def test_a_bad_spec_file_is_one_line_and_exit_2(case: str, content: Any, words: str, tmp_path: Path, capsys,
                                                tiny_checkpoint) -> None:  # noqa: ANN001
    model = _decoder(tmp_path, tiny_checkpoint("gemma3"), "fused")
    spec = _spec_file(tmp_path, content)
    capsys.readouterr()  # what making the checkpoint wrote
    assert main(["audit", str(model), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert words.format(spec=spec) in err and "\n" not in err, err
    assert "--hf-config" not in err and ("not describe" not in err or "the spec does not describe" in err), err


def test_a_one_axis_model_against_a_multimodal_rope_config_is_named_and_not_grafted(
    tmp_path: Path, capsys, tiny_checkpoint  # noqa: ANN001
) -> None:
    model = _decoder(tmp_path, tiny_checkpoint("gemma3"), "fused")
    config = tmp_path / "qwen2_5_vl.json"  # a flat hub config: M-RoPE sections over the 8 pairs of head_dim 16
    config.write_text(json.dumps({"model_type": "qwen2_5_vl", "hidden_size": 64, "num_attention_heads": 4,
                                  "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}))  # fmt: skip
    capsys.readouterr()
    assert main(["audit", str(model), "--hf-config", str(config), "--no-effects"]) == 1
    out = capsys.readouterr().out
    assert "computed from position_ids [batch, seq], one axis, where the config's M-RoPE reads" in out, out
    grafted = tmp_path / "grafted.onnx"  # no value gives the model the axes it does not take: refused, nothing written
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(grafted), "--trust", "config"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not give a model the position axes" in err and "\n" not in err and not grafted.exists(), err


@pytest.mark.parametrize("argv", [["--spec", "s.json", "--hf-config", "c.json"], []], ids=["both", "neither"])
def test_spec_and_hf_config_are_one_or_the_other(argv: list[str], capsys) -> None:  # noqa: ANN001
    # both: argparse's own usage line; neither: ropeexport's (a transformers.js folder reads its own config.json)
    try:
        code = main(["audit", "model.onnx", *argv])
    except SystemExit as info:
        code = info.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "--spec" in err and "--hf-config" in err and "\n" not in err, err


def _onnx_attention_model(path: Path, masks: list[str]) -> Path:
    """Four layers' ONNX Attention (opset 23, as mobius-onnx writes it), layer i taking ``masks[i]``: ``padding``
    (the attention_mask's keys, [b, 1, 1, k]: every key, as mobius's OLMo 3's causal mask gives its sliding layers),
    ``window`` (causal keys fewer than 4 back, [1, 1, q, k]) or ``none`` (no attn_mask: causal only). Only the masks
    are computed by the audit.
    """  # noqa: D205
    from onnx import TensorProto, helper

    i64 = TensorProto.INT64
    nodes = [helper.make_node("Shape", ["input_ids"], ["length"], start=1, end=2),
             helper.make_node("Squeeze", ["length"], ["l"]),
             helper.make_node("Range", ["zero", "l", "one"], ["slots"]),
             helper.make_node("Unsqueeze", ["slots", "last"], ["queries"]),  # [q, 1]
             helper.make_node("Sub", ["queries", "slots"], ["back"]),  # [q, k]: q - k
             helper.make_node("GreaterOrEqual", ["back", "zero"], ["causal"]),
             helper.make_node("Less", ["back", "width"], ["near"]),
             helper.make_node("And", ["causal", "near"], ["windowed"]),
             helper.make_node("Unsqueeze", ["windowed", "heads"], ["window_mask"]),  # [1, 1, q, k]
             helper.make_node("Cast", ["attention_mask"], ["keys"], to=TensorProto.BOOL),
             helper.make_node("Unsqueeze", ["keys", "heads_queries"], ["padding_mask"])]  # [b, 1, 1, k]  # fmt: skip
    for layer, mask in enumerate(masks):
        inputs = ["q", "k", "v"] + ([] if mask == "none" else [f"{mask}_mask"])
        nodes.append(helper.make_node("Attention", inputs, [f"out{layer}"], name=f"model/layers.{layer}/self_attn/"
                                      "Attention", q_num_heads=1, kv_num_heads=1, is_causal=1))  # fmt: skip
    consts = [helper.make_tensor(n, i64, dims, values) for n, dims, values in (
        ("zero", [], [0]), ("one", [], [1]), ("width", [], [4]), ("last", [1], [1]), ("heads", [2], [0, 1]),
        ("heads_queries", [2], [1, 2]))]  # fmt: skip
    f32 = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", i64, [1, "s"]),
              helper.make_tensor_value_info("attention_mask", i64, [1, "s"])]
    inputs += [helper.make_tensor_value_info(n, f32, [1, 1, "s", 16]) for n in "qkv"]
    outputs = [helper.make_tensor_value_info(f"out{i}", f32, None) for i in range(len(masks))]
    graph = helper.make_graph(nodes, "attention", inputs, outputs, consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10  # what the pinned ONNX Runtime loads
    onnx.save(model, str(path))
    return path


# (each layer's mask, the window findings): the config slides layers 0-2 over 4 key slots, layer 3 sees every key
ONNX_ATTENTION = [
    (["padding"] * 4, ["layers 0-2 attend to every key where the config gives them a window of 4 key slots "
                       "(sliding_attention in layer_types)"]),  # mobius-onnx 0.1.0's OLMo 3
    (["window"] * 3 + ["none"], []),
    (["window"] * 4, ["layer 3 attends to a window of 4 key slots where the config gives it every key "
                      "(full_attention in layer_types)"]),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("masks", "said"), ONNX_ATTENTION, ids=["one-padding-mask", "as-configured", "all-windowed"])
def test_windows_are_read_from_the_masks_onnx_attention_takes(masks: list[str], said: list[str],
                                                              tmp_path: Path) -> None:  # fmt: skip
    model = _onnx_attention_model(tmp_path / "model.onnx", masks)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "olmo3", "num_hidden_layers": 4, "hidden_size": 64,
                                  "num_attention_heads": 4, "max_position_embeddings": 256, "sliding_window": 4,
                                  "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}))  # fmt: skip
    found = windows.window_findings(rx_load(model), config, model)
    assert [f["text"] for f in found] == said
    assert windows.observed(rx_load(model)) == {}  # no window said by name: read from the masks only


ROTARY = "['', 'inner', 'inner.model', 'inner.model.rotary_emb', 'cat']"


def _joined_cos_sin(other: str) -> Any:
    """(model, the site's cos and sin) of dynamo's Llama 4 with its rotation in real arithmetic, shrunk: cos and sin of
    position x inv_freq computed in the model's rotary module (no layer) and joined there, cat([cos, sin]) with
    ``other`` (``"sin"``, or ``"q"``: a join that reads something else); unsqueezed and sliced in layer 0's scope
    (dynamo merged the three layers' copies), then multiplied into the query by layers 0-2.
    """  # noqa: D205
    import onnx_ir as ir
    from onnx import TensorProto, helper

    def scope(path: str) -> list[onnx.StringStringEntryProto]:
        return [onnx.StringStringEntryProto(key="pkg.torch.onnx.name_scopes", value=path)]

    layer0 = "['', 'inner', 'inner.model', 'inner.model.layers.0', 'inner.model.layers.0.self_attn']"
    consts = [numpy_helper.from_array(np.arange(1, 9, dtype=np.float32) / 8, "inv_freq"),
              numpy_helper.from_array(np.array([2], np.int64), "axis2")]  # fmt: skip
    consts += [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (("zero", 0), ("half", 8), ("all", 16),
                                                                                ("last", -1))]  # fmt: skip
    nodes = [helper.make_node("Cast", ["position_ids"], ["pos"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["pos", "last"], ["pos1"]),
             helper.make_node("Mul", ["pos1", "inv_freq"], ["freqs"]),
             helper.make_node("Cos", ["freqs"], ["cos"], name="node_cos"),
             helper.make_node("Sin", ["freqs"], ["sin"], name="node_sin"),
             helper.make_node("Concat", ["cos", other], ["cat"], name="node_cat", axis=-1),
             helper.make_node("Unsqueeze", ["cat", "axis2"], ["cat4"], name="node_unsqueeze_25"),
             helper.make_node("Slice", ["cat4", "zero", "half", "last"], ["c"], name="node_slice_6"),
             helper.make_node("Slice", ["cat4", "half", "all", "last"], ["s"], name="node_slice_8")]  # fmt: skip
    for node in nodes[3:6]:
        node.metadata_props.extend(scope(ROTARY))
    for node in nodes[6:]:
        node.metadata_props.extend(scope(layer0))
    for i in range(3):
        mul = helper.make_node("Mul", ["q", "c" if i % 2 else "s"], [f"out{i}"], name=f"node_mul_{i}")
        mul.metadata_props.extend(scope(layer0.replace("layers.0", f"layers.{i}")))
        nodes.append(mul)
    graph = helper.make_graph(nodes, "joined", [helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                                              [1, "s"]),
                                                helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, "s", 4, 8])],
                              [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None) for i in range(3)],
                              consts)  # fmt: skip
    model = ir.from_proto(helper.make_model(graph))
    values = {v.name: v for n in model.graph for v in n.outputs}
    return model, (values["cos"], values["sin"])


# (what cos is joined with, the layers the site is read by): a join of the site's own cos and sin in no layer reads
# as what it reaches (the shared cos/sin of a dynamo Llama 4 export: it was `layers-unknown`); one with another input
# is a reader in its own right, and it names no layer
JOINS = [("sin", (0, 1, 2)), ("q", None)]


@pytest.mark.fast
@pytest.mark.parametrize(("other", "layers"), JOINS, ids=["cos-sin-joined", "joined-with-the-query"])
def test_cos_and_sin_joined_in_the_rotary_module_are_read_by_the_layers_they_reach(
    other: str, layers: tuple[int, ...] | None
) -> None:
    from types import SimpleNamespace

    from ropeexport.audits.layers import site_layers

    _, values = _joined_cos_sin(other)
    assert site_layers(SimpleNamespace(values=values, readers=[], rotations=None)) == layers
