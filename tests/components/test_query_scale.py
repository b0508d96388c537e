"""The ``query_scale`` component (``components.query_scale``): its float64 twin against transformers 5.23's own
``get_llama_4_attn_scale`` at every position, and its graph's factor the twin's rounded once, bit for bit.

Rows: Ministral 3's released setting (beta 0.1 over 16384, to 262144), the tiny checkpoint's (over 64, to 256), a
length that is no power of two (its float32 quotient is where transformers could floor differently), and Llama 4's
temperature formula (offset 1). The planted mistakes (1-based positions, the step length off by one) must differ.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ropeexport.components.query_scale import QueryScaleSpec, query_scale64, scale_query
from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError
from ropeexport.graph.onnx_io import GraphBuilder, make_model
from ropeexport.numerics import round_once

pytestmark = pytest.mark.fast  # a component against its twin

# (label, kind, coefficient, divisor, max_positions)
ROWS = [
    ("ministral3-released", "log_floor", 0.1, 16384, 262144),
    ("ministral3-tiny", "log_floor", 0.1, 64, 256),
    ("not-a-power-of-two", "log_floor", 0.37, 1000, 100_000),
    ("llama4-temperature", "temperature", 0.1, 8192, 65536),
]


def _transformers(kind: str, coefficient: float, divisor: int, positions: np.ndarray) -> np.ndarray:
    """transformers' own factor in float32 (Ministral 3's function; Llama 4's expression from its attention)."""
    torch = pytest.importorskip("torch")
    pos = torch.from_numpy(positions)[None]  # [1, s] int64, as position_ids
    if kind == "log_floor":
        from transformers.models.ministral3.modeling_ministral3 import get_llama_4_attn_scale

        return get_llama_4_attn_scale(pos, coefficient, divisor)[0, 0, :, 0].numpy()
    # Llama4TextAttention: torch.log(torch.floor((cache_position.float() + 1.0) / floor_scale) + 1.0) * attn_scale + 1
    return (torch.log(torch.floor((pos.float() + 1.0) / divisor) + 1.0) * coefficient + 1.0)[0].numpy()


@pytest.mark.parametrize(("label", "kind", "coefficient", "divisor", "top"), ROWS, ids=[r[0] for r in ROWS])
def test_the_twin_is_transformers_factor_at_every_position(label: str, kind: str, coefficient: float, divisor: int,
                                                          top: int) -> None:  # fmt: skip
    spec = QueryScaleSpec(kind, coefficient, divisor, 1 if kind == "temperature" else 0, top)
    positions = np.arange(top, dtype=np.int64)
    theirs = _transformers(kind, coefficient, divisor, positions).astype(np.float64)  # float32 inside
    ours = query_scale64(spec, positions[None])[0]
    assert np.all(np.abs(ours - theirs) <= 2 * np.spacing(np.float32(theirs)).astype(np.float64)), label
    # the steps are the same positions: transformers' float32 floor and ours agree everywhere below 2^24
    assert np.array_equal(np.flatnonzero(np.diff(theirs)) + 1, np.array(spec.steps())), label
    # planted: 1-based positions (a step one position early) and a step length off by one are seen
    early = query_scale64(spec, positions[None] + 1)[0]
    off = query_scale64(QueryScaleSpec(kind, coefficient, divisor + 1, spec.offset, top), positions[None])[0]
    for wrong in (early, off):
        assert np.max(np.abs(wrong - theirs)) > 1e-3, label


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize(("flat", "shape"), [(True, (2, 0, 6)), (False, (2, 3, 0, 2))], ids=["flat", "heads"])
def test_the_graph_factor_is_the_twin_rounded_once(dtype: str, flat: bool, shape: tuple[int, ...]) -> None:
    spec = QueryScaleSpec("log_floor", 0.1, 64, 0, 256, dtype)
    g = GraphBuilder(prefix="t/")
    out = scale_query(g, spec, "q", flat=flat)
    elem = DTYPES[dtype].onnx
    s = 256
    dims = [d if d else s for d in shape]
    graph = helper.make_graph(g.nodes, "qs", [helper.make_tensor_value_info("q", elem, dims),
                                              helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                                            [2, s])],
                              [helper.make_tensor_value_info(out, elem, None)], g.initializers)  # fmt: skip
    session = ort.InferenceSession(make_model(graph, 17, {}).SerializeToString(), providers=["CPUExecutionProvider"])
    positions = np.stack([np.arange(s), np.arange(s)[::-1]]).astype(np.int64)
    q = np.ones(dims, DTYPES[dtype].np_dtype)
    got = session.run(None, {"q": q, "position_ids": positions})[0].astype(np.float64)
    want = round_once(query_scale64(spec, positions), dtype).astype(np.float64)  # [2, s]
    factor = got[:, :, 0] if flat else got[:, 0, :, 0]
    assert np.array_equal(factor, want)


@pytest.mark.parametrize(("fields", "field"), [
    (("log_floor", 0.0, 64, 0, 256), "query_scale.beta"),
    (("log_floor", 0.1, 64.5, 0, 256), "query_scale.original_max_position_embeddings"),
    (("temperature", 0.1, 0, 1, 256), "query_scale.floor_scale"),
    (("cubic", 0.1, 64, 0, 256), "query_scale.kind"),
], ids=["beta-zero", "original-not-whole", "floor-scale-zero", "unknown-kind"])  # fmt: skip
def test_a_wrong_query_scale_is_named(fields: tuple, field: str) -> None:
    with pytest.raises(SpecError) as error:
        QueryScaleSpec(*fields)
    assert error.value.field == field, str(error.value)
