"""The audit of 2-D vision RoPE (``vision_rope``, position_ids [2, batch, seq]: height, width; ``audits/vision.py``):
ropeexport's own artifacts read exact in each form and split, each pair's axis and frequency read by running the
model; planted into them (tables and position picks edited, written from the models' definitions in numpy), height
and width swapped and Pixtral's even/odd frequency split read as halves, each named with its effect on the outputs
against float64 over every patch; and a torch.onnx dynamo export of transformers' Pixtral vision rotary applied to q
and k (slow: exported in this process).
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import ropeexport as rx

FIELDS = {"encoding": "vision_rope", "num_heads": 2, "head_dim": 16, "max_positions": 16}


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(axis_frequencies, graph form) -> the artifact's model.onnx, built once for the module (not verified)."""
    from ropeexport.families.vision_rope.export import build_vision_rope_graph

    root = tmp_path_factory.mktemp("vision")
    out = {}
    for split in ("even-odd", "shared"):
        for graph in ("fused", "decomposed"):
            spec = _spec(axis_frequencies=split, graph=graph)
            path = root / f"{split}-{graph}.onnx"
            onnx.save(build_vision_rope_graph(spec), str(path))  # type: ignore[arg-type]
            out[split, graph] = path
    return out


def _spec(**changed: object) -> Any:
    return rx.spec("vision_rope", **{k: v for k, v in FIELDS.items() if k != "encoding"} | changed)


def _spec_file(folder: Path, split: str) -> Path:
    path = folder / "spec.json"
    path.write_text(json.dumps(FIELDS | {"axis_frequencies": split}))
    return path


def axes_swapped(proto: onnx.ModelProto) -> None:
    """The height rows gathered from position_ids row 1 and the width rows from row 0."""
    for t in proto.graph.initializer:
        if t.name in ("position_ids_height_index", "position_ids_width_index"):
            t.CopyFrom(numpy_helper.from_array(np.array(1 - int(numpy_helper.to_array(t)), np.int64), t.name))


def split_as_halves(proto: onnx.ModelProto) -> None:
    """Pixtral's frequency list theta^(-2i/d) split in halves (height i < d/4, width the next d/4), not even/odd."""
    tables = {t.name: t for t in proto.graph.initializer}
    rows, quarter = tables["height_cos_table"].dims
    full = 10000.0 ** (-np.arange(0, 4 * quarter, 2) / (4 * quarter))
    for a, axis in enumerate(("height", "width")):
        angles = np.outer(np.arange(rows), full[a * quarter : (a + 1) * quarter])
        for kind, fn in (("cos", np.cos), ("sin", np.sin)):
            name = f"{axis}_{kind}_table"
            tables[name].CopyFrom(numpy_helper.from_array(fn(angles).astype(np.float32), name))


# (label, axis_frequencies, graph form, plant, finding or None, words of its text)
CASES = [
    ("Pixtral's even-odd, fused", "even-odd", "fused", None, None, ""),
    ("Pixtral's even-odd, decomposed", "even-odd", "decomposed", None, None, ""),
    ("Qwen2.5-VL's shared, fused", "shared", "fused", None, None, ""),
    ("height and width swapped", "even-odd", "fused", axes_swapped, "vision-axes-swapped",
     "height and width swapped"),
    ("Pixtral's even-odd split read as halves", "even-odd", "decomposed", split_as_halves, "vision-frequency-split",
     "the list split in halves"),
    ("Qwen's shared set where the config says Pixtral's", "shared", "fused", "even-odd", "vision-frequencies",
     "frequencies of axis_frequencies shared where the config says even-odd"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("label", "split", "graph", "plant", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_a_vision_rope_model_is_read_pair_by_pair_and_each_fault_named_with_its_effect(
    label: str, split: str, graph: str, plant: object, expected: str | None, words: str,
    artifacts: dict[tuple[str, str], Path], tmp_path: Path,
) -> None:  # fmt: skip
    model = artifacts[split, graph]
    config = split
    if isinstance(plant, str):  # the model of one split audited against the config of the other
        config = plant
    elif plant is not None:
        proto = onnx.load(str(model))
        plant(proto)  # type: ignore[operator]
        model = tmp_path / "planted.onnx"
        onnx.save(proto, str(model))
    result = rx.audit(model, spec_file=_spec_file(tmp_path, config))
    (site,) = result.sites
    spec = _spec(axis_frequencies=config)
    assert site["kind"] == "2-D vision rotation (read by running the model)" and len(site["users"]) == 2, site
    if expected is None:
        assert result.verdict == "exact" and result.gate["passed"], [f["text"] for f in result.findings]
        assert site["pair_axes"] == list(spec.pair_axes()), site["pair_axes"]
        assert max(o["relative"] for o in site["outputs"].values()) <= 1e-5, site["outputs"]
        assert site["outputs"]["query_out"]["patches"] == 16 * 16  # every patch of the grid
        return
    assert [f["name"] for f in result.findings] == [expected], [f["text"] for f in result.findings]
    found = result.findings[0]
    assert words in found["text"], found["text"]
    assert found["severity"]["level"] == "wrong" and found["effect"]["relative"] > 1e-2, found["effect"]
    assert not result.gate["passed"] and found["next"]["action"] == "re-export"


@pytest.mark.slow  # one dynamo export (in this process: a standalone rotary module, nothing of it kept)
def test_a_dynamo_export_of_pixtrals_vision_rotary_reads_right(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="transformers (the test extra) is the model exported")
    import torch
    import transformers
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding, apply_rotary_pos_emb

    config = transformers.PixtralVisionConfig(hidden_size=32, num_attention_heads=2, head_dim=16, image_size=64,
                                              patch_size=4)  # fmt: skip
    rope = PixtralVisionRotaryEmbedding(config)

    class Rotate(torch.nn.Module):
        """q and k [1, n_h, s, d] rotated by position_ids [2, 1, s] as Pixtral's attention does."""

        def forward(self, query: torch.Tensor, key: torch.Tensor, position_ids: torch.Tensor) -> Any:
            cos, sin = rope(query, position_ids[:, 0].transpose(0, 1))  # [s, 2] -> cos/sin [s, d]
            return apply_rotary_pos_emb(query, key, cos, sin, unsqueeze_dim=0)

    model, dyn = tmp_path / "pixtral-rope.onnx", torch.export.Dim.DYNAMIC
    example = (torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16), torch.zeros(2, 1, 8, dtype=torch.int64))
    with torch.no_grad():
        names = ["query", "key", "position_ids"]
        torch.onnx.export(Rotate().eval(), example, str(model), dynamo=True, input_names=names,
                          output_names=["query_out", "key_out"], dynamic_shapes=({2: dyn}, {2: dyn}, {2: dyn}))
    result = rx.audit(model, spec_file=_spec_file(tmp_path, "even-odd"))
    assert result.verdict == "exact", [f["text"] for f in result.findings]
    assert result.sites[0]["pair_axes"] == list(_spec().pair_axes())
