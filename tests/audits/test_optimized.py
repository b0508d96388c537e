"""What runs is not what was exported (issue 41, item 8): ``audit --optimized`` audits the graph ONNX Runtime runs.

An InferenceSession rewrites a model before it runs it. Measured here, on the pinned ONNX Runtime (1.31.1) with its CPU
provider: it merges each layer's identical rotations into one (common subexpressions), and fuses no rotation: its
GroupQueryAttentionFusion, which folds RotaryEmbedding into GroupQueryAttention's do_rotary, is registered for the
CUDA provider only (read in its source) and leaves a CPU session's graph as it was (asserted below). Two readings of
the audit broke on the merged graph and are fixed: a decomposed decoder's one lookup per table, made by layer 0's
Gather, is read by every layer (before: "layer 1 is not rotated but the config rotates it"), and a model of two
encodings has four tables looked up by one rows value (before: "no rotary position encoding", exit 2).

ONNX Runtime PR #29261 (2026-06) adds the opset-23 RotaryEmbedding to that fusion; its review found that the matcher
reads neither ``interleaved`` nor ``rotary_embedding_dim``. ``tests.audits.fusion.plant`` rewrites a graph as that
revision would, and the audit of such an optimized graph (``--optimized-model``) names what it did: an interleaved
rotation fused into a GroupQueryAttention that pairs halves (``pairing``, made by the optimizer, its effect measured
on a prompt, which is the path the rewrite touches), a partial rotation whose caches GroupQueryAttention refuses
(``cannot-run``); the same rewrite with ``interleaved`` carried over (the review's fix), and a partial rotation of
halves whose caches it takes, audit exact, with the fusion said as a new form of the same rotation.
"""  # noqa: D205

from __future__ import annotations

import collections
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ropeexport as rx
from ropeexport.audits.optimizer import check, compare, optimize
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.spec import FORMS
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import save_model
from tests.audits.fusion import plant
from tests.cases import tiered
from tests.clirun import run
from tests.decoder.tiny import CONFIGS

# Shapes GroupQueryAttention's built-in rotary runs on the CPU (head_size a multiple of 16, caches a multiple of 8
# wide): GPT-J's interleaved rotation over a whole 16-wide head; GPT-NeoX's halves over 16 of 32 channels.
MORE = {"gptj-d16": ("gptj", {"vocab_size": 96, "n_layer": 2, "n_embd": 64, "n_head": 4, "rotary_dim": 16,
                              "n_positions": 256}),
        "gpt_neox-d32": ("gpt_neox", {"vocab_size": 96, "num_hidden_layers": 2, "hidden_size": 64,
                                      "intermediate_size": 48, "num_attention_heads": 2,
                                      "rotary_pct": 0.5})}  # fmt: skip


@pytest.fixture
def checkpoint(tiny_checkpoint: Callable[..., Path]) -> Iterator[Callable[[str], Path]]:
    """``tiny_checkpoint`` that also knows ``MORE``'s shapes."""
    with patch.dict(CONFIGS, MORE):
        yield tiny_checkpoint


def _decoder(folder: Path, ckpt: Path, graph: str) -> Path:
    """The decoder's model.onnx as ``build --artifact decoder`` writes it, without running its scenarios."""
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph=graph))
    save_model(build_decoder_graph(spec, load_checkpoint(spec, ckpt), str(ckpt)), folder)
    return folder / "model.onnx"


def _layers(sites: list[dict[str, Any]]) -> set[int]:
    return {layer for site in sites for layer in site["layers"] or []}


# --- the pinned ONNX Runtime fuses no rotation on the CPU provider --------------------------------------------------


def _gqa_after_rotations(domain: str, interleaved: int) -> onnx.ModelProto:
    """What GroupQueryAttentionFusion matches: Q, K, V MatMuls (float16 weights, as its weight merge reads them), Q and
    K rotated by a RotaryEmbedding of ``domain`` (tables [32, 8]), a GroupQueryAttention without do_rotary.
    """  # noqa: D205
    hidden, heads, kv, d = 64, 4, 2, 16
    rng = np.random.default_rng(0)
    angles = np.arange(32)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)[None]
    inits = [numpy_helper.from_array(rng.standard_normal((hidden, n)).astype(np.float16), w)
             for w, n in (("wq", heads * d), ("wk", kv * d), ("wv", kv * d))]  # fmt: skip
    inits += [numpy_helper.from_array(np.cos(angles).astype(np.float16), "cos"),
              numpy_helper.from_array(np.sin(angles).astype(np.float16), "sin")]  # fmt: skip
    nodes = [helper.make_node("MatMul", ["x", f"w{t}"], [t]) for t in "qkv"]
    for t, n in (("q", heads), ("k", kv)):
        inputs = [t, "position_ids", "cos", "sin"] if domain else [t, "cos", "sin", "position_ids"]
        nodes.append(helper.make_node("RotaryEmbedding", inputs, [f"{t}_rot"], domain=domain, num_heads=n,
                                      interleaved=interleaved))  # fmt: skip
    nodes.append(helper.make_node("GroupQueryAttention", ["q_rot", "k_rot", "v", "past_key", "past_value", "seqlens_k",
                                  "total_sequence_length"], ["out", "present_key", "present_value"],
                                  domain="com.microsoft", num_heads=heads, kv_num_heads=kv))  # fmt: skip
    f16, i32 = TensorProto.FLOAT16, TensorProto.INT32
    inputs = [helper.make_tensor_value_info("x", f16, [1, "s", hidden]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "s"]),
              helper.make_tensor_value_info("past_key", f16, [1, kv, "p", d]),
              helper.make_tensor_value_info("past_value", f16, [1, kv, "p", d]),
              helper.make_tensor_value_info("seqlens_k", i32, [1]),
              helper.make_tensor_value_info("total_sequence_length", i32, [])]  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, f16, None) for n in ("out", "present_key", "present_value")]
    model = helper.make_model(helper.make_graph(nodes, "gqa", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 23), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


FUSABLE = [(domain, interleaved) for domain in ("com.microsoft", "") for interleaved in (0, 1)]


@pytest.mark.parametrize(("domain", "interleaved"), FUSABLE, ids=[f"{d or 'opset23'}-{i}" for d, i in FUSABLE])
def test_the_pinned_onnx_runtime_fuses_no_rotation_on_the_cpu_provider(domain: str, interleaved: int,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    onnx.save(_gqa_after_rotations(domain, interleaved), str(tmp_path / "model.onnx"))
    (tmp_path / "optimized").mkdir()
    saved = onnx.load(str(optimize(tmp_path / "model.onnx", "all", tmp_path / "optimized")))
    ops = collections.Counter(n.op_type for n in saved.graph.node)
    (gqa,) = [n for n in saved.graph.node if n.op_type == "GroupQueryAttention"]
    assert ops["RotaryEmbedding"] == 2 and not [a for a in gqa.attribute if a.name == "do_rotary" and a.i], ops


# --- ropeexport's own decoders: the optimized graph audits exact, no rotation changed ------------------------------

CASES = [(name, form) for name in ("gptj", "gpt_neox", "phi3-partial-longrope", "llama", "gemma3", "llama-d16")
         for form in FORMS]  # fmt: skip
FAST = {("llama", "decomposed"), ("gemma3", "decomposed"), ("gptj", "gqa"), ("phi3-partial-longrope", "fused"),
        ("llama-d16", "gqa")}  # fmt: skip


@pytest.mark.parametrize(("name", "graph"), tiered(CASES, lambda c: c in FAST), ids=[f"{n}-{g}" for n, g in CASES])
def test_the_optimized_graph_of_every_form_audits_exact_with_no_rotation_changed(
    name: str, graph: str, tmp_path: Path, checkpoint: Callable[[str], Path]
) -> None:
    ckpt = checkpoint(name)
    model = _decoder(tmp_path, ckpt, graph)
    result = rx.audit(model, ckpt / "config.json", optimized="all")
    record = result.optimized
    assert record is not None and result.verdict == "exact" and result.gate["passed"], record
    assert record["verdict"] == "exact" and not record["findings"] and not record["changed"], record["changes"]
    assert _layers(record["sites"]) == _layers(result.sites)  # every rotated layer read in the graph that runs
    assert record["sites_after"] <= record["sites_before"] == len(result.sites)
    assert record["level"] == "all" and record["onnxruntime"] == __import__("onnxruntime").__version__


# (level, the exported graph's effect taken as the optimized graph's): only at ``all``, the level the effect's own
# sessions optimize at, is the optimized graph the one those runs ran; at another level it is run on its own
REUSE = [("all", True), ("basic", False)]


@pytest.mark.parametrize(("level", "taken"), REUSE, ids=[r[0] for r in REUSE])
def test_the_optimized_graph_takes_the_effect_measured_on_the_graph_that_ran(level: str, taken: bool, tmp_path: Path,
                                                                            tiny_checkpoint) -> None:  # noqa: ANN001
    from tests.audits.test_prove import _decoder as planted_decoder

    ckpt = tiny_checkpoint("phi3-longrope")
    model = planted_decoder(tmp_path, ckpt, "fused", unscaled=True)  # LongRoPE ignored: a finding with an effect
    result = rx.audit(model, ckpt / "config.json", optimized=level)
    assert result.optimized is not None and not result.optimized["changed"]
    exported = {f["name"]: f["effect"] for f in result.findings}
    optimized = {f["name"]: f["effect"] for f in result.optimized["findings"]}
    assert set(optimized) == set(exported) and all("relative" in e for e in optimized.values()), optimized
    for name, effect in optimized.items():
        assert ("measured_on" in effect) is taken, effect
        # measured again (basic), the same finding weighs within 2x of the exported graph's
        assert 0.5 <= effect["relative"] / exported[name]["relative"] <= 2.0, (effect, exported[name])
        assert (effect["relative"] == exported[name]["relative"]) or not taken


# The merged graph, audited on its own: what failed before the two readings were fixed
MERGED = [("llama", "decomposed", 1), ("gemma3", "decomposed", 2), ("smollm3-nope", "decomposed", 1)]


@pytest.mark.parametrize(("name", "graph", "sites"), MERGED, ids=[f"{n}-{g}" for n, g, _ in MERGED])
def test_onnx_runtimes_merged_lookups_audit_exact_on_their_own(name: str, graph: str, sites: int, tmp_path: Path,
                                                               checkpoint: Callable[[str], Path]) -> None:  # fmt: skip
    ckpt = checkpoint(name)
    model = _decoder(tmp_path, ckpt, graph)
    (tmp_path / "optimized").mkdir()
    merged = optimize(model, "basic", tmp_path / "optimized")  # common subexpressions are merged from basic on
    result = rx.audit(merged, ckpt / "config.json")
    assert result.verdict == "exact", [(f["name"], f["text"]) for f in result.findings]
    assert len(result.sites) == sites and _layers(result.sites) == _layers(rx.audit(model, ckpt / "config.json",
                                                                                      effects=False).sites)


# DeepSeek Sparse Attention's latent-cache builds (decomposed: the form that builds the latent cache): ONNX Runtime
# merges every layer's lookups into one, read by the attention (its rope slice, the heads' last channels: rotations not
# read by use) and by the indexer. (checkpoint, layers, the indexer's layers). Before: GLM-5's verify said "CHANGED a
# rotation: layer 1: no rotary site reads this layer" (its shared layer, no indexer, lost with the attention's part),
# and a FusedMatMul's scores (ORT's MatMul with the scale folded in) were not the indexer's (its rotation read as the
# attention's: DeepSeek V3.2's halves judged against the attention's interleaved pairs)
LATENT = [("glm_moe_dsa", {0, 1, 2}, {0, 2}), ("deepseek_v32", {0, 1}, {0, 1})]


@pytest.mark.parametrize(("name", "layers", "indexer"), LATENT, ids=[n for n, _, _ in LATENT])
def test_a_merged_latent_lookup_is_read_by_every_layer_and_the_indexer_apart(
    name: str, layers: set[int], indexer: set[int], tmp_path: Path, checkpoint: Callable[[str], Path]
) -> None:
    from ropeexport.audits.model import load_model
    from ropeexport.audits.sites import find_sites
    from tests.audits.test_audit_own_decoders import _decoder as latent_decoder

    model = latent_decoder(tmp_path, checkpoint(name), "decomposed", latent_cache=True)
    (tmp_path / "optimized").mkdir()
    optimized = optimize(model, "all", tmp_path / "optimized")
    said = compare(model, optimized)
    assert not said["changed"] and said["text"].startswith("no rotation changed ("), said["text"]
    for graph in (model, optimized):
        sites = find_sites(load_model(graph))
        read = {flag: {i for s in sites if s.indexer is flag for i in s.layers or ()} for flag in (False, True)}
        assert read == {False: layers, True: indexer}, (graph, [(s.layers, s.indexer) for s in sites])
    assert said["sites_after"] == 2 < said["sites_before"]  # one lookup, the attention's part and the indexer's


# Latent attention's builds, their optimized graph audited: ONNX Runtime writes each q.k product as a FusedMatMul (its
# MatmulTransposeFusion, the key's Transpose folded into transB; MatMulScaleFusion, a one-product attention's scale
# into alpha). (checkpoint, form, latent cache, the findings both graphs have). Before: every decomposed build's
# optimized graph said attention-scale-unread (no q.k product found through its Where: a FusedMatMul was none), every
# latent-cache build's rope-slice-unread too (its key rotation read as a query's: role_of counted only MatMul), the
# fused DSA builds' indexer rope-slice-unread (its RotaryEmbedding's role untold), Mistral Large 4's indexer query
# scales judged as the attention's (learned-query-scale: 16 heads against 4, the scale's name folded away) and
# DeepSeek V3.2's fused build a rotation CHANGED (its indexer's halves matched with the attention's interleaved pairs).
# mistral4's latent-cache build (a Mul of the logits by its position's query factor, passed over by the scale's
# reading: audits.attention_reads) exact in both
OPTIMIZED_LATENT = [("deepseek_v3", "decomposed", False, ()), ("deepseek_v3", "decomposed", True, ()),
                    ("deepseek_v2", "decomposed", True, ()), ("glm4_moe_lite", "decomposed", True, ()),
                    ("deepseek_v32", "decomposed", True, ()), ("glm_moe_dsa", "decomposed", True, ()),
                    ("mistral_large4", "decomposed", True, ()), ("deepseek_v32", "fused", False, ()),
                    ("glm_moe_dsa", "fused", False, ()),
                    ("mistral4", "decomposed", True, ())]  # fmt: skip


@pytest.mark.parametrize(("name", "graph", "latent_cache", "findings"), OPTIMIZED_LATENT,
                         ids=[f"{n}-{g}{'-latent' if c else ''}" for n, g, c, _ in OPTIMIZED_LATENT])  # fmt: skip
def test_a_latent_builds_optimized_graph_audits_exact_where_its_exported_graph_does(
        name: str, graph: str, latent_cache: bool, findings: tuple[str, ...], tmp_path: Path,
        checkpoint: Callable[[str], Path]) -> None:  # fmt: skip
    from tests.audits.test_audit_own_decoders import _decoder as latent_decoder

    ckpt = checkpoint(name)
    model = latent_decoder(tmp_path, ckpt, graph, latent_cache=latent_cache)
    result = rx.audit(model, ckpt / "config.json", optimized="all", effects=False)
    record = result.optimized
    assert record is not None and not record["changed"], record["text"]
    graphs = {"exported": result.findings, "optimized": record["findings"]}
    said = {g: sorted((f["name"], f["text"]) for f in got) for g, got in graphs.items()}
    assert [n for n, _ in said["exported"]] == list(findings) and said["optimized"] == said["exported"], said
    assert record["verdict"] == ("findings" if findings else "exact") and _layers(record["sites"]) == _layers(
        result.sites)  # fmt: skip


# A fault planted in the exported graph, named in the optimized graph too: DeepSeek V3's decomposed attention without
# YaRN's mscale squared (one product: its scale folded into FusedMatMul's alpha), its latent cache's with the mscale
# squared twice (two products added, the scale a Mul after them). (the plant's case in test_audit_latent.PLANTED, the
# alpha the optimized graph's layer 0 q.k product must carry)
THROUGH = [("ds-decomposed-without-mscale", 0.25), ("ds-latent-cache-mscale-twice", 1.0)]


@pytest.mark.parametrize(("case", "alpha"), THROUGH, ids=[c for c, _ in THROUGH])
def test_a_planted_scale_is_named_in_the_optimized_graph_through_fusedmatmuls_alpha(
    case: str, alpha: float, tmp_path: Path, checkpoint: Callable[[str], Path]
) -> None:
    from ropeexport.audits.model import load_model
    from tests.audits.test_audit_latent import PLANTED as LATENT_PLANTED
    from tests.audits.test_audit_own_decoders import _decoder as latent_decoder

    bug = next(b for b in LATENT_PLANTED if b.case == case)
    ckpt = checkpoint(bug.name)
    model = latent_decoder(tmp_path, ckpt, bug.graph, latent_cache=bug.latent_cache)
    assert bug.plant is not None
    bug.plant(model)
    (tmp_path / "optimized").mkdir()
    fused = [n for n in load_model(optimize(model, "all", tmp_path / "optimized")).graph
             if n.op_type == "FusedMatMul" and n.name.startswith("layers.0/")]  # fmt: skip
    assert fused and {round(float(n.attributes["alpha"].value), 6) for n in fused} == {alpha}, fused
    result = rx.audit(model, ckpt / "config.json", optimized="all", effects=False)
    assert result.optimized is not None and not result.gate["passed"]
    for findings in (result.findings, result.optimized["findings"]):
        assert [f["name"] for f in findings] == list(bug.findings), findings
        assert bug.words in findings[0]["text"], findings[0]["text"]


def _rope_on_nope(model: Path) -> None:
    """Each layer's query split [nope, rope] read in the wrong order: the rotation given the nope channels."""
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        if node.name.endswith("/latent/split_11_node"):  # the query heads' split (test_audit_latent's rope-on-nope)
            node.output[:] = [node.output[1], node.output[0]]
    onnx.save(proto, str(model))


# (checkpoint, the layers named): the latent-cache build's rope slice planted wrong, read through ONNX Runtime's
# rewrite (its FusedMatMuls, the merged lookup) as in the exported graph; before, the optimized graph said
# rope-slice-unread of its query rotation, right or wrong
NOPE = [("deepseek_v3", "0-1"), ("glm_moe_dsa", "0-2")]


@pytest.mark.parametrize(("name", "layers"), NOPE, ids=[n for n, _ in NOPE])
def test_the_rope_on_the_nope_part_is_named_in_the_optimized_graph_of_a_latent_cache_build(
    name: str, layers: str, tmp_path: Path, checkpoint: Callable[[str], Path]
) -> None:
    from tests.audits.test_audit_own_decoders import _decoder as latent_decoder

    ckpt = checkpoint(name)
    model = latent_decoder(tmp_path, ckpt, "decomposed", latent_cache=True)
    _rope_on_nope(model)
    result = rx.audit(model, ckpt / "config.json", optimized="all", effects=False)
    assert result.optimized is not None and not result.optimized["changed"]
    words = (f"layers {layers} rotate the query's channels 0-7 of each 16-channel head (the nope dims: "
             "qk_nope_head_dim 8) where the config rotates the last 8 (qk_rope_head_dim)")  # fmt: skip
    for findings in (result.findings, result.optimized["findings"]):
        assert [(f["name"], f["text"]) for f in findings] == [("rope-slice", words)], findings


# --- PR #29261's first revision, planted: what the audit names --------------------------------------------------

# (checkpoint, interleaved carried over, the optimized graph's findings, a rotation changed, the changes said)
PLANTED: list[tuple[str, bool, set[str], bool, set[str]]] = [
    ("gptj-d16", False, {"pairing"}, True, {"fused", "pairing"}),  # interleaved, whole head: now pairs halves
    ("gptj-d16", True, set(), False, {"fused"}),  # the review's fix: the same rotation, a new form
    ("gptj", False, {"pairing", "cannot-run"}, True, {"fused", "pairing"}),  # 4 of 8 channels, caches 2 wide
    ("phi3-partial-longrope", False, {"cannot-run"}, False, {"fused"}),  # 12 of 16 channels: caches 6 wide
    ("gpt_neox", False, {"cannot-run"}, False, {"fused"}),  # halves, 4 of 8 channels: head 8 is refused
    ("gpt_neox-d32", False, set(), False, {"fused"}),  # halves, 16 of 32 channels: caches 8 wide, the same rotation
    ("llama-d16", False, set(), False, {"fused"}),  # halves over the whole head: what the fusion was written for
]  # fmt: skip
PLANTED_FAST = {("gptj-d16", False), ("phi3-partial-longrope", False), ("gpt_neox-d32", False)}


def _planted(folder: Path, ckpt: Path, carry: bool) -> tuple[Path, Path]:
    """ropeexport's gqa-form decoder and ONNX Runtime's optimized graph of it with the fusion planted in."""
    model = _decoder(folder, ckpt, "gqa")
    (folder / "optimized").mkdir()
    optimized = optimize(model, "all", folder / "optimized")
    proto = onnx.load(str(optimized))
    assert plant(proto, carry) == 2  # one GroupQueryAttention per layer
    onnx.save(proto, str(folder / "planted.onnx"))
    return model, folder / "planted.onnx"


@pytest.mark.parametrize(("name", "carry", "names", "changed", "said"),
                         tiered(PLANTED, lambda c: c[:2] in PLANTED_FAST),
                         ids=[f"{n}-{'carried' if c else 'dropped'}" for n, c, *_ in PLANTED])  # fmt: skip
def test_a_fusion_into_group_query_attention_is_named(
    name: str, carry: bool, names: set[str], changed: bool, said: set[str], tmp_path: Path,
    checkpoint: Callable[[str], Path],
) -> None:  # fmt: skip
    ckpt = checkpoint(name)
    model, planted = _planted(tmp_path, ckpt, carry)
    result = rx.audit(model, ckpt / "config.json", optimized_model=planted)
    record = result.optimized
    assert record is not None and not result.findings  # the exported graph is exact
    assert {f["name"] for f in record["findings"]} == names, record["findings"]
    assert all(f["introduced"] and f["next"]["action"] == "optimizer" for f in record["findings"])
    assert record["changed"] is changed
    assert {c for r in record["changes"] for c in r["changes"]} == said, record["changes"]
    assert (result.verdict == "exact") is (not names) and result.gate["passed"] is (not names)
    kinds = {r["after"].split(",")[0] for r in record["changes"]}
    assert kinds == {"GroupQueryAttention do_rotary"}, kinds


def _prompt_logits(model: Path, vocab: int, tokens: int = 8) -> np.ndarray:
    """The logits of ``tokens`` tokens from position 0 (an empty cache), the inputs seeded."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds: dict[str, np.ndarray] = {}
    for value in session.get_inputs():
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, vocab, (1, tokens)).astype(np.int64)
        elif value.name in ("attention_mask", "position_ids"):
            feeds[value.name] = (np.ones((1, tokens)) if "mask" in value.name else np.arange(tokens)[None]).astype(
                np.int64)
        else:  # past_key_values.*: [batch, kv heads, 0, head size]
            feeds[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), np.float32)
    return np.asarray(session.run(["logits"], feeds)[0], np.float64)


def test_the_pairing_the_fusion_drops_is_wrong_within_2x_of_running_both_graphs(
    tmp_path: Path, checkpoint: Callable[[str], Path]
) -> None:
    ckpt = checkpoint("gptj-d16")
    model, planted = _planted(tmp_path, ckpt, False)
    result = rx.audit(model, ckpt / "config.json", optimized_model=planted)
    assert result.optimized is not None
    (found,) = result.optimized["findings"]
    assert found["severity"]["level"] == "wrong", found
    assert found["text"].startswith("layers 0-1: channels paired as halves"), found
    # as users run it, independently: a prompt of 256 tokens from position 0, each position judged on its own scale,
    # the worst kept (the audit's windows are spans of positions of its own prefill and decode steps)
    exported, fused = _prompt_logits(model, 96, 256), _prompt_logits(planted, 96, 256)
    per_position = np.max(np.abs(exported - fused), axis=-1) / np.max(np.abs(exported), axis=-1)
    independent = float(np.max(per_position))
    assert independent > 1e-2 and 0.5 <= found["effect"]["relative"] / independent <= 2.0, (found["effect"],
                                                                                              independent)


# --- the command line, and verify's line ---------------------------------------------------------------------------


def test_the_command_line_gates_on_the_optimized_graph(tmp_path: Path, checkpoint: Callable[[str], Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    ckpt = checkpoint("gptj-d16")
    model, planted = _planted(tmp_path, ckpt, False)
    config = str(ckpt / "config.json")
    code, out, _ = run(["audit", str(model), "--hf-config", config, "--optimized-model", str(planted), "--out",
                        str(tmp_path / "report")], capsys)  # fmt: skip
    assert code == 1 and "CHANGED a rotation" in out and "pairing (wrong, optimized graph)" in out, out
    written = json.loads((tmp_path / "report" / "audit.json").read_text())
    assert written["verdict"] == "findings" and written["optimized"]["changed"] is True
    assert "## The optimized graph: findings" in (tmp_path / "report" / "audit.md").read_text()
    code, out, _ = run(["audit", str(model), "--hf-config", config, "--optimized", "--json"], capsys)
    assert code == 0 and json.loads(out)["optimized"]["level"] == "all"


BAD = [(["--optimized", "fastest"], "argument --optimized: invalid choice: 'fastest'"),
       (["--optimized", "all", "--optimized-model", "x.onnx"], "not allowed with argument")]  # fmt: skip


@pytest.mark.parametrize(("flags", "said"), BAD, ids=["unknown-level", "level-and-model"])
def test_a_bad_request_is_one_line_and_exit_2(flags: list[str], said: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    code, _, err = run(["audit", "m.onnx", "--hf-config", "c.json", *flags, "--out", str(tmp_path / "r")], capsys)
    assert code == 2 and said in err and not (tmp_path / "r").exists(), err


API_BAD = [({"optimized": "fastest"}, "optimized: must be one of basic, extended, all, got 'fastest'"),
           ({"optimized": "all", "optimized_model": "x.onnx"}, "optimized_model: give either")]  # fmt: skip


@pytest.mark.parametrize(("asked", "said"), API_BAD, ids=["unknown-level", "level-and-model"])
def test_the_api_refuses_a_bad_request_naming_the_field(asked: dict[str, str], said: str, tmp_path: Path,
                                                        checkpoint: Callable[[str], Path]) -> None:  # fmt: skip
    ckpt = checkpoint("llama")
    model = _decoder(tmp_path, ckpt, "fused")
    with pytest.raises(SpecError) as caught:
        rx.audit(model, ckpt / "config.json", **asked)  # type: ignore[arg-type]
    assert str(caught.value).startswith(said)


def test_verify_says_what_the_optimizer_did(seeded_decoder: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    decoder = Path(shutil.copytree(seeded_decoder, tmp_path / "decoder"))  # verify rewrites its reports
    code, out, _ = run(["verify", str(decoder)], capsys)
    assert code == 0 and "optimizer (level all, CPU provider): no rotation changed" in out, out
    stored = json.loads((decoder / "report.json").read_text())["optimizer"]
    assert stored["checked"] and not stored["changed"] and stored["sites_before"] >= stored["sites_after"] >= 1
    # an encoding artifact's verify too: rotated queries and keys, two sites whose readers name no layer
    built = rx.build(rx.spec("rope", artifact="scores", max_positions=256), tmp_path / "enc")
    said = rx.verify(built.path)[0].report["optimizer"]
    assert said["checked"] and not said["changed"], said
    assert said["text"].endswith("no rotation changed (2 rotary sites -> 2)"), said["text"]


def test_verify_names_another_rotation_and_leaves_a_large_model(tmp_path: Path,
                                                                checkpoint: Callable[[str], Path]) -> None:  # fmt: skip
    ckpt = checkpoint("gptj-d16")
    model, planted = _planted(tmp_path, ckpt, False)
    said = compare(model, planted)
    assert said["changed"] and said["text"].startswith("CHANGED a rotation: layers 0-1:"), said["text"]
    with patch("ropeexport.audits.optimizer.CHECK_BYTES", 1):
        skipped = check(model)
    assert not skipped["checked"] and "audit MODEL --hf-config CONFIG --optimized all" in skipped["text"]
