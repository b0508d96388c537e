"""onnxruntime-genai 0.18's builder's Qwen3-VL text export (com.microsoft MRotaryEmbedding, float32 ``cos_cache`` /
``sin_cache``, ``mrope_section`` and ``mrope_layout`` attributes), audited and grafted (issue 39 item 4).

The builder is run once for the module on a tiny Qwen3-VL checkpoint whose vision tower is 16 wide: at the tests'
usual 32, its attention's qkv Linear is 96 wide, the vocabulary's size, and the builder 0.18 takes the first Linear
of that width for the LM head (its model then does not load: ``/lm_head/MatMul``'s input empty). Each site is read
per layer, each pair's axis read by running the operator (``audits.axes.operator_axes``), and each finding's effect
measured as users run the model: its own cache, position_ids [3, batch, seq] with an image grid in the prompt, to the
far end of max_positions. Planted by the operator's attributes: Qwen3-VL exported with Qwen2.5-VL's layout, sections
in another order. graft sets the attributes to the config's and proves the model against the float64 decoder.
"""  # noqa: D205

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import helper

import ropeexport as rx

pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the builder")


@pytest.fixture(scope="module")
def builder_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the checkpoint, the builder's fp32 CPU model.onnx of it)."""
    from tests.decoder.tiny import checkpoint

    root = tmp_path_factory.mktemp("builder-mrope")
    ckpt = checkpoint(root / "qwen3_vl", "qwen3_vl", vision={"hidden_size": 16})
    out = root / "og"
    built = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
                            "-p", "fp32", "-e", "cpu", "-c", str(out / "cache")], capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    return ckpt, out / "model.onnx"


def _planted(model: Path, folder: Path, attributes: dict[str, Any]) -> Path:
    """``model`` with every MRotaryEmbedding's ``attributes`` set, saved into ``folder``."""
    proto = onnx.load(str(model))
    for node in proto.graph.node:
        if node.op_type == "MRotaryEmbedding":
            kept = [a for a in node.attribute if a.name not in attributes]
            del node.attribute[:]
            node.attribute.extend([*kept, *(helper.make_attribute(k, v) for k, v in attributes.items())])
    folder.mkdir(parents=True)
    onnx.save(proto, str(folder / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    return folder / "model.onnx"


# (label, attributes planted, finding beside float32-angles, its level, words of its text)
PLANTED = [
    ("as the builder writes it", {}, None, None, ""),
    ("Qwen3-VL exported with Qwen2.5-VL's layout", {"mrope_layout": 0}, "mrope-interleaving", "wrong",
     "pairs read as contiguous mrope_section blocks [3, 3, 2] (Qwen2-VL's) where the config interleaves them"),
    # interleaved, [3, 2, 3] moves pair 7 (the lowest frequency) from height to time: a small effect, measured
    ("sections in another order", {"mrope_section": [3, 2, 3]}, "mrope-sections-swapped", "minor",
     "pairs split by mrope_section [3, 2, 3] where the config says [3, 3, 2]"),
]  # fmt: skip


@pytest.mark.slow  # the builder's run (about 15 s on a loaded 2-core machine), then each audit's effect runs
@pytest.mark.parametrize(("label", "attributes", "expected", "level", "words"), PLANTED, ids=[c[0] for c in PLANTED])
def test_the_builders_mrope_export_is_read_per_layer_with_its_effect(
    label: str, attributes: dict[str, Any], expected: str | None, level: str | None, words: str,
    builder_model: tuple[Path, Path], tmp_path: Path,
) -> None:  # fmt: skip
    ckpt, model = builder_model
    if attributes:
        model = _planted(model, tmp_path / "planted", attributes)
    result = rx.audit(model, ckpt / "config.json")
    (site,) = result.sites
    assert site["kind"] == "MRotaryEmbedding (com.microsoft)" and site["layers"] == [0, 1], site
    named = {f["name"]: f for f in result.findings}
    float32 = named.pop("float32-angles")  # the builder's tables: angles in float32
    assert float32["severity"]["level"] == "harmless" and 0.0 < float32["effect"]["relative"] <= 1e-4, float32
    assert "[3, batch, seq]" in float32["effect"]["how"] and "image grid" in float32["effect"]["how"]
    spec = rx.from_hf_config(ckpt / "config.json")[0]
    if expected is None:
        assert not named and site["pair_axes"] == list(spec.pair_axes()), (named, site["pair_axes"])
        return
    assert set(named) == {expected}, [f["text"] for f in result.findings]
    found = named[expected]
    assert words in found["text"], found["text"]
    assert found["severity"]["level"] == level and found["effect"]["relative"] > 1e-4, found["effect"]
    assert not result.gate["passed"]


@pytest.mark.slow  # the builder's run, then graft's proof against the float64 decoder
def test_graft_sets_the_operators_axes_and_proves_them(builder_model: tuple[Path, Path], tmp_path: Path) -> None:
    ckpt, model = builder_model
    planted = _planted(model, tmp_path / "planted", {"mrope_layout": 0})
    out = tmp_path / "fixed" / "model.onnx"
    result = rx.graft(planted, ckpt / "config.json", out, trust="config", checkpoint=ckpt).to_dict()
    assert result["before"] == "findings" and result["after"]["verdict"] == "exact", result["text"]
    assert result["verdict"] == "proven" and result["decoder"]["passed"] == {"original": False, "grafted": True}
    set_to = [r["replaced_by"] for r in result["replaced"] if "node" in r]
    assert len(set_to) == 4 and all("mrope_layout=1" in r for r in set_to), result["replaced"]
    assert result["decoder"]["calls"][-1]["positions"][1] == 255  # the far end of max_positions
