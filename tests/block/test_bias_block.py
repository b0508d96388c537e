"""The bias family's ``block`` (ALiBi, KERPLE, Sandwich, T5): the method's bias piece in an attention layer with a KV
cache, keys' positions counted over the real tokens (BLOOM's rule), verified against eager and float64; planted
mistakes must fail (checked on ALiBi: every method's block is the same graph around its own bias piece)."""  # noqa: D205

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import ropeexport as rx
from ropeexport.block.probes import block_feeds, counted_block_probes
from ropeexport.catalog import recipe_for
from ropeexport.components.attention import graph as block_export
from ropeexport.components.attention import masks
from ropeexport.graph.onnx_io import save_model
from ropeexport.verification.core import verify_artifact
from tests.block.planted import causal_only, probes_that_see, top_left_mask
from tests.cases import tiered

GRAPHS, DTYPES = ("fused", "decomposed", "tensorrt", "static-cache", "gqa"), ("fp32", "fp16")
DYNAMIC = GRAPHS[:3]  # the forms whose cache grows; planted mask bugs are written against their mask
METHODS = {"alibi": {}, "kerple": {}, "sandwich": {}, "t5": {"causal": True, "bidirectional": False}}
CASES = [(m, g, d) for m in METHODS for g in GRAPHS for d in DTYPES if m == "alibi" or d == "fp32" or g == "fused"]


def _spec(method: str = "alibi", **fields: object) -> object:
    base = {"num_heads": 6, "head_dim": 16, "max_positions": 256} | METHODS[method]
    return rx.spec(method, artifact="block", **(base | fields))


# Fast tier: every method fused in fp32.
@pytest.mark.parametrize(("method", "graph", "dtype"), tiered(CASES, lambda c: c[1:] == ("fused", "fp32")),
                         ids=["-".join(c) for c in CASES])  # fmt: skip
def test_bias_block_builds_and_verifies(method: str, graph: str, dtype: str, tmp_path: Path) -> None:
    result = rx.build(_spec(method, graph=graph, dtype=dtype), tmp_path)
    report = result.encoding_report
    assert result.passed, [c.worst.data for c in report.comparisons if not c.passed]
    if method == "alibi":
        assert [t.name for t in report.tables] == ["neg_slopes"]  # the piece's float32 slopes, checked
    names = {p.name for p in report.probes}
    assert {"long-cache-decode", "decode-across-range-padded", "left-padded-prefill"} <= names
    assert "far-prompt" not in names  # a prompt at far positions over a short cache means nothing for ALiBi


def test_twelve_heads_non_power_of_two(tmp_path: Path) -> None:
    assert rx.build(_spec("alibi", num_heads=12, head_dim=8, graph="decomposed"), tmp_path).passed


def test_a_cache_longer_than_the_table_is_refused_inside_the_graph() -> None:
    spec = _spec("alibi", max_positions=16)
    probe = counted_block_probes(spec)[0][0]
    feeds = block_feeds(spec, probe, np.random.default_rng(0))
    feeds["past_key"] = np.zeros((1, 6, 16, 16), np.float32)  # 16 cached + 8 new tokens: positions up to 23
    feeds["past_value"] = feeds["past_key"]
    feeds["attention_mask"] = np.ones((1, 24), np.int64)
    session = ort.InferenceSession(rx.export(spec).SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="key_position_ids must lie in \\[0, 15\\]"):
        session.run(None, feeds)


@pytest.mark.parametrize(
    ("bug", "caught_by"),
    [
        ("key positions from cache slots, padding counted", {"left-padded-prefill", "decode-across-range-padded"}),
        ("attention_mask ignored", {"left-padded-prefill", "left-padded-decode"}),
        ("top-left causal mask (no cache offset)", {"decode-after-prefill", "chunked-prefill"}),
    ],
)
@pytest.mark.parametrize("graph", DYNAMIC)
def test_planted_alibi_block_bugs_fail_verification(
    bug: str, caught_by: set[str], graph: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec("alibi", graph=graph)
    original_mask = masks.causal_mask
    if bug.startswith("key positions"):

        def slots(g: object) -> str:
            t = g.op("Squeeze", [g.op("Shape", ["attention_mask"], start=1, end=2), g.const("bug_t", np.array([0]))])
            zero, one = g.const("bug_0", np.array(0, np.int64)), g.const("bug_1", np.array(1, np.int64))
            row = g.op("Unsqueeze", [g.op("Range", [zero, t, one]), g.const("bug_ax", np.array([0]))])
            return g.op("Expand", [row, g.op("Shape", ["attention_mask"])])

        monkeypatch.setattr(block_export, "_key_positions", slots)
    elif bug.startswith("attention_mask"):
        monkeypatch.setattr(masks, "causal_mask", lambda g, *a, **k: causal_only(g, original_mask, *a, **k))
    else:
        monkeypatch.setattr(masks, "causal_mask", top_left_mask)
    kind = recipe_for(spec)
    model = kind.export(spec)
    save_model(model, tmp_path)
    assert not verify_artifact(spec, kind, tmp_path / "model.onnx", ["ort"]).passed, bug
    seen = probes_that_see(spec, kind, model)
    assert caught_by <= seen, (bug, sorted(seen))
