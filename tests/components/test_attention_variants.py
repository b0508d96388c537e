"""The attention component's variants of the logits (``AttentionSpec``: qk_norm, scale, logit_softcap, sinks,
query_scale).

One case table (variant x graph form x dtype) runs the layer's graph in ONNX Runtime on calls with a cache, left
padding (queries that see no key) and a sliding window, against the float64 twin on the same stored weights, within
the block's verification tolerance (``verification.compare.TOLERANCES``, per element); the twin without the variant
must fall outside it, so the comparison sees the variant. Then the twin against transformers' own attention modules
(Qwen3, Gemma 2, Gemma 3, gpt-oss; eager, float64, the same float64 rotation) proves it is the reference definition,
and the spec's and weights' refusals name their field.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from ropeexport.block.static import per_row
from ropeexport.components.attention import AttentionSpec
from ropeexport.components.attention.float64 import attention64, visible
from ropeexport.components.attention.graph import attention_model
from ropeexport.components.norm import NormSpec
from ropeexport.components.query_scale import QueryScaleSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.numerics import round_once
from ropeexport.verification.compare import TOLERANCES

pytestmark = pytest.mark.fast  # attention variants against their float64 twins

H, KV, D, N = 4, 2, 8, 32  # query heads, key/value heads, head_dim, hidden
WINDOW = 3


def _variant(name: str, dtype: str) -> dict[str, Any]:
    """The spec fields of a named variant (Qwen3's norm, Gemma's norm, Gemma's scale, Gemma 2's cap, gpt-oss's
    sinks, and all at once).
    """  # noqa: D205
    fields: dict[str, dict[str, Any]] = {
        "qk_norm": {"qk_norm": NormSpec("rms", 1e-6, dtype)},
        "qk_norm_gemma": {"qk_norm": NormSpec("rms", 1e-6, dtype, offset=1.0)},
        "scale": {"scale": 0.2},
        "softcap": {"logit_softcap": 2.0},  # logits' std is near 4 here: the cap bites
        "sinks": {"sinks": True},
        "all": {"qk_norm": NormSpec("rms", 1e-6, dtype, offset=1.0), "scale": 0.5, "logit_softcap": 3.0,
                "sinks": True},
        "all_but_softcap": {"qk_norm": NormSpec("rms", 1e-6, dtype), "scale": 0.5, "sinks": True},  # tensorrt's all
        # Ministral 3's query scale (steps at positions 2, 4, 6 of the calls'), and Llama 4's formula (offset 1)
        "query_scale": {"query_scale": QueryScaleSpec("log_floor", 0.5, 2, 0, 16, dtype)},
        "query_scale_temperature": {"query_scale": QueryScaleSpec("temperature", 0.3, 3, 1, 16, dtype)},
        # Gemma 4's values: RMS-normed with no weight, and read off the key projection (no v_proj)
        "v_norm": {"v_norm": NormSpec("rms", 1e-6, dtype, wide=True)},
        "k_eq_v": {"k_eq_v": True, "v_norm": NormSpec("rms", 1e-6, dtype, wide=True)},
        # Llama 4: chunks of 3 slots from each row's first real token; its weightless L2 q/k norm
        "chunk": {"chunk": 3},
        "l2_norm": {"qk_norm": NormSpec("rms", 1e-5, dtype), "qk_weights": False},
    }  # fmt: skip
    return fields[name]


# What the variant looks like switched off (the planted mistake the comparison must see).
WITHOUT = {"qk_norm": {"qk_norm": None}, "qk_norm_gemma": {"qk_norm": "offset 0"}, "scale": {"scale": 0.0},
           "softcap": {"logit_softcap": 0.0}, "sinks": {"sinks": False}, "all": {"sinks": False},
           "all_but_softcap": {"qk_norm": None}, "query_scale": {"query_scale": None},
           "query_scale_temperature": {"query_scale": None}, "v_norm": {"v_norm": None},
           "k_eq_v": {"k_eq_v": False}, "chunk": {"chunk": 0},
           "l2_norm": {"qk_norm": None, "qk_weights": True}}  # fmt: skip
LLAMA4 = ("chunk", "l2_norm")  # one row per form (chunk) or two (the norm), not the whole cross product
FORMS = ("fused", "decomposed", "tensorrt", "gqa", "static-cache")
# The window: every form with one (the static form takes none: refused there), and gqa without one too, its
# padding-only path (the kernel's causal rule, the padding in attention_bias, the empty rows zeroed by head_sink).
CASES = [
    (variant, form, dtype, window)
    for variant, form, dtype in itertools.product([v for v in WITHOUT if v not in LLAMA4], FORMS, ("fp32", "fp16"))
    for window in ((0,) if form == "static-cache" else (WINDOW, 0) if form == "gqa" else (WINDOW,))
    if not (form == "static-cache" and _variant(variant, dtype).get("sinks"))  # refused there (test_components)
    and not (form == "tensorrt" and _variant(variant, dtype).get("logit_softcap"))  # refused: TensorRT has no softcap
] + [("chunk", form, "fp32", 0) for form in FORMS if form != "static-cache"] + [  # static-cache refuses a chunk
    ("chunk", "gqa", "fp16", 0), ("l2_norm", "fused", "fp32", 0), ("l2_norm", "gqa", "fp16", 0)]


def _weights(spec: AttentionSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored values in float64: projections with std 2 / sqrt(fan_in) (logits' std near 4, so a cap of 2 bites),
    the norms' weights near their identity (Gemma's near 0), sinks near 1 (as large as the larger logits).
    """  # noqa: D205
    sizes = {"q_proj": (N, H * D), "k_proj": (N, KV * D), "v_proj": (N, KV * D), "o_proj": (H * D, N)}
    w = {n: 2 * rng.standard_normal(s) / np.sqrt(s[0]) for n, s in sizes.items()}
    if spec.qk_norm is not None and spec.qk_weights:
        identity = 1.0 - spec.qk_norm.offset
        w |= {n: identity + 0.3 * rng.standard_normal(D) for n in ("q_norm", "k_norm")}
    if spec.sinks:
        w["sinks"] = 1.0 + rng.standard_normal(H)
    if spec.k_eq_v:  # the values are the key projection's: no v_proj
        del w["v_proj"]
    return {n: round_once(v, spec.dtype).astype(np.float64) for n, v in w.items()}


def _calls(form: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(position_ids [b, s], attention_mask [b, t]) per call: a padded decode and a chunk over a cache, and a
    left-padded prompt whose padded queries see no key. GroupQueryAttention takes s > 1 over a cache in batch 1 only.
    """  # noqa: D205
    padded = np.array([[0, 0, 1, 1, 1, 1], [1] * 6])
    chunk_rows = 1 if form == "gqa" else 2
    return {
        "padded-decode": (np.array([[4], [6]]), np.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7])),
        "chunk": (np.tile(np.arange(5, 8), (chunk_rows, 1)), np.ones((chunk_rows, 8), np.int64)),
        "padded-prompt": (np.array([[0, 0, 0, 1, 2, 3], np.arange(6)]), padded),
    }


def _feeds(spec: AttentionSpec, pos: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The call's inputs in the dtype; a static-cache call holds a buffer of past + s + 2 slots (the spare ones
    filled too: they must not count) and cache_length = past.
    """  # noqa: D205
    np_dtype = DTYPES[spec.dtype].np_dtype
    b, s = pos.shape
    past = mask.shape[1] - s
    static = spec.graph == "static-cache"
    if static:
        mask = np.hstack([mask, np.zeros((b, 2), np.int64)])
    slots = mask.shape[1] if static else past
    normal = lambda *shape: rng.standard_normal(shape).astype(np_dtype)  # noqa: E731
    feeds = {"hidden": normal(b, s, N), "position_ids": pos.astype(np.int64), "attention_mask": mask.astype(np.int64),
             "past_key": normal(b, KV, slots, D), "past_value": normal(b, KV, slots, D)}  # fmt: skip
    if static:
        feeds["cache_length"] = np.full(b, past, np.int64)
    return feeds


def _twin(spec: AttentionSpec, feeds: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]) -> dict:
    if spec.graph == "static-cache":  # evaluated as the dynamic rows it stands for
        return per_row(feeds, lambda row: attention64(spec, row, weights))
    return attention64(spec, feeds, weights)


def _without(spec: AttentionSpec, variant: str, weights: Mapping[str, np.ndarray]) -> tuple[AttentionSpec, dict]:
    """The spec with the variant switched off, and the weights it takes."""
    change = dict(WITHOUT[variant])
    if change.get("qk_norm") == "offset 0":  # Gemma's gain 1 + w read as Llama's w
        change["qk_norm"] = dataclasses.replace(spec.qk_norm, offset=0.0)  # type: ignore[arg-type]
    other = dataclasses.replace(spec, **change)
    drop = {"q_norm", "k_norm"} if other.qk_norm is None else set()
    drop |= {"sinks"} if not other.sinks else set()
    kept = {n: v for n, v in weights.items() if n not in drop}
    if spec.k_eq_v and not other.k_eq_v:  # values of a v_proj of their own, as a layer without the variant reads them
        kept["v_proj"] = round_once(np.random.default_rng(1).standard_normal((N, KV * D)) / np.sqrt(N), spec.dtype)
    return other, kept


def _within(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    tol = TOLERANCES[dtype]
    return bool(np.all(np.abs(got - want) <= tol.atol + tol.rtol * np.abs(want)))


@pytest.mark.parametrize(("variant", "form", "dtype", "window"), CASES,
                         ids=["-".join(map(str, c)) for c in CASES])  # fmt: skip
def test_attention_variant_graph_matches_its_twin(variant: str, form: str, dtype: str, window: int) -> None:
    rng = np.random.default_rng(0)
    spec = AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, dtype=dtype, graph=form, window=window,
                         **_variant(variant, dtype))  # fmt: skip
    weights = _weights(spec, rng)
    session = ort.InferenceSession(attention_model(spec, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    other, other_weights = _without(spec, variant, weights)
    seen = False
    for name, (pos, mask) in _calls(form).items():
        feeds = _feeds(spec, pos, mask, rng)
        got = dict(zip(("output", "present_key", "present_value"), session.run(None, feeds), strict=True))
        want = _twin(spec, feeds, weights)
        for output, value in want.items():
            error = float(np.abs(got[output].astype(np.float64) - value).max())
            assert _within(got[output].astype(np.float64), value, dtype), (name, output, error)
        if name == "padded-prompt":  # row 0's two padded queries see no key: zeros, sinks or not
            np.testing.assert_array_equal(got["output"][0, :2], 0.0)
        seen |= not _within(got["output"].astype(np.float64), _twin(other, feeds, other_weights)["output"], dtype)
    assert seen, f"the twin without {variant} agrees with the graph: the comparison cannot see the variant"


def _rotate64(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """x [b, heads, s, d] rotated at pos [b, s], half layout, base 10000: what the module below is handed as cos/sin."""
    cos, sin = _cos_sin(pos)
    a, b = x[..., : D // 2], x[..., D // 2 :]
    cos, sin = cos[:, None, :, : D // 2], sin[:, None, :, : D // 2]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _cos_sin(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 cos and sin [b, s, d] (each half the same), as transformers' rotary embedding hands them over."""
    angles = pos[..., None] * 10000.0 ** (-np.arange(0, D, 2) / D)  # [b, s, d / 2]
    return np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))


# (model, its attention module, config fields, our spec's fields): tiny, float64, eager attention.
REFERENCES = [
    ("qwen3", "Qwen3Config", "Qwen3Attention", {}, {"qk_norm": NormSpec("rms", 1e-6)}),
    ("gemma2", "Gemma2Config", "Gemma2Attention", {"query_pre_attn_scalar": 16, "attn_logit_softcapping": 2.0},
     {"scale": 0.25, "logit_softcap": 2.0}),
    ("gemma3", "Gemma3TextConfig", "Gemma3Attention", {"query_pre_attn_scalar": 16},
     {"qk_norm": NormSpec("rms", 1e-6, offset=1.0), "scale": 0.25}),
    ("gpt_oss", "GptOssConfig", "GptOssAttention", {"attention_bias": True, "num_local_experts": 2},
     {"sinks": True}),
    # a Gemma 4 full layer (its one layer is full): its own head_dim, keys as values, q/k norms times the weight in
    # float32, the values' weightless norm, scaling 1.0
    ("gemma4", "Gemma4TextConfig", "Gemma4TextAttention", {"global_head_dim": D, "attention_k_eq_v": True,
                                                           "num_global_key_value_heads": KV,
                                                           "hidden_size_per_layer_input": 0},
     {"qk_norm": NormSpec("rms", 1e-6, wide=True), "scale": 1.0, "v_norm": NormSpec("rms", 1e-6, wide=True),
      "k_eq_v": True}),
]  # fmt: skip


@pytest.mark.parametrize(("model", "config_class", "module_class", "config", "fields"), REFERENCES,
                         ids=[r[0] for r in REFERENCES])  # fmt: skip
def test_attention_twin_is_transformers_attention(
    model: str, config_class: str, module_class: str, config: dict[str, Any], fields: dict[str, Any]
) -> None:
    # transformers' eager attention in float64 with our float64 rotation handed in as cos / sin, over a cache, with
    # left padding and a window in the additive mask (finfo.min, as transformers builds it). Its softmax (and its
    # q/k norms) run in float32 inside: the twin agrees within the fp32 tolerance, the twin without the variant
    # does not. Every query sees a key here except in gpt-oss, whose sinks take such a row's weight (zeros, as ours).
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import importlib

    modeling = importlib.import_module(f"transformers.models.{model}.modeling_{model}")
    cfg = getattr(transformers, config_class)(hidden_size=N, num_attention_heads=H, num_key_value_heads=KV,
                                              head_dim=D, num_hidden_layers=1, intermediate_size=16, vocab_size=16,
                                              rms_norm_eps=1e-6, **config)  # fmt: skip
    cfg._attn_implementation = "eager"
    module = getattr(modeling, module_class)(cfg, 0).double().eval()
    spec = AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, window=WINDOW, **fields)
    rng = np.random.default_rng(3)
    weights = _weights(spec, rng)
    if model == "gpt_oss":
        weights |= {f"{n}_bias": 0.3 * rng.standard_normal(w) for n, w in (("q", H * D), ("k", KV * D),
                                                                            ("v", KV * D), ("o", N))}  # fmt: skip
    with torch.no_grad():
        for name, value in module.named_parameters():
            ours = name.replace(".weight", "").replace("_proj.bias", "_bias")
            held = weights[ours].T if ours.endswith("_proj") else weights[ours]
            value.copy_(torch.from_numpy(np.ascontiguousarray(held)))
    calls = {n: c for n, c in _calls("fused").items() if model == "gpt_oss" or n != "padded-prompt"}
    for name, (pos, mask) in calls.items():
        feeds = _feeds(dataclasses.replace(spec, dtype="fp32"), pos, mask, rng)
        feeds = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in feeds.items()}
        want = attention64(spec, feeds, weights, rotate=_rotate64)
        cache = transformers.DynamicCache()
        cache.update(torch.from_numpy(feeds["past_key"]), torch.from_numpy(feeds["past_value"]), 0)
        seen = visible(pos.shape[1], feeds["past_key"].shape[2], feeds["attention_mask"], WINDOW)
        additive = torch.from_numpy(np.where(seen, 0.0, np.finfo(np.float64).min))
        cos, sin = (torch.from_numpy(t[..., : D // 2] if model == "gpt_oss" else t) for t in _cos_sin(pos))
        shared = {"shared_kv_states": {}} if model == "gemma4" else {}  # its layers that share none read nothing
        with torch.no_grad():
            out, _ = module(torch.from_numpy(feeds["hidden"]), position_embeddings=(cos, sin),
                            attention_mask=additive, past_key_values=cache, **shared)  # fmt: skip
        got = {"output": out.numpy(), "present_key": cache.layers[0].keys.numpy()}
        for output, value in got.items():
            assert _within(value, want[output], "fp32"), (name, output, float(np.abs(value - want[output]).max()))
        other, other_weights = _without(spec, {"qwen3": "qk_norm", "gemma2": "softcap", "gemma3": "qk_norm_gemma",
                                               "gpt_oss": "sinks", "gemma4": "v_norm"}[model], weights)  # fmt: skip
        assert not _within(got["output"], attention64(other, feeds, other_weights, rotate=_rotate64)["output"], "fp32")


# (spec fields, weights changed: name -> value or None to drop, the field the SpecError names)
BAD_WEIGHTS = [
    ({"sinks": True}, {"sinks": None}, "sinks"),
    ({"sinks": True}, {"sinks": np.zeros(H + 1)}, "sinks"),
    ({}, {"sinks": np.zeros(H)}, "sinks"),
    ({"qk_norm": NormSpec("rms", 1e-6)}, {"q_norm": np.ones(D - 1)}, "qk_norm"),
    ({"qk_norm": NormSpec("rms", 1e-6)}, {"k_norm": None}, "qk_norm"),
    ({}, {"q_norm": np.ones(D), "k_norm": np.ones(D)}, "qk_norm"),
]


@pytest.mark.parametrize(("fields", "changed", "field"), BAD_WEIGHTS)
def test_attention_refuses_weights_its_variants_cannot_read(
    fields: dict[str, Any], changed: dict[str, Any], field: str
) -> None:
    spec = AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, **fields)
    weights = _weights(spec, np.random.default_rng(4))
    weights = {n: v for n, v in (weights | changed).items() if v is not None}
    feeds = _feeds(spec, *_calls("fused")["chunk"], np.random.default_rng(5))
    for build in (lambda: attention_model(spec, weights), lambda: attention64(spec, feeds, weights)):
        with pytest.raises(SpecError) as error:
            build()
        assert error.value.field == field and "\n" not in str(error.value)


@pytest.mark.parametrize("variant", list(WITHOUT))
@pytest.mark.parametrize("form", ["tensorrt", "decomposed"])
def test_tensorrt_parses_each_variant_in_its_forms(variant: str, form: str) -> None:
    # ropeexport check-trt's table (onnx-tensorrt operators.md, 10.15): the tensorrt form from 10.14 (its Attention),
    # the decomposed form from 10.13; the tensorrt form takes no softcap (refused by the spec, test_components).
    import ropeexport as rx

    for dtype in ("fp32", "fp16"):
        fields = _variant(variant, dtype)
        if form == "tensorrt" and fields.get("logit_softcap"):
            continue
        window = 0 if fields.get("chunk") else WINDOW  # a layer is chunked or sliding
        spec = AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, dtype=dtype, graph=form, window=window,
                             **fields)  # fmt: skip
        model = attention_model(spec, _weights(spec, np.random.default_rng(6)))
        verdicts = {v: rx.check_trt(model, v).compatible for v in ("10.13", "10.14", "10.15")}
        assert verdicts == {"10.13": form == "decomposed", "10.14": True, "10.15": True}, (dtype, verdicts)


# (left padding per row, tokens, chunk): the twin's chunk rule against transformers' own mask of a prompt (its
# cache of a chunked layer keeps only the last chunk's slots, so a mask over a cache is not comparable slot for slot:
# the decoder's cached calls are compared with transformers' logits in tests/decoder)
CHUNK_MASKS = [((0, 0), 9, 4), ((3, 0), 11, 4), ((2, 5), 11, 3)]


@pytest.mark.parametrize(("padding", "new", "chunk"), CHUNK_MASKS, ids=[str(c) for c in CHUNK_MASKS])
def test_chunked_visibility_is_transformers_chunked_mask(padding: tuple[int, ...], new: int, chunk: int) -> None:
    # transformers 5.23's create_chunked_causal_mask (Llama 4's chunked layers, eager): the chunks start at each
    # row's first real token; the twin's rule must be that mask on every real query row
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from transformers.masking_utils import create_chunked_causal_mask

    past, t = 0, new
    mask = np.ones((len(padding), t), np.int64)
    for row, left in enumerate(padding):
        mask[row, :left] = 0
    config = transformers.Llama4TextConfig(attention_chunk_size=chunk, num_hidden_layers=1, hidden_size=8,
                                           num_attention_heads=1, num_key_value_heads=1, head_dim=8)  # fmt: skip
    config._attn_implementation = "eager"
    theirs = create_chunked_causal_mask(config=config, inputs_embeds=torch.zeros(len(padding), new, 8),
                                        attention_mask=torch.from_numpy(mask), past_key_values=None,
                                        position_ids=torch.arange(t)[None])  # fmt: skip
    theirs = (theirs == 0).numpy() if theirs.dtype != torch.bool else theirs.numpy()  # additive or boolean
    ours = visible(new, past, mask, chunk=chunk)
    real = mask[:, past:].astype(bool)  # query rows that are real tokens (padding rows see nothing in ours)
    for row in range(len(padding)):
        np.testing.assert_array_equal(ours[row, 0][real[row]], theirs[row, 0][real[row]])
    assert not np.array_equal(ours, visible(new, past, mask)), "the chunks hide nothing here: the case is too short"


def test_a_chunk_is_refused_by_the_static_cache_and_beside_a_window() -> None:
    with pytest.raises(SpecError, match="chunk: is not offered in the static-cache form"):
        AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, graph="static-cache", chunk=3)
    with pytest.raises(SpecError, match="chunk: a layer is chunked or sliding, not both"):
        AttentionSpec(num_heads=H, num_kv_heads=KV, head_dim=D, window=4, chunk=3)
