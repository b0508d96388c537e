"""The ``block`` of one checkpoint layer (``ropeexport.decoder.layer``): built, verified, re-verified from the same
checkpoint, and failing when the checkpoint's weights change under it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

import ropeexport as rx
from ropeexport.cli import main
from tests.decoder.tiny import checkpoint

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

pytestmark = pytest.mark.slow  # a checkpoint layer's block built and verified in seven forms

CASES = [("llama-biases", "fused"), ("mistral-window", "decomposed"), ("phi3-longrope", "gqa"), ("bloom", "fused"),
         ("gpt_neox", "tensorrt"), ("gptj", "fused"), ("qwen2-yarn", "gqa")]  # fmt: skip


@pytest.mark.parametrize(("name", "graph"), CASES, ids=[f"{n}-{g}" for n, g in CASES])
def test_checkpoint_layer_block_builds_and_verifies_again(name: str, graph: str, tmp_path: Path,
                                                          tiny_checkpoint) -> None:  # noqa: ANN001
    ckpt = tiny_checkpoint(name)
    result = rx.build_layer_block(ckpt, tmp_path / "out", layer=1, graph=graph)
    assert result.passed, [c.worst.data for c in result.encoding_report.comparisons if not c.passed]
    origin = json.loads((result.path / "manifest.json").read_text())["build"]["origin"]
    assert origin["layer"] == 1 and origin["checkpoint"] == str(ckpt.resolve())
    props = {
        p.key: p.value for p in onnx.load(str(result.path / "model.onnx"), load_external_data=False).metadata_props
    }
    assert props["ropeexport.weights"].endswith("layer 1") and str(ckpt.resolve()) in props["ropeexport.weights"]
    assert rx.verify(result.path)[0].passed


def test_changed_checkpoint_weights_fail_verification(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "ckpt", "llama")
    result = rx.build_layer_block(ckpt, tmp_path / "out", layer=0)
    tensors = load_file(str(ckpt / "model.safetensors"))
    tensors["model.layers.0.self_attn.k_proj.weight"] *= 1.01  # the artifact was built from the old values
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    assert not rx.verify(result.path)[0].passed
    tensors["model.layers.1.self_attn.k_proj.weight"] *= 1.01  # another layer's weights: no effect on layer 0
    tensors["model.layers.0.self_attn.k_proj.weight"] /= 1.01
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    assert rx.verify(result.path)[0].passed


@pytest.mark.parametrize(
    ("label", "argv", "message"),
    [
        ("layer past the last", ["--layer", "2"], "--layer: must be in [0, 1]"),
        ("layer not a number", ["--layer", "x"], "--layer: must be an integer"),
        ("a decoder size", ["--num-layers", "1"], "--num-layers: is a decoder flag"),
        ("a preset too", ["--preset", "llama-2-7b"], "--checkpoint: takes its config from the folder"),
    ],
)
def test_bad_layer_block_input(
    label: str, argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = checkpoint(tmp_path / "ckpt", "llama")
    capsys.readouterr()
    out = tmp_path / "out"
    code = main(["build", "--artifact", "block", "--checkpoint", str(ckpt), *argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_layer_without_a_checkpoint_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--artifact", "block", "--layer", "1", "--dry-run"]) == 2
    assert "--layer: picks a checkpoint layer" in capsys.readouterr().err


def test_a_moved_checkpoint_is_named_when_verifying(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = checkpoint(tmp_path / "ckpt", "llama")
    result = rx.build_layer_block(ckpt, tmp_path / "out")
    shutil.move(ckpt, tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["verify", str(result.path)]) == 2
    err = capsys.readouterr().err
    # the field the path was read from, the path, and what to do: one line
    assert "manifest.json build.origin.checkpoint: " in err and f"{str(ckpt)!r}" in err, err
    assert "no longer exists; restore it to verify again" in err and err.count("\n") == 1, err


def test_a_layer_block_takes_its_own_layers_window(tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    # SmolLM3's layer 2 slides over 6 slots (layer 0 does not): the block is that layer, window and all.
    for layer, window in ((2, [6]), (0, [])):
        result = rx.build_layer_block(tiny_checkpoint("smollm3-nope"), tmp_path / f"out{layer}", layer=layer)
        assert result.passed
        model = onnx.load(str(result.path / "model.onnx"))
        held = [int(onnx.numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "block/window"]
        assert held == window, (layer, held)


# (tiny checkpoint, layer, the one-line refusal): layers a block artifact is not (yet), never a wrong block
_NOT_A_BLOCK = "layer (q/k norms, its logit scale, cap, sinks or chunked attention) is not a block"
REFUSED = [
    ("smollm3-nope", 1, "--layer: layer 1 has no positional encoding (no_rope_layers)"),
    ("qwen3", 0, f"--layer: a qwen3 {_NOT_A_BLOCK}"),
    ("gemma3", 2, f"--layer: a gemma3_text {_NOT_A_BLOCK}"),
    ("gpt_oss", 1, f"--layer: a gpt_oss {_NOT_A_BLOCK}"),
    ("llama4", 0, f"--layer: a llama4_text {_NOT_A_BLOCK}"),
]


@pytest.mark.parametrize(("name", "layer", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_layers_a_block_cannot_be_are_refused_by_name(
    name: str, layer: int, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_checkpoint  # noqa: ANN001
) -> None:
    ckpt = tiny_checkpoint(name)
    capsys.readouterr()
    out = tmp_path / "out"
    code = main(["build", "--artifact", "block", "--checkpoint", str(ckpt), "--layer", str(layer), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
