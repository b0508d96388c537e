"""DeepSeek Sparse Attention's indexer inside the ``latent`` component: its float64 twin against transformers 5.23
(``DeepseekV32Attention``, ``GlmMoeDsaAttention`` and ``MistralLarge4TextIndexer``, float64), its graph in ONNX
Runtime against the twin (every cache and form that builds it), a cached decode crossing the top-k boundary, exact
and near ties in the selection, and its refusals.

Case tables: the indexer variants (``VARIANTS``: DeepSeek V3.2's half-split RoPE over the query LoRA, GLM-5's
interleaved, Mistral Large 4's query from LayerNorm(x) with its per-head log scale, with RoPE and on a NoPE layer);
graph rows (variant, cache, form, dtype, weights) one per distinct behaviour. ``index_topk`` is 4 or 3 so the
selection bites at seven or eight keys.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from ropeexport.components.attention.float64 import visible
from ropeexport.components.latent.float64 import latent64
from ropeexport.components.latent.indexer import IndexerSpec
from ropeexport.components.latent.indexer64 import index64, near_ties, select64
from ropeexport.errors import SpecError
from tests.components.test_latent import (
    DEFAULT,
    NOPE,
    QR,
    ROPE,
    H,
    N,
    R,
    V,
    _angles,
    _calls,
    _feeds,
    _rotation,
    _spec,
    _to_hf_layout,
    _weights,
    _within,
    _within_rows,
)

pytestmark = pytest.mark.fast  # one attention layer with its indexer against its float64 twin

IH, ID, TOPK = 2, 8, 4  # the indexer's heads and head width (its first ROPE dims rotated), index_topk
# variant: (query source, RoPE layout of the indexer or None, Large 4's log scale)
VARIANTS = {"v32": ("lora", "half", False), "glm5": ("lora", "interleaved", False),
            "large4": ("hidden", "interleaved", True), "large4-nope": ("hidden", None, True)}  # fmt: skip


def _piece(layout: str, heads: int, dtype: str = "fp32") -> Any:
    """The rope family's default-RoPE piece over a ROPE-wide slice, ``heads`` query heads and one key head."""
    import ropeexport as rx
    from ropeexport.catalog import recipe_for

    spec = rx.spec("rope", artifact="block", head_dim=ROPE, num_heads=heads, num_kv_heads=1, layout=layout,
                   max_positions=2560, dtype=dtype, graph="decomposed")  # fmt: skip
    return recipe_for(spec).piece_of(spec)


def _indexed(variant: str, dtype: str = "fp32", cache: str = "expanded", pieces: bool = False,
             topk: int = TOPK) -> Any:  # fmt: skip
    """The latent spec (interleaved MLA RoPE, as DeepSeek V3.2 / GLM-5 rotate it) with the variant's indexer."""
    query, layout, log_scale = VARIANTS[variant]
    index = IndexerSpec(num_heads=IH, head_dim=ID, rope_dim=ROPE, topk=topk, query=query, log_scale=log_scale,
                        position=_piece(layout, IH, dtype) if pieces and layout else None)  # fmt: skip
    return dataclasses.replace(_spec(query == "lora", 0.0, dtype, cache), indexer=index,
                               position=_piece("interleaved", H, dtype) if pieces else None)  # fmt: skip


def _index_rotation(variant: str) -> Any:
    layout = VARIANTS[variant][1]
    return None if layout is None else _rotation(layout == "interleaved")


def _dense(spec: Any, feeds: dict[str, np.ndarray], weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same layer without its indexer (dense attention: what DSA equals up to index_topk keys)."""
    plain = {n: v for n, v in weights.items() if not n.startswith("indexer.")}
    return latent64(dataclasses.replace(spec, indexer=None), {n: v for n, v in feeds.items() if "index" not in n},
                    plain, rotate=_rotation(True))  # fmt: skip


def _differences(got: np.ndarray, want: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(row, query, entering, leaving) for every key ``got`` [b, 1, s, t] selected in place of one ``want`` did,
    paired in key order per query row: the flips that make the twin's selection ``got``'s.
    """  # noqa: D205
    out = []
    for row, query in np.argwhere((got != want).any(axis=-1)[:, 0]):
        entering = np.flatnonzero(got[row, 0, query] & ~want[row, 0, query])
        leaving = np.flatnonzero(want[row, 0, query] & ~got[row, 0, query])
        out += [(int(row), int(query), int(e), int(lv)) for e, lv in zip(entering, leaving, strict=True)]
    return out


# transformers' attention modules (the indexer inside), float64, eager: DeepSeek V3.2 and GLM-5
MODULES = {"v32": ("deepseek_v32", "DeepseekV32Config", "DeepseekV32Attention"),
           "glm5": ("glm_moe_dsa", "GlmMoeDsaConfig", "GlmMoeDsaAttention")}  # fmt: skip


@pytest.mark.parametrize("variant", list(MODULES))
def test_indexer_twin_is_transformers_attention(variant: str) -> None:
    # transformers' MLA attention with its indexer in float64, our float64 angles handed in as cos / sin, its caches
    # (latent, rope key, indexer keys) holding ours. Its indexer scores in float32 (q.float()): the selections
    # are compared on the visible keys, and a query row where they differ must be a tie the twin names (torch.topk
    # breaks exact ties otherwise than ONNX's TopK: test_topk_ties), the twin with those flips then matching. The
    # same layer dense, or with the indexer's RoPE layout swapped, falls outside the tolerance.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import importlib

    folder, config_name, attention_name = MODULES[variant]
    modeling = importlib.import_module(f"transformers.models.{folder}.modeling_{folder}")
    cfg = getattr(transformers, config_name)(
        hidden_size=N, num_attention_heads=H, num_key_value_heads=H, kv_lora_rank=R, q_lora_rank=QR,
        qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V, rope_parameters=dict(DEFAULT),
        num_hidden_layers=1, vocab_size=16, rms_norm_eps=1e-6, max_position_embeddings=2560, index_topk=TOPK,
        index_head_dim=ID, index_n_heads=IH)  # fmt: skip
    cfg._attn_implementation = "eager"
    module = getattr(modeling, attention_name)(cfg, 0).double().eval()
    spec = _indexed(variant, cache="latent")
    rng = np.random.default_rng(21)
    weights = _weights(spec, rng)
    names = {"q_a_layernorm": "q_a_norm", "kv_a_layernorm": "kv_a_norm", "kv_a_proj_with_mqa": "kv_a_proj",
             "indexer.k_norm.weight": "indexer.k_norm", "indexer.k_norm.bias": "indexer.k_norm_bias"}  # fmt: skip
    with torch.no_grad():
        for name, value in module.named_parameters():
            base = name.removesuffix(".weight")
            ours = names.get(name, names.get(base.split(".")[0], base))
            held = weights[ours].T if value.ndim == 2 else weights[ours]
            value.copy_(torch.from_numpy(np.ascontiguousarray(held)))
    chosen: list[Any] = []
    module.indexer.register_forward_hook(lambda _m, _i, out: chosen.append(out))
    interleaved_index = VARIANTS[variant][1] == "interleaved"
    rotate, index_rotate = _rotation(True), _index_rotation(variant)
    for name, (pos, mask) in _calls().items():
        fed = _feeds(spec, pos, mask, rng)
        feeds = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in fed.items()}
        cache = transformers.DynamicCache(config=cfg)
        cache.update(torch.from_numpy(feeds["past_latent"]), torch.from_numpy(_to_hf_layout(feeds["past_rope_key"],
                     True)), 0)  # fmt: skip
        past_index = feeds["past_index_key"][:, 0]  # transformers caches [b, t, D], its rotated dims in its layout
        hf_index = np.concatenate([_to_hf_layout(past_index[..., :ROPE], interleaved_index),
                                   past_index[..., ROPE:]], -1)  # fmt: skip
        cache.update_indexer(torch.from_numpy(hf_index), 0)
        seen = visible(pos.shape[1], feeds["past_latent"].shape[2], feeds["attention_mask"])
        additive = torch.from_numpy(np.where(seen, 0.0, np.finfo(np.float64).min))
        ang = _angles(pos, 1.0)
        cos, sin = (torch.from_numpy(np.concatenate([f(ang), f(ang)], -1)) for f in (np.cos, np.sin))
        with torch.no_grad():
            out = module(torch.from_numpy(feeds["hidden"]), position_embeddings=(cos, sin), attention_mask=additive,
                         past_key_values=cache, position_ids=torch.from_numpy(pos))[0]  # GLM-5's: its top-k third
        theirs = np.zeros(seen.shape, bool)
        np.put_along_axis(theirs[:, 0], chosen[-1].long().numpy(), True, axis=-1)
        theirs &= seen
        want = latent64(spec, feeds, weights, rotate=rotate, index_rotate=index_rotate)
        scores, present_index = index64(spec.indexer, feeds["hidden"], _low(spec, feeds, weights), pos,
                                        feeds["past_index_key"], seen,
                                        {n[8:]: w for n, w in weights.items() if n.startswith("indexer.")},
                                        index_rotate)  # fmt: skip
        flips = _differences(theirs, want["index_selected"] & seen)
        ties = {(t.row, t.query): set(t.keys) for t in near_ties(scores, TOPK, 1e-6)}
        unnamed = [f for f in flips if not {f[2], f[3]} <= ties.get(f[:2], set())]
        assert not unnamed, (name, "a selection differs from transformers' with no tie named", unnamed)
        if flips:
            want = latent64(spec, feeds, weights, rotate=rotate, index_rotate=index_rotate, flips=flips)
        keep = slice(1, None) if name == "padded-prompt" else slice(None)  # transformers' masked rows: not zeros
        got = out.numpy()[keep]
        assert _within(got, want["output"][keep], "fp32"), (name, float(np.abs(got - want["output"][keep]).max()))
        layer = cache.layers[0]
        want_index = want["present_index_key"][:, 0]
        want_index = np.concatenate([_to_hf_layout(want_index[..., :ROPE], interleaved_index), want_index[..., ROPE:]],
                                    -1)  # fmt: skip
        np.testing.assert_allclose(layer.indexer_keys.numpy(), want_index, rtol=1e-12, atol=1e-12)
        assert np.array_equal(present_index, want["present_index_key"])
        dense = _dense(spec, feeds, weights)["output"][keep]
        assert not _within(got, dense, "fp32"), (name, "the selection changes nothing here: the test sees nothing")
        other = "v32" if variant == "glm5" else "glm5"
        swapped = latent64(spec, feeds, weights, rotate=rotate, index_rotate=_index_rotation(other))["output"][keep]
        if name != "padded-decode":  # a single query per row: a swapped layout may keep the same keys
            assert not _within(got, swapped, "fp32"), (name, "the indexer's RoPE layout is not seen")


def _low(spec: Any, feeds: dict[str, np.ndarray], weights: dict[str, np.ndarray]) -> np.ndarray:
    """The query LoRA's normed output [b, s, q_lora_rank] in float64 (the indexer's ``lora`` query)."""
    from ropeexport.components.linear import linear64
    from ropeexport.components.norm import norm64

    return norm64(spec.norm, linear64(np.asarray(feeds["hidden"], np.float64), weights["q_a_proj"]),
                  weights["q_a_norm"])  # fmt: skip


@pytest.mark.parametrize("variant", ["large4", "large4-nope"])
def test_large4_indexer_twin_is_transformers(variant: str) -> None:
    # Mistral Large 4's indexer alone (its attention is not built here): the query from LayerNorm(x) times its
    # per-head log scale, interleaved RoPE or none (a NoPE layer), float64; its top-k indices against the twin's
    # selection on the visible keys, a difference only where the twin names a tie.
    torch = pytest.importorskip("torch")
    from transformers.models.mistral_large4 import modeling_mistral_large4 as modeling

    cfg = modeling.MistralLarge4TextConfig(
        hidden_size=N, num_attention_heads=H, num_key_value_heads=H, kv_lora_rank=R, qk_nope_head_dim=NOPE,
        qk_rope_head_dim=ROPE, v_head_dim=V, num_hidden_layers=1, vocab_size=16, index_topk=TOPK,
        index_head_dim=ID, index_n_heads=IH, no_rope_layers=[int(VARIANTS[variant][1] is not None)])  # fmt: skip
    module = modeling.MistralLarge4TextIndexer(cfg, 0).double().eval()
    spec = _indexed(variant)
    rng = np.random.default_rng(23)
    weights = {n[8:]: w for n, w in _weights(spec, rng).items() if n.startswith("indexer.")}
    names = {"q_input_norm.weight": "q_norm", "q_input_norm.bias": "q_norm_bias", "k_norm.weight": "k_norm",
             "k_norm.bias": "k_norm_bias", "softmax_scaling.scale": "q_scale", "softmax_scaling.bias": "q_bias"}
    with torch.no_grad():
        for name, value in module.named_parameters():
            held = weights[names.get(name, name.removesuffix(".weight"))]
            value.copy_(torch.from_numpy(np.ascontiguousarray(held.T if value.ndim == 2 else held)))
    for name, (pos, mask) in _calls().items():
        feeds = _feeds(dataclasses.replace(spec, cache="expanded"), pos, mask, rng)
        x = feeds["hidden"].astype(np.float64)
        past = feeds["past_index_key"].astype(np.float64)
        seen = visible(pos.shape[1], past.shape[2], feeds["attention_mask"])
        cache = None
        if past.shape[2]:
            from transformers import DynamicCache

            cache = DynamicCache(config=cfg)
            hf = past[:, 0] if VARIANTS[variant][1] is None else np.concatenate(
                [_to_hf_layout(past[:, 0, :, :ROPE], True), past[:, 0, :, ROPE:]], -1)  # fmt: skip
            cache.update_indexer(torch.from_numpy(hf), 0)
        ang = _angles(pos, 1.0)
        cos, sin = (torch.from_numpy(np.concatenate([f(ang), f(ang)], -1)) for f in (np.cos, np.sin))
        additive = torch.from_numpy(np.where(seen[:, 0], 0.0, np.finfo(np.float64).min))
        with torch.no_grad():
            top = module(torch.from_numpy(x), (cos, sin), additive, torch.from_numpy(pos), past_key_values=cache)
        theirs = np.zeros(seen.shape, bool)
        np.put_along_axis(theirs[:, 0], top.long().numpy(), True, axis=-1)
        scores, _ = index64(spec.indexer, x, None, pos, past, seen, weights, _index_rotation(variant))
        ours = select64(scores, TOPK)
        ties = {(t.row, t.query): set(t.keys) for t in near_ties(scores, TOPK, 1e-6)}
        unnamed = [f for f in _differences(theirs & seen, ours & seen) if not {f[2], f[3]} <= ties.get(f[:2], set())]
        assert not unnamed, (name, unnamed)
        assert (ours & seen).sum() < seen.sum(), (name, "the selection bites nowhere: the test sees nothing")


# (variant, cache, form, dtype, weights): one row per distinct behaviour, the graph against the twin
GRAPH_ROWS = [("v32", "latent", "decomposed", "fp32", "float"), ("v32", "expanded", "fused", "fp16", "float"),
              ("glm5", "expanded", "decomposed", "fp32", "int4"), ("large4", "expanded", "decomposed", "fp32", "float"),
              ("large4-nope", "expanded", "fused", "fp32", "float")]  # fmt: skip


@pytest.mark.parametrize(("variant", "cache", "form", "dtype", "stored"), GRAPH_ROWS,
                         ids=["-".join(r) for r in GRAPH_ROWS])  # fmt: skip
def test_indexer_graph_matches_its_twin(variant: str, cache: str, form: str, dtype: str, stored: str) -> None:
    # ONNX Runtime CPU against the twin on the same stored weights (int4: the twin reads MatMulNBits' dequantized
    # values): the output and every cache within the dtype's tolerance, the selection equal, or different only on
    # a tie the twin names (the twin then recomputed with those flips: fp16's scores are rounded before they are
    # ranked). The dense layer (no indexer) falls outside the tolerance on the calls where the selection bites.
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model
    from ropeexport.components.linear import WeightFormat, is_weight

    fmt = WeightFormat.int4(dtype, block_size=16) if stored == "int4" else None
    spec = dataclasses.replace(_indexed(variant, dtype, cache, pieces=True), graph=form, weights=fmt)
    rng = np.random.default_rng(31)
    weights = _weights(spec, rng)
    model = latent_model(spec, weights)
    ops = {n.op_type for n in model.graph.node}
    assert {"TopK", "ScatterElements"} <= ops and ("Attention" in ops) == (form == "fused")
    if fmt is not None:  # the twin reads what MatMulNBits multiplies by
        weights = {n: fmt.read64(w) if is_weight(n) else w for n, w in weights.items()}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert names == ["output", *(n.replace("past_", "present_") for n in spec.cache_shapes()), "index_selected"]
    bites = 0
    for name, (pos, mask) in _calls(form).items():
        feeds = _feeds(spec, pos, mask, rng)
        got = dict(zip(names, session.run(None, feeds), strict=True))
        want = latent64(spec, feeds, weights)
        seen = visible(pos.shape[1], mask.shape[1] - pos.shape[1], mask)
        flips = _differences(got["index_selected"] & seen, want["index_selected"] & seen)
        if flips:
            scores, _ = index64(spec.indexer, feeds["hidden"], _low(spec, feeds, weights) if spec.q_lora_rank else None,
                                pos, feeds["past_index_key"], seen,
                                {n[8:]: w for n, w in weights.items() if n.startswith("indexer.")})  # fmt: skip
            ties = {(t.row, t.query): set(t.keys) for t in near_ties(scores, TOPK, 0.05 if dtype == "fp16" else 1e-4)}
            unnamed = [f for f in flips if not {f[2], f[3]} <= ties.get(f[:2], set())]
            assert not unnamed, (name, "the graph selects otherwise than the twin with no tie named", unnamed)
            want = latent64(spec, feeds, weights, flips=flips)
        for output, value in want.items():
            if output == "index_selected":
                assert np.array_equal(got[output] & seen, value & seen), name
                continue
            error = float(np.abs(got[output].astype(np.float64) - value).max())
            assert _within_rows(got[output].astype(np.float64), value, dtype), (name, output, error)
        plain = _dense(dataclasses.replace(spec, weights=None), feeds, weights)["output"]
        bites += not _within_rows(got["output"].astype(np.float64), plain, dtype)
    assert bites >= 2, "the selection changes the output on fewer than two calls: the test sees too little"


def test_indexer_decode_crosses_topk_on_its_own_caches() -> None:
    # A 3-token prompt (fewer keys than index_topk 4: dense), then decode steps at 4, 5 and 6 keys, each step fed the
    # graph's own present caches (latent and indexer key), against the twin fed its own: the selection holds
    # min(4, t) keys and leaves keys out from the step at 5 keys on, and the last step equals the twin's no-cache
    # recompute of all six tokens (the indexer's key cache holds what a recompute computes).
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model

    spec = dataclasses.replace(_indexed("v32", cache="latent", pieces=True), graph="decomposed")
    rng = np.random.default_rng(41)
    weights = _weights(spec, rng)
    session = ort.InferenceSession(latent_model(spec, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    names = [o.name for o in session.get_outputs()]
    tokens = rng.standard_normal((1, 6, N)).astype(np.float32)
    empty = {n: np.zeros((1, 1, 0, int(shape[3])), np.float32) for n, shape in spec.cache_shapes().items()}
    graph_cache, twin_cache = dict(empty), {n: v.astype(np.float64) for n, v in empty.items()}
    steps = [(0, 3), (3, 4), (4, 5), (5, 6)]
    for start, end in steps:
        common = {"hidden": tokens[:, start:end], "position_ids": np.arange(start, end)[None],
                  "attention_mask": np.ones((1, end), np.int64)}  # fmt: skip
        got = dict(zip(names, session.run(None, common | graph_cache), strict=True))
        want = latent64(spec, common | twin_cache, weights)
        assert np.array_equal(got["index_selected"], want["index_selected"]), (start, end)
        assert _within_rows(got["output"].astype(np.float64), want["output"], "fp32"), (start, end)
        kept = want["index_selected"][0, 0, -1]
        assert kept.sum() == min(TOPK, end) and (kept.all() if end <= TOPK else not kept.all()), (start, end)
        graph_cache = {n: got[n.replace("past_", "present_")] for n in empty}
        twin_cache = {n: want[n.replace("past_", "present_")] for n in empty}
    whole = latent64(spec, {"hidden": tokens, "position_ids": np.arange(6)[None],
                            "attention_mask": np.ones((1, 6), np.int64)} | {n: v.astype(np.float64)
                                                                            for n, v in empty.items()}, weights)
    np.testing.assert_allclose(whole["output"][:, -1:], want["output"], rtol=1e-12, atol=1e-12)


# (scores of one query row, index_topk): exact ties at the top-k boundary, as relu makes them
TIE_ROWS = {"all-zero": ([0.0] * 8, 3), "zeros-straddle": ([2.0, 0, 0, 1.0, 0, 0, 0, 3.0], 4),
            "masked-below": ([1.0, -np.inf, 0, 0, -np.inf, -np.inf], 4), "long-zero": ([0.0] * 300, 5)}  # fmt: skip


def test_topk_ties() -> None:
    # Measured, ONNX Runtime 1.31 CPU and torch 2.13 CPU: ONNX's TopK keeps equal scores in ascending key order, as
    # its spec says and the twin does; torch.topk (transformers' selection) keeps others on these rows. A selection
    # differing on exact ties is a tie the twin names (margin 0), never an unexplained difference.
    import onnxruntime as ort
    import torch
    from onnx import TensorProto, helper

    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, largest=1, sorted=1)
    graph = helper.make_graph([node], "topk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None]),
                              helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, None)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    torch_differs = []
    for name, (row, k) in TIE_ROWS.items():
        scores = np.array([[row]], np.float64)  # [b 1, s 1, t]
        ours = set(np.flatnonzero(select64(scores, k)[0, 0, 0]).tolist())
        runtime = set(session.run(None, {"x": scores[0].astype(np.float32), "k": np.array([k])})[1][0].tolist())
        assert runtime == ours, (name, sorted(runtime), sorted(ours))
        theirs = set(torch.tensor(scores[0]).topk(k, dim=-1).indices[0].tolist())
        torch_differs.append(theirs != ours)
        real = set(np.flatnonzero(np.isfinite(scores[0, 0])).tolist())  # masked keys: excluded by the mask anyway
        theirs, ours = theirs & real, ours & real
        ties = near_ties(scores, k, 0.0)
        if len(real) <= k:  # every visible key kept: no tie can change what the attention sees
            assert not ties and theirs == ours == real, name
            continue
        assert len(ties) == 1 and ties[0].margin == 0.0, name
        assert theirs - ours <= set(ties[0].keys) and ours - theirs <= set(ties[0].keys), name
    assert any(torch_differs), "torch.topk broke every tie as ONNX does: the measurement above is stale"


def test_near_tie_flip_names_and_applies() -> None:
    # A near tie (1e-9 apart) is named with both keys and its margin; a flip swaps exactly those two keys; a row
    # whose visible keys number no more than index_topk has no tie (it keeps them all).
    scores = np.array([[[5.0, 1.0 + 1e-9, 1.0, -2.0], [3.0, 2.0, -np.inf, -np.inf]]])  # [1, 2, 4]
    ties = near_ties(scores, 2, 1e-6)
    assert [(t.row, t.query, t.keys) for t in ties] == [(0, 0, (1, 2))] and 0 < ties[0].margin < 2e-9
    base = select64(scores, 2)[0, 0]
    flipped = select64(scores, 2, [(0, 0, 2, 1)])[0, 0]
    assert base[0].tolist() == [True, True, False, False] and flipped[0].tolist() == [True, False, True, False]
    assert np.array_equal(base[1], flipped[1]) and near_ties(scores, 2, 0.5) == ties


def test_shared_indexer_layer_reads_the_selection() -> None:
    # GLM-5's "shared" layer: no indexer of its own (no weights, no key cache), the previous full layer's selection
    # an input; graph and twin under one selection agree, and the selection changes the output.
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model

    spec = _indexed("glm5", pieces=True)
    shared = dataclasses.replace(spec, indexer=dataclasses.replace(spec.indexer, shared=True))
    assert "past_index_key" not in shared.cache_shapes() and not any("indexer" in n for n in shared.shapes(N))
    rng = np.random.default_rng(43)
    weights = _weights(shared, rng)
    session = ort.InferenceSession(latent_model(shared, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    assert "index_selected" in [i.name for i in session.get_inputs()]
    pos, mask = _calls()["far-chunk"]
    feeds = _feeds(shared, pos, mask, rng)
    selected = rng.random((2, 1, 3, 8)) < 0.5
    selected[..., -1] = True  # each query keeps at least one key
    got = session.run(["output"], feeds | {"index_selected": selected})[0]
    want = latent64(shared, feeds | {"index_selected": selected}, weights)["output"]
    assert _within_rows(got.astype(np.float64), want, "fp32")
    assert not _within_rows(got.astype(np.float64), _dense(shared, feeds, weights)["output"], "fp32")


# (indexer fields changed, the field the SpecError names)
BAD_INDEXERS = [({"topk": 0}, "index_topk"), ({"head_dim": ROPE - 2}, "index_head_dim"),
                ({"query": "latent"}, "index_query"), ({"num_heads": 0}, "index_n_heads")]  # fmt: skip


@pytest.mark.parametrize(("changes", "field"), BAD_INDEXERS, ids=[b[1] for b in BAD_INDEXERS])
def test_indexer_spec_refuses_by_field(changes: dict[str, Any], field: str) -> None:
    spec = _indexed("v32")
    with pytest.raises(SpecError) as error:
        dataclasses.replace(spec.indexer, **changes)
    assert error.value.field == field and "\n" not in str(error.value)


def test_latent_refuses_an_indexer_it_cannot_build() -> None:
    # GroupQueryAttention takes no mask to narrow; the query LoRA's output is needed for the lora query.
    spec = _indexed("v32")
    for changes, field in (({"graph": "gqa"}, "graph"), ({"q_lora_rank": 0}, "index_query")):
        with pytest.raises(SpecError) as error:
            dataclasses.replace(spec, **changes)
        assert error.value.field == field and "\n" not in str(error.value)
