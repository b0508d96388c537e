"""``build --dry-run`` prints the resolved spec, each value with its source, and the sources of artifact, dtype and
graph say which branch applied (a flag, or the default the flag left), not the rule (issue 43, item 4: the dry run
printed only names, and a build's lines read "--artifact/--dtype/--graph, else the encoding's first artifact, fp32,
fused" whichever applied).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ropeexport.cli import main

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 1, "intermediate_size": 96, "vocab_size": 64, "max_position_embeddings": 512,
         "rope_theta": 500000.0}  # fmt: skip
# Gemma 4 text as transformers 5.23 saves it: the full layer's own head_dim in per_layer_config, nested rope_parameters
GEMMA4 = {"model_type": "gemma4_text", "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 8, "num_hidden_layers": 2, "intermediate_size": 48, "vocab_size": 64,
          "max_position_embeddings": 256, "sliding_window": 6, "hidden_size_per_layer_input": 0,
          "layer_types": ["sliding_attention", "full_attention"], "per_layer_config": {"1": {"head_dim": 16}},
          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                 "rope_theta": 1000000.0}}}  # fmt: skip
ROW = "  {} = {}  <- {}"

# (case, argv after `build`, lines the dry run must print, lines it must not)
CASES: list[tuple[str, list[str], list[str], list[str]]] = [
    ("config, no variant flags", ["--hf-config", "{config}"],
     [ROW.format("theta", "500000.0", "rope_theta"), ROW.format("artifact", '"rope"',
      "the encoding's first artifact (no --artifact)"), ROW.format("dtype", '"fp32"', "default fp32 (no --dtype)"),
      ROW.format("graph", '"fused"', "default fused (no --graph)")], ["else the encoding's first artifact"]),
    ("config, --dtype given", ["--hf-config", "{config}", "--dtype", "fp16"],
     [ROW.format("dtype", '"fp16"', "--dtype"), ROW.format("graph", '"fused"', "default fused (no --graph)")], []),
    ("preset, no variant flags", ["--preset", "llama-3.1-8b"],
     [ROW.format("dtype", '"fp16"', "the preset's [build] dtypes (no --dtype)"),
      ROW.format("max_positions", "131072", "max_position_embeddings")], ["[build] lists"]),
    ("preset, --graph given", ["--preset", "llama-3.1-8b", "--graph", "decomposed"],
     [ROW.format("graph", '"decomposed"', "--graph"),
      ROW.format("dtype", '"fp16"', "the preset's [build] dtypes (no --dtype)")], []),
    ("decoder", ["--hf-config", "{config}", "--artifact", "decoder", "--num-layers", "1", "--dtype", "fp16"],
     [ROW.format("position.theta", "500000.0", "rope_theta"), ROW.format("model_type", '"llama"', "model_type"),
      ROW.format("num_layers", "1", "--num-layers (over the config's num_hidden_layers)"),
      ROW.format("dtype", '"fp16"', "--dtype"), ROW.format("graph", '"fused"', "ropeexport default (no --graph)")],
     []),
    # a field inside a table sourced as a whole (scaling_params) takes the table's source, not "ropeexport default"
    ("gemma4 decoder", ["--hf-config", "{gemma4}", "--artifact", "decoder"],
     [ROW.format("position.head_dim", "16", "per_layer_config (the full layers')"),
      ROW.format("position.scaling_params.partial_rotary_factor", "0.25",
                 "partial_rotary_factor <- rope_parameters.full_attention.partial_rotary_factor"),
      ROW.format("attn_scale", "1.0", "Gemma4TextAttention.scaling = 1.0 (architecture)")], []),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "argv", "present", "absent"), CASES, ids=[c[0] for c in CASES])
def test_a_dry_run_prints_each_value_and_its_source(case: str, argv: list[str], present: list[str],
                                                    absent: list[str], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    config, gemma4 = tmp_path / "config.json", tmp_path / "gemma4" / "config.json"
    config.write_text(json.dumps(LLAMA))
    gemma4.parent.mkdir()
    gemma4.write_text(json.dumps(GEMMA4))
    out = tmp_path / "out"
    args = [a.format(config=config, gemma4=gemma4) for a in argv]
    assert main(["build", *args, "--dry-run", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    for line in present:
        assert line in printed, (line, printed)
    for words in absent:
        assert not any(words in line for line in printed), (words, printed)
    assert not out.exists()


@pytest.mark.fast
def test_a_dry_run_as_json_carries_the_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    assert main(["build", "--hf-config", str(config), "--dry-run", "--json", "--out", str(tmp_path / "out")]) == 0
    (item,) = json.loads(capsys.readouterr().out)["artifacts"]
    assert set(item["sources"]) == set(item["spec"])
    assert item["sources"]["theta"] == "rope_theta" and item["sources"]["dtype"] == "default fp32 (no --dtype)"
