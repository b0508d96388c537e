"""Bad decoder input: each row runs the real CLI and requires exit 2, one stderr line naming the key or tensor, no
traceback, and nothing written (``--out`` absent).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from ropeexport.cli import main  # noqa: E402
from tests.decoder.tiny import checkpoint

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

DECODER = ["build", "--artifact", "decoder"]


def _edit(folder: Path, change: Callable[[dict], None]) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _ckpt(tmp: Path, change: Callable[[dict], None] | None = None) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama")
    if change is not None:
        _edit(folder, change)
    return ["--checkpoint", str(folder)]


def _sharded(tmp: Path, rewrite: Callable[[dict], None]) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama", max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    rewrite(index["weight_map"])
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return ["--checkpoint", str(folder)]


def _config(tmp: Path, **fields: object) -> list[str]:
    config = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
              "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 128}  # fmt: skip
    path = tmp / "config.json"
    path.write_text(json.dumps(config | fields))
    return ["--hf-config", str(path)]


def _no_config(tmp: Path) -> str:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


def _without_weights(tmp: Path) -> str:
    (tmp / "ckpt" / "model.safetensors").unlink()
    return str(tmp / "ckpt")


def _pop(key: str) -> Callable[[dict], None]:
    return lambda t: t.pop(key)


Q0 = "model.layers.0.self_attn.q_proj.weight"
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("missing tensor", lambda t: _ckpt(t, _pop("model.layers.1.mlp.up_proj.weight")),
     "checkpoint: tensor 'model.layers.1.mlp.up_proj.weight' is missing"),
    ("extra tensor", lambda t: _ckpt(t, lambda x: x.update({"model.layers.0.adapter.weight": torch.ones(2)})),
     "checkpoint: tensor 'model.layers.0.adapter.weight' is not a weight"),
    ("mis-shaped tensor", lambda t: _ckpt(t, lambda x: x.update({Q0: torch.ones(32, 31)})),
     f"checkpoint: tensor '{Q0}' has shape [32, 31], the config implies [32, 32]"),
    ("non-finite tensor", lambda t: _ckpt(t, lambda x: x[Q0].__setitem__((0, 0), float("nan"))),
     f"checkpoint: tensor '{Q0}' holds 1 non-finite value"),
    ("integer tensor", lambda t: _ckpt(t, lambda x: x.update({Q0: torch.ones(32, 32, dtype=torch.int32)})),
     f"checkpoint: tensor '{Q0}' is torch.int32"),
    ("shard outside the folder", lambda t: _sharded(t, lambda m: m.update({Q0: "../../etc/passwd"})),
     "checkpoint: model.safetensors.index.json: weight_map['model.layers.0.self_attn.q_proj.weight'] = "
     "'../../etc/passwd' points outside"),
    ("shard file absent", lambda t: _sharded(t, lambda m: m.update({Q0: "model-9.safetensors"})),
     "no such file in the folder"),
    ("no weights file", lambda t: _ckpt(t)[:1] + [_without_weights(t)], "holds neither model.safetensors"),
    ("sizes with a checkpoint", lambda t: [*_ckpt(t), "--num-layers", "1"], "--num-layers: size overrides"),
    ("unknown architecture", lambda t: _config(t, model_type="falcon"), "model_type: 'falcon' has no decoder"),
    ("mixture of experts", lambda t: _config(t, num_local_experts=8), "num_local_experts: is not supported"),
    ("windows on some layers", lambda t: _config(t, model_type="qwen2", use_sliding_window=True),
     "use_sliding_window: is not supported"),
    ("latent attention", lambda t: _config(t, kv_lora_rank=64), "kv_lora_rank: is not supported"),
    ("unknown activation", lambda t: _config(t, hidden_act="gelu_10"), "hidden_act: activation 'gelu_10'"),
    ("missing size", lambda t: _config(t, intermediate_size=None), "intermediate_size: missing"),
    ("width not a head multiple", lambda t: [*_config(t), "--hidden-size", "20"], "--hidden-size: must be a multiple"),
    ("decoder flag alone", lambda t: ["--checkpoint", str(t)], "--checkpoint: is a decoder flag"),
    ("another spec flag", lambda t: [*_config(t), "--theta", "5"], "theta: is not read with --artifact decoder"),
    ("bf16", lambda t: [*_config(t), "--dtype", "bf16"], "dtype: must be one of fp32, fp16"),
    ("static-cache form", lambda t: [*_config(t), "--graph", "static-cache"], "graph: must be one of fused"),
    ("another runtime", lambda t: [*_config(t), "--runtime", "trt"], "--runtime: is not read with --artifact decoder"),
    ("a tolerance", lambda t: [*_config(t), "--atol", "1"], "--atol: is not read with --artifact decoder"),
    ("two artifacts", lambda t: [*_config(t), "--artifact", "block"], "artifact: decoder is built on its own"),
    ("two presets", lambda t: ["--preset", "llama-2-7b", "--preset", "mistral-7b"], "artifact: decoder takes one"),
    ("a spec-only preset", lambda t: ["--preset", "sandwich"], "--preset: 'sandwich' is a spec card"),
    ("a preset and a checkpoint", lambda t: [*_ckpt(t), "--preset", "llama-2-7b"],
     "--preset: cannot be combined with --checkpoint"),
    ("a checkpoint without config.json", lambda t: ["--checkpoint", _no_config(t)], "--checkpoint: "),
    ("a name for two builds", lambda t: [*_config(t), "--name", "mine", "--graph", "gqa", "--graph", "fused"],
     "name: names one folder"),
]  # fmt: skip


@pytest.mark.parametrize(("label", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_decoder_input_exits_2_and_writes_nothing(
    label: str, args: Callable[[Path], list[str]], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*(DECODER if label != "decoder flag alone" else ["build"]), *args(tmp_path)]
    out = tmp_path / "out"
    capsys.readouterr()  # the setup's own output (transformers' progress bars)
    code = main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert message in err, err
    assert not out.exists()


def test_dry_run_resolves_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main([*DECODER, *_config(tmp_path), "--graph", "gqa", "--graph", "fused", "--dry-run", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and not out.exists()
    assert "-decoder-fp32-gqa: decode-64, chunked-prefill, left-padded, far-positions" in text
    assert "2 decoder(s) (dry run: nothing written)" in text


def test_out_that_is_not_a_tree_is_refused_also_in_a_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for extra in ([], ["--dry-run"]):
        capsys.readouterr()
        assert main([*DECODER, *_config(tmp_path), *extra, "--out", str(mine)]) == 2
        assert "--out: " in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_json_is_one_document_and_quiet_prints_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = [*DECODER, *_config(tmp_path), "--graph", "gqa", "--graph", "fused", "--no-eager", "--out", str(out)]
    assert main([*args, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [b["path"].rsplit("-", 2)[-2:] for b in document["built"]] == [["fp32", "gqa"], ["fp32", "fused"]]
    assert all(b["passed"] for b in document["built"])
    assert main([*args, "--quiet"]) == 0  # the same specs again: rebuilt in place, nothing refused
    assert capsys.readouterr().out.split() == [b["path"] for b in document["built"]]
