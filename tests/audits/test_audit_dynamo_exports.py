"""torch.onnx.export (dynamo) of Ministral 3 (tiny checkpoint, no cache), audited as users export it: its query factor
1 + beta * log(1 + floor(pos / original)) the graph computes once (Floor, Log) and every layer's query reads. Planted
into that computation (the exporter's own graph edited): vLLM #48621's multiplier (1.2773 where 1.0: 1 + 0.4 * log 2,
our reading of its figure, here the step count one ahead, 1 + beta * log(2 + floor(pos / original))) and the floor
dropped (1 + beta * log(1 + pos / original)). The export runs once for the module in its own process (a dynamo export
leaves fake tensors in transformers' modules): about 9 s of CPU, 30 to 40 s of wall time on a loaded 2-core machine.
Mistral 4's (tiny, its latent attention and experts through batched_mm) is audited as it is: its rope slice, its
softmax scale and each layer's query scale read as its config says; DeepSeek V3.2's (its experts through
batched_mm) with its indexer's half-split rotation read as the indexer's, grafted and proven. A dynamo export of
Qwen2.5-VL's text model is not here: it costs about as much again (``tools/export_qwen_vl_text.py``, audited by hand:
docs/reference/audit.md).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx
from tests.audits.hybrids import export

pytest.importorskip("transformers", reason="transformers (the test extra) is the model exported")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]) -> Callable[[str], tuple[
        Path, Path]]:  # fmt: skip
    """``exported(name)``: (its checkpoint, its dynamo export's model.onnx), exported on first use."""
    root = tmp_path_factory.mktemp("dynamo")
    made: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in made:
            ckpt, model = tiny_checkpoint(name), root / name / "model.onnx"
            got = export(ckpt, model.parent, **HOW.get(name, {}))
            assert isinstance(got, Path), got
            made[name] = ckpt, model
        return made[name]

    return get


# How a model is exported where it differs: mistral4's experts through batched_mm (grouped_mm does not lower), its
# class named (transformers 5.23's AutoModelForCausalLM has no mistral4 entry)
HOW: dict[str, dict[str, Any]] = {"mistral4": {"batched_mm": True, "prelude": "transformers.AutoModelForCausalLM = "
                                               "transformers.Mistral4ForCausalLM"},
                                  "deepseek_v32": {"batched_mm": True}}  # fmt: skip


def _plant(model: Path, folder: Path, how: str) -> Path:
    """The dynamo export with the Add of 1 before its factor's Log fed ``how``: "floor dropped" (pos / original, not
    its floor), "step ahead" (2 added, not 1); "" as exported.
    """  # noqa: D205
    proto = onnx.load(str(model))
    graph = proto.graph
    floor = next(n for n in graph.node if n.op_type == "Floor")
    add = next(n for n in graph.node if floor.output[0] in n.input)  # 1 + floor(pos / original), before the Log
    at = list(add.input).index(floor.output[0])
    if how == "floor dropped":
        add.input[at] = floor.input[0]
    elif how == "step ahead":
        graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "planted_two"))
        add.input[1 - at] = "planted_two"
    folder.mkdir(parents=True)
    onnx.save(proto, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return folder / "model.onnx"


# (label, plant, words of the query-scale finding or None)
FACTOR = [
    ("as exported", "", None),
    ("vLLM #48621's multiplier (the step count one ahead)", "step ahead",
     "layers 0-1 scale the query by 1.06931 at position 0 where the config's q * (1 + 0.1 * log(1 + floor(pos / 64))) "
     "gives 1"),
    ("the floor dropped", "floor dropped", "layers 0-1 scale the query by 1.06853 at position 63 where the config's"),
]  # fmt: skip


@pytest.mark.slow  # one dynamo export (module doc), then an audit a row
@pytest.mark.parametrize(("label", "plant", "words"), FACTOR, ids=[c[0] for c in FACTOR])
def test_ministrals_computed_query_factor_is_read_per_layer_and_judged(
    label: str, plant: str, words: str | None, exported, tmp_path: Path  # noqa: ANN001
) -> None:
    ckpt, model = exported("ministral3")
    result = rx.audit(_plant(model, tmp_path / "planted", plant), ckpt / "config.json")
    # computed once, read by both layers' queries: each layer's
    assert sorted(result.layers["query_scales"]) == ["0", "1"], result.layers["query_scales"]
    named = {f["name"]: f for f in result.findings}
    assert named.pop("float32-angles")["severity"]["level"] == "harmless"
    if words is None:
        assert not named and result.gate["passed"], [f["text"] for f in named.values()]
        return
    assert set(named) == {"query-scale"} and words in named["query-scale"]["text"], named
    found = named["query-scale"]
    assert "not_measured" in found["effect"] and found["next"]["action"] == "re-export", found
    assert not result.gate["passed"]


@pytest.mark.slow  # one dynamo export (module doc)
def test_mistral4s_export_is_read_with_its_rope_slice_softmax_and_query_scales(exported) -> None:  # noqa: ANN001
    from tests.audits.test_audit_latent import read_right

    ckpt, model = exported("mistral4")
    result = rx.audit(model, ckpt / "config.json")
    named = {f["name"]: f for f in result.findings}
    assert named.pop("float32-angles")["severity"]["level"] == "harmless"  # its angles as transformers computes them
    assert not named and result.gate["passed"], [f["text"] for f in named.values()]
    read_right(result, "mistral4")  # each layer's rope slice, softmax scale and query scale, as the config says


@pytest.mark.slow  # one dynamo export (module doc)
def test_deepseek_v32s_export_reads_its_indexers_half_split_rotation_as_its_own_and_is_grafted_and_proven(
        exported, tmp_path: Path) -> None:  # noqa: ANN001  # fmt: skip
    # transformers' DeepseekV32ForCausalLM as torch.onnx exports it (no cache): one computed cos/sin, read by the
    # attention's interleaved rotations and its indexer's half-split ones (which dev at 27f5bb9 named a pairing
    # fault, and found no indexer rotation); each read on its layers with its own slice; float32 angles alone
    ckpt, model = exported("deepseek_v32")
    result = rx.audit(model, ckpt / "config.json")
    assert sorted(f["name"] for f in result.findings) == ["float32-angles"] * 2, [f["text"] for f in result.findings]
    assert result.gate["passed"] and sorted(bool(f.get("indexer")) for f in result.findings) == [False, True]
    own = [s for s in result.sites if s.get("indexer")]
    assert len(own) == 1 and own[0]["interleaved"] is False and own[0]["roles"] == {"0": ["k", "q"], "1": ["k", "q"]}
    slices = {(s["layer"], s["role"], bool(s.get("indexer"))): s.get("channels") for s in result.layers["rope_slices"]}
    last = {"q": list(range(8, 16)), "k": list(range(16, 24))}  # the attention's: each head's, kv_a_proj's last 8
    wanted = {(i, r, False): last[r] for i in (0, 1) for r in "qk"}
    assert slices == {(i, r, True): list(range(8)) for i in (0, 1) for r in "qk"} | wanted, slices
    grafted = rx.graft(model, ckpt / "config.json", tmp_path / "fixed.onnx", checkpoint=ckpt)
    assert grafted.proven and grafted.after is not None and grafted.after.verdict == "exact", grafted.to_dict()
