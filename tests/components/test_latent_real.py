"""The ``latent`` component at a real layer's width (DeepSeek-V2-Lite's attention), to the last of its max_positions.

Slow (a 14M-weight layer, a 163840-position table): CI's full run, not the fast tier. Shares ``test_latent``'s twin
tolerance and its helpers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ropeexport.components.latent import LatentSpec, softmax_scale
from ropeexport.components.latent.float64 import latent64
from ropeexport.components.norm import NormSpec
from ropeexport.dtypes import DTYPES
from ropeexport.numerics import round_once
from tests.components.test_latent import CACHE_KINDS, _within_rows

# DeepSeek-V2-Lite's attention (its config.json: hidden 2048, 16 heads, kv_lora_rank 512, no query LoRA, 128 / 64 /
# 128, YaRN factor 40 over 4096 with mscale = mscale_all_dim = 0.707, max_position_embeddings 163840).
V2_LITE_ROPE = {"rope_type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 0.707,
                "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}  # fmt: skip
REAL = [(d, c, "decomposed") for d in ("fp32", "fp16") for c in CACHE_KINDS] + [("fp16", "expanded", "fused"),
                                                                           ("fp16", "expanded", "gqa")]


@pytest.mark.slow  # a real layer's width (14M weights) and a 163840-position table: seconds each, alone
@pytest.mark.parametrize(("dtype", "cache", "form"), REAL, ids=["-".join(c) for c in REAL])
def test_latent_real_shape_to_max_positions(dtype: str, cache: str, form: str) -> None:
    # One layer of DeepSeek-V2-Lite's shape, random weights of its size, a chunk over a cache at the first positions,
    # at the original context (4096) and at the last four of max_positions (163836-163839): the graph against the
    # twin, the twin with its mscale left out outside the tolerance.
    import onnxruntime as ort

    import ropeexport as rx
    from ropeexport.catalog import recipe_for
    from ropeexport.components.latent.graph import latent_model

    n, heads = 2048, 16
    params = {k: v for k, v in V2_LITE_ROPE.items() if k != "rope_type"}
    piece_spec = rx.spec("rope", artifact="block", head_dim=64, num_heads=heads, num_kv_heads=1, layout="interleaved",
                         scaling="yarn", scaling_params=params, max_positions=163840, dtype=dtype,
                         graph="decomposed")  # fmt: skip
    spec = LatentSpec(num_heads=heads, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                      norm=NormSpec("rms", 1e-6, dtype), scale=softmax_scale(192, V2_LITE_ROPE), dtype=dtype,
                      cache=cache, graph=form, position=recipe_for(piece_spec).piece_of(piece_spec))  # fmt: skip
    rng = np.random.default_rng(5)
    weights = {k: (1 + 0.1 * rng.standard_normal(s)) if k.endswith("_norm") else rng.standard_normal(s) / np.sqrt(s[0])
               for k, s in spec.shapes(n).items()}  # fmt: skip
    weights = {k: round_once(v, dtype).astype(np.float64) for k, v in weights.items()}
    session = ort.InferenceSession(latent_model(spec, weights).SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    np_dtype = DTYPES[dtype].np_dtype
    for first in (0, 4090, 163830):
        past, seq = 6, 4
        feeds = {"hidden": rng.standard_normal((1, seq, n)).astype(np_dtype),
                 "position_ids": np.arange(first + past, first + past + seq)[None],
                 "attention_mask": np.ones((1, past + seq), np.int64)}  # fmt: skip
        for name, shape in spec.cache_shapes().items():
            feeds[name] = rng.standard_normal((1, int(shape[1]), past, int(shape[3]))).astype(np_dtype)
        got = dict(zip(names, session.run(None, feeds), strict=True))
        want = latent64(spec, feeds, weights)
        for output, value in want.items():
            assert _within_rows(got[output].astype(np.float64), value, dtype), (first, output)
        plain = latent64(dataclasses.replace(spec, scale=0.0), feeds, weights)["output"]
        assert not _within_rows(got["output"].astype(np.float64), plain, dtype), first
