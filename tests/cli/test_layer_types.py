"""``ropeexport build --hf-config`` on models whose layers use different encodings: one artifact per encoding, named
by the layer types that use it, each saying which layers use it and which use none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ropeexport.report.views import EncodingReport, read_report
from tests.clirun import run

transformers = pytest.importorskip("transformers")

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 256}  # fmt: skip
# (id, model_type, config fields, {artifact name: (layers it serves, layers without RoPE)})
CASES = [
    ("gemma3-two-encodings", "gemma3_text", {**SMALL, "num_hidden_layers": 4, "sliding_window_pattern": 2,
                                             "layer_types": None, "sliding_window": 8,
                                             "rope_parameters": {"sliding_attention": {"rope_type": "default",
                                                                                       "rope_theta": 1e4},
                                                                 "full_attention": {"rope_type": "linear",
                                                                                    "factor": 8.0,
                                                                                    "rope_theta": 1e6}}},
     {"gemma3_text-sliding-rope-fp32-fused": ("0, 2", None), "gemma3_text-full-rope-fp32-fused": ("1, 3", None)}),
    ("smollm3-one-encoding-and-nope", "smollm3", {**SMALL, "num_hidden_layers": 4},
     {"smollm3-rope-fp32-fused": ("0-2", "3")}),
]  # fmt: skip


@pytest.mark.parametrize(("model_type", "fields", "built"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_encoding_the_layers_use_is_built_and_says_its_layers(
    model_type: str, fields: dict[str, Any], built: dict[str, tuple[str, str | None]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = transformers.AutoConfig.for_model(model_type, **{k: v for k, v in fields.items() if v is not None})
    config.save_pretrained(tmp_path / model_type)
    out = tmp_path / "out"
    code, stdout, err = run(["build", "--hf-config", str(tmp_path / model_type / "config.json"), "--out", str(out)],
                            capsys)  # fmt: skip
    assert code == 0, err
    index = {a["name"]: a for a in json.loads((out / "index.json").read_text())["artifacts"]}
    assert set(index) == set(built)
    for name, (layers, unrotated) in built.items():
        assert index[name]["passed"], name
        origin = index[name]["origin"]
        assert origin["layers"] == layers and origin.get("no_rope_layers") == unrotated, origin
        manifest = json.loads((out / name / "manifest.json").read_text())
        assert manifest["build"]["origin"] == origin
        assert f"used by layers {layers}" in stdout
        used = read_report(out / name, EncodingReport).layers  # the artifact's own report says it too
        assert used is not None and used.layers == layers and used.no_rope_layers == unrotated
        for page in ("report.md", "report.html"):
            text = (out / name / page).read_text()
            assert f"used by layers {layers}" in text, page
            assert unrotated is None or f"layers {unrotated} have no positional encoding" in text, page
    html = (out / "index.html").read_text()
    assert all(f"(layers {layers}" in html for layers, _ in built.values())
    name = next(iter(built))
    code, _, err = run(["verify", str(out / name)], capsys)  # verified again: the reports keep the layers
    assert code == 0, err
    assert f"used by layers {built[name][0]}" in (out / name / "report.md").read_text()
