"""The ``latent`` component (MLA): its float64 twin against transformers 5.23's ``DeepseekV3Attention`` (eager,
float64), its two caches against each other, its graph in ONNX Runtime against the twin, and its refusals.

Case tables: (rope layout, query LoRA, YaRN) for the reference; (cache, dtype) for the graph. Every call has a cache,
left padding (queries that see no key output zeros) and a decode step; the twin with a planted mistake (the nope dims
rotated, the mscale left out) must fall outside the tolerance, so each comparison sees what it checks.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import numpy as np
import pytest

from ropeexport.components.attention.float64 import visible
from ropeexport.components.latent import LatentSpec, softmax_scale
from ropeexport.components.latent.float64 import latent64
from ropeexport.components.norm import NormSpec
from ropeexport.components.query_scale import LearnedScaleSpec
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.numerics import round_once
from ropeexport.verification.compare import TOLERANCES

pytestmark = pytest.mark.fast  # one attention layer against its float64 twin

# heads, hidden, head widths (nope + rope 16: GroupQueryAttention's head size is a multiple of 8), kv and q LoRA ranks
H, N, NOPE, ROPE, V, R, QR = 4, 32, 12, 4, 6, 12, 10
YARN = {"rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "original_max_position_embeddings": 64, "rope_theta": 10000.0}  # fmt: skip
DEFAULT = {"rope_type": "default", "rope_theta": 10000.0}


def _spec(q_lora: bool = True, scale: float = 0.0, dtype: str = "fp32", cache: str = "expanded") -> LatentSpec:
    return LatentSpec(num_heads=H, kv_lora_rank=R, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V,
                      norm=NormSpec("rms", 1e-6, dtype), q_lora_rank=QR if q_lora else 0, scale=scale, dtype=dtype,
                      cache=cache)  # fmt: skip


def _weights(spec: LatentSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Stored values in float64: projections std 2 / sqrt(fan_in) (logits of a few units), norms near 1."""
    w = {n: (1.0 + 0.3 * rng.standard_normal(s)) if n.endswith("_norm") else 2 * rng.standard_normal(s) / np.sqrt(s[0])
         for n, s in spec.shapes(N).items()}  # fmt: skip
    return {n: round_once(v, spec.dtype).astype(np.float64) for n, v in w.items()}


def _angles(pos: np.ndarray, factor: float) -> np.ndarray:
    """float64 [b, s, rope / 2]: position times each pair's frequency (the nope dims have none)."""
    return pos[..., None] * (10000.0 ** (-np.arange(0, ROPE, 2) / ROPE)) / factor


def _rotation(interleaved: bool, factor: float = 1.0) -> Any:
    """x [b, heads, s, rope] rotated at pos [b, s] in float64, pairs (2i, 2i + 1) in place or halves (i, i + r/2)."""

    def rotate(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        ang = _angles(pos, factor)[:, None]
        cos, sin = np.cos(ang), np.sin(ang)
        if interleaved:
            a, b = x[..., 0::2], x[..., 1::2]
            out = np.empty_like(x)
            out[..., 0::2], out[..., 1::2] = a * cos - b * sin, b * cos + a * sin
            return out
        a, b = x[..., : ROPE // 2], x[..., ROPE // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)

    return rotate


def _calls(form: str = "decomposed") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(position_ids [b, s], attention_mask [b, t]) per call: a padded decode, a chunk over a cache at far positions,
    and a left-padded prompt whose padded queries see no key. GroupQueryAttention takes s > 1 over a cache in batch
    1 only.
    """  # noqa: D205
    rows = 1 if form == "gqa" else 2
    return {
        "padded-decode": (np.array([[4], [6]]), np.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7])),
        "far-chunk": (np.tile(np.arange(2045, 2048), (rows, 1)), np.ones((rows, 8), np.int64)),
        "padded-prompt": (np.array([[0, 0, 0, 1, 2, 3], np.arange(6)]), np.array([[0, 0, 1, 1, 1, 1], [1] * 6])),
    }


def _feeds(spec: LatentSpec, pos: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The call's inputs in the dtype; the cache random (what earlier calls left)."""
    np_dtype = DTYPES[spec.dtype].np_dtype
    b, s = pos.shape
    past = mask.shape[1] - s
    feeds = {"hidden": rng.standard_normal((b, s, N)).astype(np_dtype), "position_ids": pos.astype(np.int64),
             "attention_mask": mask.astype(np.int64)}  # fmt: skip
    for name, shape in spec.cache_shapes().items():
        feeds[name] = rng.standard_normal((b, int(shape[1]), past, int(shape[3]))).astype(np_dtype)
    return feeds


def _within(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    tol = TOLERANCES[dtype]
    return bool(np.all(np.abs(got - want) <= tol.atol + tol.rtol * np.abs(want)))


def _within_rows(got: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    """Each element within the dtype's tolerance of the twin, rtol taken of its row's largest |value|: an MLA layer
    rounds six times before o_proj's sum in fp16 (q LoRA, its norm, kv_a, its norm, kv_b, the attention), each
    rounding at the size of the row's largest terms, so a small output of a row with large ones carries their error
    (measured: fp16 errors up to 2.7e-3 of the row's largest; the planted mistakes below, 8e-2 and more).
    """  # noqa: D205
    tol = TOLERANCES[dtype]
    scale = np.abs(want).max(axis=-1, keepdims=True)
    return bool(np.all(np.abs(got - want) <= tol.atol + tol.rtol * scale))


def _to_hf_layout(x: np.ndarray, interleaved: bool) -> np.ndarray:
    """Our rotated rope key [.., rope] in transformers' layout: its interleaved rotation writes the rotated even
    dims first, then the odd ones (``apply_rotary_pos_emb_interleave``: cat(x1', x2')); halves are the same.
    """  # noqa: D205
    return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1) if interleaved else x


# (rope_interleave, query LoRA, YaRN): transformers' attention module, float64, eager.
REFERENCES = list(itertools.product((True, False), (True, False), (True, False)))


@pytest.mark.parametrize(("interleaved", "q_lora", "yarn"), REFERENCES,
                         ids=[f"{'inter' if i else 'half'}-{'qlora' if q else 'qproj'}-{'yarn' if y else 'default'}"
                              for i, q, y in REFERENCES])  # fmt: skip
def test_latent_twin_is_transformers_attention(interleaved: bool, q_lora: bool, yarn: bool) -> None:
    # transformers' DeepseekV3Attention in float64 with our float64 angles handed in as cos / sin (YaRN's table
    # factor is 1 with mscale = mscale_all_dim, as in DeepSeek V3), its latent cache (transformers 5.23 caches the
    # normed latent and the rotated rope key) holding ours. Its softmax runs in float32 inside: within the fp32
    # tolerance. The twin without the mscale (YaRN), or with the rope key's layout not matching the query's, is not.
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as modeling

    rope = dict(YARN if yarn else DEFAULT)
    cfg = transformers.DeepseekV3Config(hidden_size=N, num_attention_heads=H, num_key_value_heads=H,
                                        kv_lora_rank=R, q_lora_rank=QR if q_lora else None, qk_nope_head_dim=NOPE,
                                        qk_rope_head_dim=ROPE, v_head_dim=V, rope_interleave=interleaved,
                                        rope_parameters=rope, num_hidden_layers=1, vocab_size=16,
                                        rms_norm_eps=1e-6, max_position_embeddings=2560)  # fmt: skip
    cfg._attn_implementation = "eager"
    module = modeling.DeepseekV3Attention(cfg, 0).double().eval()
    scale = softmax_scale(NOPE + ROPE, rope)
    assert scale == pytest.approx(module.scaling, rel=1e-15)
    spec = _spec(q_lora, scale=scale)
    rng = np.random.default_rng(7)
    weights = _weights(spec, rng)
    names = {"q_a_layernorm": "q_a_norm", "kv_a_layernorm": "kv_a_norm", "kv_a_proj_with_mqa": "kv_a_proj"}
    with torch.no_grad():
        for name, value in module.named_parameters():
            ours = names.get(name.split(".")[0], name.split(".")[0])
            held = weights[ours].T if ours.endswith("_proj") else weights[ours]
            value.copy_(torch.from_numpy(np.ascontiguousarray(held)))
    rotate = _rotation(interleaved)
    for name, (pos, mask) in _calls().items():
        feeds = _feeds(dataclasses.replace(spec, cache="latent"), pos, mask, rng)
        feeds = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in feeds.items()}
        want = latent64(dataclasses.replace(spec, cache="latent"), feeds, weights, rotate=rotate)
        cache = transformers.DynamicCache()
        cache.update(torch.from_numpy(feeds["past_latent"]),
                     torch.from_numpy(_to_hf_layout(feeds["past_rope_key"], interleaved)), 0)  # fmt: skip
        seen = visible(pos.shape[1], feeds["past_latent"].shape[2], feeds["attention_mask"])
        additive = torch.from_numpy(np.where(seen, 0.0, np.finfo(np.float64).min))
        ang = _angles(pos, 1.0)
        cos, sin = (torch.from_numpy(np.concatenate([f(ang), f(ang)], -1)) for f in (np.cos, np.sin))
        with torch.no_grad():
            out, _ = module(torch.from_numpy(feeds["hidden"]), position_embeddings=(cos, sin),
                            attention_mask=additive, past_key_values=cache)  # fmt: skip
        got = out.numpy()
        if name == "padded-prompt":  # transformers' fully masked rows attend uniformly; ours output zeros
            got, want_out = got[1:], want["output"][1:]
        else:
            want_out = want["output"]
        assert _within(got, want_out, "fp32"), (name, float(np.abs(got - want_out).max()))
        # its RMSNorm computes in float32 inside (the latent within fp32's tolerance); the rope key is float64 all along
        assert _within(cache.layers[0].keys.numpy(), want["present_latent"], "fp32"), name
        np.testing.assert_allclose(
            cache.layers[0].values.numpy(), _to_hf_layout(want["present_rope_key"], interleaved), rtol=1e-12, atol=1e-12
        )
        wrong = latent64(dataclasses.replace(spec, cache="latent"), feeds, weights, rotate=_rotation(not interleaved))
        assert not _within(got, wrong["output"][1:] if name == "padded-prompt" else wrong["output"], "fp32"), name
        if yarn:
            plain = latent64(dataclasses.replace(spec, cache="latent", scale=0.0), feeds, weights, rotate=rotate)
            assert not _within(got, plain["output"][1:] if name == "padded-prompt" else plain["output"], "fp32")


CACHE_KINDS = ("expanded", "latent")


def _piece(layout: str, dtype: str) -> Any:
    """The rope family's piece over the rope slice: YaRN factor 40 with DeepSeek's mscale pair, max 2560 positions."""
    import ropeexport as rx
    from ropeexport.catalog import recipe_for

    params = {"factor": 40.0, "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 1.0,
              "beta_fast": 32.0, "beta_slow": 1.0}  # fmt: skip
    spec = rx.spec(
        "rope",
        artifact="block",
        head_dim=ROPE,
        num_heads=H,
        num_kv_heads=1,
        layout=layout,
        scaling="yarn",
        scaling_params=params,
        max_positions=2560,
        dtype=dtype,
        graph="decomposed",
    )
    return recipe_for(spec).piece_of(spec)


# (cache, dtype, rope layout, form, weights): the graph in ONNX Runtime CPU against the twin on the same stored weights
# (int4: MatMulNBits blocks, the twin reading the dequantized values; the expanded cache's, as the latent refuses it).
GRAPHS = [(c, d, lay, form, "float") for c, d, lay, form in itertools.product(CACHE_KINDS, ("fp32", "fp16"),
                                                                              ("interleaved", "half"),
                                                                              ("decomposed", "fused", "gqa"))
          if (lay == "interleaved" or d == "fp32") and not (form != "decomposed" and c == "latent")]  # fmt: skip
GRAPHS += [("expanded", d, "interleaved", form, "int4") for d in ("fp32", "fp16")
           for form in ("decomposed", "fused", "gqa")]  # fmt: skip


@pytest.mark.parametrize(("cache", "dtype", "layout", "form", "stored"), GRAPHS, ids=["-".join(c) for c in GRAPHS])
def test_latent_graph_matches_its_twin(cache: str, dtype: str, layout: str, form: str, stored: str) -> None:
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model
    from ropeexport.components.linear import WeightFormat

    fmt = WeightFormat.int4(dtype, block_size=16) if stored == "int4" else None
    spec = dataclasses.replace(_spec(True, softmax_scale(NOPE + ROPE, YARN), dtype, cache), graph=form,
                               position=_piece(layout, dtype), weights=fmt)  # fmt: skip
    rng = np.random.default_rng(11)
    weights = _weights(spec, rng)
    model = latent_model(spec, weights)
    ops = {n.op_type for n in model.graph.node}
    kernel = {"fused": "Attention", "gqa": "GroupQueryAttention"}.get(form)
    assert (kernel in ops, "MatMulNBits" in ops) == (kernel is not None, stored == "int4")
    if fmt is not None:  # the twin reads what MatMulNBits multiplies by
        weights = {n: fmt.read64(w) if n.endswith("_proj") else w for n, w in weights.items()}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert names == ["output", *(n.replace("past_", "present_") for n in spec.cache_shapes())]
    piece = spec.position
    assert piece is not None and piece.rotate64 is not None
    m = 0.1 * math.log(YARN["factor"]) + 1.0  # YaRN's mscale(40, mscale_all_dim 1)
    planted = {"mscale left out of the softmax scale": (dataclasses.replace(spec, scale=0.0), None),
               "mscale on cos/sin as well (the factor squared)": (spec, lambda x, p: m * piece.rotate64(x, p)),
               "rope slice not rotated": (dataclasses.replace(spec, position=None), None)}  # fmt: skip
    seen = dict.fromkeys(planted, False)
    for name, (pos, mask) in _calls(form).items():
        feeds = _feeds(spec, pos, mask, rng)
        got = dict(zip(names, session.run(None, feeds), strict=True))
        want = latent64(spec, feeds, weights)
        for output, value in want.items():
            error = float(np.abs(got[output].astype(np.float64) - value).max())
            assert _within_rows(got[output].astype(np.float64), value, dtype), (name, output, error)
        if name == "padded-prompt":  # row 0's two padded queries see no key: zeros
            np.testing.assert_array_equal(got["output"][0, :2], 0.0)
        for mistake, (other, rotate) in planted.items():
            wrong = latent64(other, feeds, weights, rotate)["output"]
            seen[mistake] |= not _within_rows(got["output"].astype(np.float64), wrong, dtype)
    assert all(seen.values()), seen


# Mistral 4's query scale (``LatentSpec.query_scale``, 1 + 0.1 log(1 + floor(pos / 64))) in each graph that builds it:
# (cache, form). The far chunk (positions 2045-2047) is scaled by 1 + 0.1 ln 32, the decodes at 4 and 6 by 1.
QUERY_SCALED = [("expanded", "decomposed"), ("latent", "decomposed"), ("expanded", "fused"), ("expanded", "gqa")]


@pytest.mark.parametrize(("cache", "form"), QUERY_SCALED, ids=["-".join(c) for c in QUERY_SCALED])
def test_latent_query_scale_matches_its_twin(cache: str, form: str) -> None:
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model
    from ropeexport.components.query_scale import QueryScaleSpec

    scaled = QueryScaleSpec("log_floor", 0.1, 64, 0, 2560)
    spec = dataclasses.replace(_spec(True, softmax_scale(NOPE + ROPE, YARN), "fp32", cache), graph=form,
                               position=_piece("interleaved", "fp32"), query_scale=scaled)  # fmt: skip
    rng = np.random.default_rng(13)
    weights = _weights(spec, rng)
    session = ort.InferenceSession(latent_model(spec, weights).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    unscaled_seen = False
    for name, (pos, mask) in _calls(form).items():
        feeds = _feeds(spec, pos, mask, rng)
        got = dict(zip(names, session.run(None, feeds), strict=True))
        want = latent64(spec, feeds, weights)
        assert _within_rows(got["output"].astype(np.float64), want["output"], "fp32"), name
        unscaled = latent64(dataclasses.replace(spec, query_scale=None), feeds, weights)["output"]
        unscaled_seen |= not _within_rows(got["output"].astype(np.float64), unscaled, "fp32")
    assert unscaled_seen  # the scale is really applied: the twin without it falls outside at the far chunk


def test_latent_caches_agree_and_the_latent_one_is_smaller() -> None:
    # The same layer, cache for cache: the latent cache's twin expands what it holds, so both twins give one output
    # for one history (float64, to 1e-12); the cache's bytes per token are the spec's shapes, DeepSeek V3's printed.
    rng = np.random.default_rng(12)
    expanded, latent = _spec(cache="expanded"), _spec(cache="latent")
    weights = _weights(expanded, rng)
    pos, mask = np.array([[0, 1, 2, 3, 4]]), np.ones((1, 5), np.int64)
    history = {"hidden": rng.standard_normal((1, 5, N)), "position_ids": pos, "attention_mask": mask}
    rotate = _rotation(True)
    first_e = latent64(expanded, history | {"past_key": np.zeros((1, H, 0, NOPE + ROPE)),
                                            "past_value": np.zeros((1, H, 0, V))}, weights, rotate)  # fmt: skip
    first_l = latent64(latent, history | {"past_latent": np.zeros((1, 1, 0, R)),
                                          "past_rope_key": np.zeros((1, 1, 0, ROPE))}, weights, rotate)  # fmt: skip
    step = {
        "hidden": rng.standard_normal((1, 1, N)),
        "position_ids": np.array([[5]]),
        "attention_mask": np.ones((1, 6)),
    }
    e = latent64(expanded, step | {"past_key": first_e["present_key"], "past_value": first_e["present_value"]},
                 weights, rotate)  # fmt: skip
    lat = latent64(latent, step | {"past_latent": first_l["present_latent"],
                                   "past_rope_key": first_l["present_rope_key"]}, weights, rotate)  # fmt: skip
    np.testing.assert_allclose(lat["output"], e["output"], rtol=1e-12, atol=1e-12)
    assert expanded.cache_bytes_per_token() == H * (NOPE + ROPE + V) * 4
    assert latent.cache_bytes_per_token() == (R + ROPE) * 4
    v3 = {"num_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    sizes = {c: LatentSpec(**v3, norm=NormSpec("rms", 1e-6, "fp16"), dtype="fp16", cache=c).cache_bytes_per_token()
             for c in ("expanded", "latent")}  # fmt: skip
    assert sizes == {"expanded": 128 * (192 + 128) * 2, "latent": (512 + 64) * 2}  # 81920 vs 1152 bytes a layer


# (spec fields changed, the field the SpecError names)
BAD_SPECS = [
    ({"qk_rope_head_dim": 0, "position": "piece"}, "qk_rope_head_dim"),  # 0 only on a NoPE layer (no position)
    ({"kv_sharing": "borrow"}, "kv_sharing"),
    ({"query_scale": "learned_log"}, "query_scale"),  # a spec of components.query_scale, not a name
    ({"qk_rope_head_dim": 5}, "qk_rope_head_dim"),
    ({"kv_lora_rank": 0}, "kv_lora_rank"),
    ({"cache": "paged"}, "latent_cache"),
    ({"graph": "static-cache"}, "graph"),
    ({"graph": "tensorrt"}, "graph"),
    ({"scale": -1.0}, "attn_scale"),
    ({"norm": NormSpec("layer", 1e-6)}, "norm"),
]


@pytest.mark.parametrize(("changes", "field"), BAD_SPECS, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD_SPECS)])
def test_latent_spec_refuses_by_field(changes: dict[str, Any], field: str) -> None:
    changes = {k: _piece("interleaved", "fp32") if v == "piece" else v for k, v in changes.items()}
    with pytest.raises(SpecError) as error:
        dataclasses.replace(_spec(), **changes)
    assert error.value.field == field and "\n" not in str(error.value)


def test_latent_refuses_weights_it_cannot_read() -> None:
    from ropeexport.components.latent.graph import latent_model

    spec = _spec()
    weights = _weights(spec, np.random.default_rng(13))
    for form in ("fused", "gqa"):  # built over the expanded cache only
        with pytest.raises(SpecError) as error:
            latent_model(dataclasses.replace(spec, cache="latent", graph=form), weights)
        assert error.value.field == "graph"
    for changed in ({"kv_b_proj": None}, {"q_a_norm": np.ones(QR + 1)}, {"q_proj": np.ones((N, H * (NOPE + ROPE)))}):
        bad = {n: v for n, v in (weights | changed).items() if v is not None}
        with pytest.raises(SpecError) as error:
            latent_model(spec, bad)
        assert error.value.field == "weights" and "\n" not in str(error.value)



# Mistral Large 4's layer (``architectures.mistral_large4_text``): (label, cache, form, NoPE, kv_sharing). The learned
# query scale on every row; a NoPE layer has no rope slice (qk_rope_head_dim 0, the nope part nope + rope wide); a
# reusing layer reads another's whole latent and rotated rope key (shared_latent / shared_rope_key), no cache.
LARGE4 = [("nope", "expanded", "decomposed", True, ""), ("nope", "expanded", "fused", True, ""),
          ("nope", "expanded", "gqa", True, ""), ("nope", "latent", "decomposed", True, ""),
          ("rope", "expanded", "gqa", False, ""), ("rope-reuse", "latent", "decomposed", False, "reuse"),
          ("nope-reuse", "latent", "decomposed", True, "reuse")]  # fmt: skip


def _large4(cache: str, form: str, nope: bool, sharing: str) -> LatentSpec:
    return LatentSpec(num_heads=H, kv_lora_rank=R, qk_nope_head_dim=NOPE + ROPE if nope else NOPE,
                      qk_rope_head_dim=0 if nope else ROPE, v_head_dim=V, norm=NormSpec("rms", 1e-5, "fp32"),
                      cache=cache, graph=form, position=None if nope else _piece("interleaved", "fp32"),
                      query_scale=LearnedScaleSpec(2560, "fp32"), kv_sharing=sharing)  # fmt: skip


@pytest.mark.parametrize(("label", "cache", "form", "nope", "sharing"), LARGE4,
                         ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in LARGE4])  # fmt: skip
def test_mistral_large4_layer_graph_matches_its_twin(label: str, cache: str, form: str, nope: bool,
                                                     sharing: str) -> None:  # fmt: skip
    import onnxruntime as ort

    from ropeexport.components.latent.graph import latent_model

    spec = _large4(cache, form, nope, sharing)
    rng = np.random.default_rng(14)
    weights = _weights(spec, rng)
    weights["q_scale"], weights["q_scale_bias"] = 0.3 * rng.standard_normal(H), 1 + 0.3 * rng.standard_normal(H)
    assert ("kv_a_proj" in weights) == (sharing != "reuse")
    session = ort.InferenceSession(latent_model(spec, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])  # fmt: skip
    names = [o.name for o in session.get_outputs()]
    unscaled = dataclasses.replace(spec, query_scale=None)  # planted: the learned scale left out
    plain = {n: w for n, w in weights.items() if not n.startswith("q_scale")}
    for name, (pos, mask) in _calls(form).items():
        feeds = _feeds(spec, pos, mask, rng)
        if sharing:  # the source's latent and rope key over the whole sequence, in place of a cache
            feeds = {k: v for k, v in feeds.items() if not k.startswith("past_")}
            b, t = mask.shape
            feeds |= {"shared_latent": rng.standard_normal((b, 1, t, R)).astype(np.float32),
                      "shared_rope_key": rng.standard_normal((b, 1, t, 0 if nope else ROPE)).astype(np.float32)}
        got = dict(zip(names, session.run(None, feeds), strict=True))
        want = latent64(spec, feeds, weights)
        assert set(want) == set(names), (label, sorted(want))
        for output, value in want.items():
            assert got[output].shape == value.shape, (label, name, output)
            if value.size:  # a NoPE layer's rope key cache is 0 wide
                assert _within_rows(got[output].astype(np.float64), value, "fp32"), (label, name, output)
        wrong = latent64(unscaled, feeds, plain)["output"]
        assert not _within_rows(got["output"].astype(np.float64), wrong, "fp32"), (label, name)
