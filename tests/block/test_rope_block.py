"""RoPE's ``block`` artifact: an attention layer with a KV cache, verified against eager and float64.

Case table: schedule x layout x graph x dtype builds and verifies; then planted mistakes (the ones cached generation
suffers) must fail verification, and the contract holds on its own: present_key is the cache followed by the
rotated new keys, a padded query outputs zeros, and a position past the table is refused inside the graph.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import ropeexport as rx
from ropeexport.block.probes import block_feeds, block_probes
from ropeexport.catalog import recipe_for
from ropeexport.components.attention import graph as block_export
from ropeexport.components.attention import masks
from ropeexport.components.attention import static as static_form
from ropeexport.errors import SpecError
from ropeexport.families.rope.oracle import rope_oracle
from ropeexport.graph.onnx_io import save_model
from ropeexport.verification.core import verify_artifact
from tests.block.planted import causal_only, probes_that_see, top_left_mask
from tests.cases import tiered

SCHEDULES = {
    "default": {},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "longrope": {"short_factor": [1.0] * 8, "long_factor": [2.0] * 8, "original_max_position_embeddings": 64},
    "dynamic": {"factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 64},
    "proportional": {"partial_rotary_factor": 0.25},  # Gemma 4's global layers: 2 of 8 pairs real, 6 at frequency 0
}
GEOMETRY = {"head_dim": 16, "num_heads": 4, "num_kv_heads": 2, "max_positions": 256}
LAYOUTS, DTYPES = ("half", "interleaved"), ("fp32", "fp16")
GRAPHS = ("fused", "decomposed", "tensorrt", "static-cache", "gqa")
DYNAMIC = GRAPHS[:3]  # the forms whose cache grows (past_key in, past + seq out)
CASES = [
    (s, layout, graph, dtype)
    for s, layout, graph, dtype in itertools.product(SCHEDULES, LAYOUTS, GRAPHS, DTYPES)
    if (layout == "half" or s in ("default", "longrope"))  # interleaved: a static and a switched schedule
    and (graph not in ("tensorrt", "static-cache", "gqa") or s in ("default", "longrope", "dynamic", "proportional"))
]


def _spec(scaling: str = "longrope", **fields: object) -> object:
    base = GEOMETRY | {"scaling": scaling, "scaling_params": SCHEDULES[scaling]} | fields
    return rx.spec("rope", artifact="block", **base)


# Fast tier: the switched schedule, half layout, fp32, in the fused and gqa forms; CI runs every row.
FAST = {("longrope", "half", "fused", "fp32"), ("longrope", "half", "gqa", "fp32")}


@pytest.mark.parametrize(("scaling", "layout", "graph", "dtype"), tiered(CASES, lambda c: c in FAST),
                         ids=["-".join(c) for c in CASES])  # fmt: skip
def test_block_builds_and_verifies(scaling: str, layout: str, graph: str, dtype: str, tmp_path: Path) -> None:
    spec = _spec(scaling, layout=layout, graph=graph, dtype=dtype)
    result = rx.build(spec, tmp_path)
    report = result.encoding_report
    failing = [(c.worst.probe, c.output, c.reference) for c in report.comparisons if not c.passed]
    assert result.passed, failing or [g.data for g in report.guards] or [t.data for t in report.tables]
    outputs = {c.output for c in report.comparisons}
    assert outputs == {"output", "present_key", "present_value"}
    assert {t.name for t in report.tables} == {"cos_table", "sin_table"}
    assert all(g.passed for g in report.guards) and report.guards


@pytest.mark.parametrize(
    ("graph", "parsed_from"),
    [("tensorrt", "10.15"), ("decomposed", "10.13"), ("fused", None), ("static-cache", None), ("gqa", None)],
)
def test_which_tensorrt_parses_each_block_form(graph: str, parsed_from: str | None) -> None:
    # fused: Attention with a KV cache, which no TensorRT release parses; tensorrt: the cache outside a 4-D Attention
    # and RotaryEmbedding (10.15); decomposed: opset-17 primitives.
    model = rx.export(_spec("longrope", graph=graph))
    verdicts = {v: rx.check_trt(model, v).compatible for v in ("10.13", "10.14", "10.15")}
    assert verdicts == {v: parsed_from is not None and v >= parsed_from for v in verdicts}


def test_tensorrt_is_a_block_form_only() -> None:
    with pytest.raises(SpecError, match="'tensorrt' is a form of the block artifact only"):
        rx.spec("rope", graph="tensorrt")


def test_bf16_block_verifies_on_the_reference_evaluator(tmp_path: Path) -> None:
    result = rx.build(_spec("default", dtype="bf16", graph="decomposed", max_positions=32), tmp_path)
    assert result.passed
    assert [r.name for r in result.encoding_report.runtimes if r.status == "verified"] == ["onnx-reference"]


def _session(spec: object) -> ort.InferenceSession:
    return ort.InferenceSession(rx.export(spec).SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("graph", DYNAMIC[:2])
def test_present_key_is_the_cache_then_the_rotated_new_keys(graph: str) -> None:
    spec = _spec("longrope", graph=graph)
    probe = next(p for p in block_probes(spec)[0] if p.name == "chunked-prefill")
    feeds = block_feeds(spec, probe, np.random.default_rng(1))
    output, present_key, present_value = _session(spec).run(None, feeds)
    past = feeds["past_key"].shape[2]
    np.testing.assert_array_equal(present_key[:, :, :past], feeds["past_key"])  # the cache is kept bit for bit
    np.testing.assert_array_equal(present_value[:, :, :past], feeds["past_value"])
    from ropeexport.block.projections import block_weights

    w = block_weights(spec)
    b, s, _ = feeds["hidden"].shape
    k = (feeds["hidden"].astype(np.float64) @ w["k_proj"]).reshape(b, s, 2, 16).transpose(0, 2, 1, 3)
    want = rope_oracle(spec, k, feeds["position_ids"])  # the new keys, rotated at their positions
    np.testing.assert_allclose(present_key[:, :, past:], want, atol=1e-5)


@pytest.mark.parametrize("graph", GRAPHS)
def test_a_query_that_sees_no_key_outputs_zeros(graph: str) -> None:
    spec = _spec("default", graph=graph)
    probe = next(p for p in block_probes(spec)[0] if p.name == "left-padded-prefill")
    feeds = block_feeds(spec, probe, np.random.default_rng(2))
    output = _session(spec).run(None, feeds)[0]
    assert np.isfinite(output).all()
    np.testing.assert_array_equal(output[0, :2], 0.0)  # row 0's two left-padded slots
    assert np.abs(output[0, 2:]).min() > 0 and np.abs(output[1]).min() > 0


def test_position_past_the_table_is_refused_inside_the_graph() -> None:
    spec = _spec("default")
    probe = block_probes(spec)[0][0]
    feeds = block_feeds(spec, probe, np.random.default_rng(3))
    feeds["position_ids"] = feeds["position_ids"] + spec.max_positions - 1  # the last one lands on max_positions
    with pytest.raises(Exception, match="must lie in \\[0, 255\\]"):
        _session(spec).run(None, feeds)


@pytest.mark.parametrize(
    ("bug", "caught_by"),
    [
        ("top-left causal mask (no cache offset)", {"decode-after-prefill", "chunked-prefill"}),
        ("attention_mask ignored", {"left-padded-prefill", "left-padded-decode"}),
        ("keys cached before rotation", {"prefill", "chunked-prefill"}),
        ("positions from cache slots, not position_ids", {"far-prompt", "left-padded-prefill"}),
    ],
)
@pytest.mark.parametrize("graph", DYNAMIC)
def test_planted_block_bugs_fail_verification(
    bug: str, caught_by: set[str], graph: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec("longrope", graph=graph)
    original_mask, original_call = masks.causal_mask, block_export.call
    if bug.startswith("top-left"):
        monkeypatch.setattr(masks, "causal_mask", top_left_mask)
    elif bug.startswith("attention_mask"):
        monkeypatch.setattr(masks, "causal_mask", lambda g, *a, **k: causal_only(g, original_mask, *a, **k))
    elif bug.startswith("keys cached"):

        def unrotated_key(g, rotary, inputs, prefix):  # type: ignore[no-untyped-def]
            out = original_call(g, rotary, inputs, prefix)
            return out | {"key_out": inputs["key"]}

        monkeypatch.setattr(block_export, "call", unrotated_key)
    else:

        def slot_positions(g, rotary, inputs, prefix):  # type: ignore[no-untyped-def]
            # position = cache slot: past + 0..s-1, what an exporter that ignores position_ids computes
            i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
            s = g.op("Shape", ["hidden"], start=1, end=2)
            p = g.op("Shape", ["past_key"], start=2, end=3)
            zero, one = g.const("bug_z", np.array(0, np.int64)), g.const("bug_o", np.array(1, np.int64))
            sq = lambda x: g.op("Squeeze", [x, g.const(f"bug_sq_{x}", i64(0))])  # noqa: E731
            slots = g.op("Add", [g.op("Range", [zero, sq(s), one]), sq(p)])
            pos = g.op(
                "Expand", [g.op("Unsqueeze", [slots, g.const("bug_u", i64(0))]), g.op("Shape", ["position_ids"])]
            )
            return original_call(g, rotary, inputs | {"position_ids": pos}, prefix)

        monkeypatch.setattr(block_export, "call", slot_positions)
    kind = recipe_for(spec)
    model = kind.export(spec)
    save_model(model, tmp_path)
    verification = verify_artifact(spec, kind, tmp_path / "model.onnx", ["ort"])
    assert not verification.passed, bug
    # Which probes see it: each call against the float64 block, within the block's tolerance.
    seen = probes_that_see(spec, kind, model)
    assert caught_by <= seen, (bug, sorted(seen))


def test_static_cache_writes_at_cache_length_and_ignores_leftovers() -> None:
    spec = _spec("longrope", graph="static-cache")
    probe = next(p for p in block_probes(spec)[0] if p.name == "ragged-cache-decode")
    feeds = block_feeds(spec, probe, np.random.default_rng(4))
    session = _session(spec)
    output, present_key, _ = session.run(None, feeds)
    lengths = feeds["cache_length"]
    for b, n in enumerate(lengths):  # the buffer is kept, the one new key lands at cache_length
        np.testing.assert_array_equal(present_key[b, :, :n], feeds["past_key"][b, :, :n])
        np.testing.assert_array_equal(present_key[b, :, n + 1 :], feeds["past_key"][b, :, n + 1 :])
    # Slots past a row's tokens are leftovers: any finite values give the same output. (ONNX Runtime 1.31 still
    # reads them: NaN there reaches the output, so a server must keep its buffer finite; zeros when new.)
    changed = dict(feeds, past_key=feeds["past_key"].copy(), past_value=feeds["past_value"].copy())
    for b, n in enumerate(lengths):
        changed["past_key"][b, :, n + 1 :] = 1e4
        changed["past_value"][b, :, n + 1 :] = -1e4
    np.testing.assert_array_equal(session.run(None, changed)[0], output)


def test_static_cache_planted_write_at_zero_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec("longrope", graph="static-cache")
    original = static_form._attend_static

    def write_at_zero(g, spec, q, k, v, mask, bias):  # type: ignore[no-untyped-def]
        result = original(g, spec, q, k, v, mask, bias)
        zero = g.const("bug_zero_index", np.zeros(1, np.int64))
        for node in g.nodes:
            if node.op_type == "TensorScatter":
                node.input[2] = zero  # every row's new key written at slot 0, over its cache
        return result

    monkeypatch.setattr(static_form, "_attend_static", write_at_zero)
    kind = recipe_for(spec)
    save_model(kind.export(spec), tmp_path)
    assert not verify_artifact(spec, kind, tmp_path / "model.onnx", ["ort"]).passed


@pytest.mark.parametrize("graph", GRAPHS)
def test_any_nonzero_mask_value_is_a_real_token(graph: str) -> None:
    spec = _spec("default", graph=graph)
    probe = next(p for p in block_probes(spec)[0] if p.name == "left-padded-prefill")
    feeds = block_feeds(spec, probe, np.random.default_rng(5))
    session = _session(spec)
    twos = dict(feeds, attention_mask=feeds["attention_mask"] * 2)
    np.testing.assert_array_equal(session.run(None, twos)[0], session.run(None, feeds)[0])
    np.testing.assert_allclose(
        recipe_for(spec).oracle(spec, twos)["output"], recipe_for(spec).oracle(spec, feeds)["output"]
    )
