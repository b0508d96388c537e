"""Decoders built streamed (``decoder.export.write_decoder``, ``graph.onnx_io.ExternalData``), from a checkpoint
``tools/write_checkpoint.py`` writes: tiny sizes here, the real ones in ``tools/bench_sizes.py``.

Streaming is what a build does past 64 MiB of weights; these models are smaller, so the tests lower that threshold
to 0 (``EXTERNAL_DATA_THRESHOLD`` of ``decoder.export``): the same code path at a size a test can afford.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest

import ropeexport as rx
import ropeexport.decoder.export as export
from ropeexport.components.linear import Packed
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import CheckpointWeights, load_checkpoint
from ropeexport.decoder.parts import weight_format
from ropeexport.decoder.weights import describe, expected, lm_head
from ropeexport.graph.onnx_io import DATA_FILE, ExternalData
from tests.clirun import run
from tests.toolmod import tool

pytest.importorskip("transformers", reason="tools/write_checkpoint.py builds the model's names on the meta device")

ROOT = Path(__file__).resolve().parents[2]
# Qwen3-4B's config (qk norms, tied head, shards) at a test's size.
TINY = {"hidden_size": 64, "intermediate_size": 96, "vocab_size": 300, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512}  # fmt: skip


def write(folder: Path, model: str = "qwen3-4b", layers: int = 2, shard_gb: float = 0.00003, **fields: object) -> Path:
    """``tools/write_checkpoint.py``'s ``write_checkpoint`` in this process; the checkpoint folder."""
    tool("write_checkpoint").write_checkpoint(model, folder, layers, {**TINY, **fields}, shard_gb=shard_gb)
    return folder


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-4B-shaped checkpoint in shards, written by the tool's command line as a user runs it."""
    folder = tmp_path_factory.mktemp("written") / "qwen3-tiny"
    sets = [f"--set={k}={json.dumps(v)}" for k, v in TINY.items()]
    command = [sys.executable, str(ROOT / "tools" / "write_checkpoint.py"), "qwen3-4b", str(folder), "--layers", "2",
               "--shard-gb", "0.00003", *sets]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every decoder build streams (module doc)."""
    monkeypatch.setattr(export, "EXTERNAL_DATA_THRESHOLD", 0)


def test_the_written_checkpoint_is_what_transformers_reads(ckpt: Path) -> None:
    import torch
    import transformers

    assert len(list(ckpt.glob("model-*-of-*.safetensors"))) > 1  # sharded, with its index
    model = transformers.AutoModelForCausalLM.from_pretrained(str(ckpt))
    weights = dict(model.named_parameters())
    assert model.dtype == torch.bfloat16 and model.config.architectures == ["Qwen3ForCausalLM"]
    assert torch.all(weights["model.norm.weight"] == 1)
    std = float(weights["model.layers.0.mlp.down_proj.weight"].detach().float().std())
    assert 0.018 < std < 0.022  # N(0, 0.02^2), rounded to bf16
    again = write(ckpt.parent / "again")  # the same seed writes the same bytes, in this process as on the command line
    for shard in ckpt.glob("*.safetensors"):
        assert (again / shard.name).read_bytes() == shard.read_bytes()


# Mixtures at a test's size: their experts are what transformers 5 fuses in memory and saves apart.
MIXTURES = {
    "qwen3-30b-a3b": {**TINY, "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2},
    # DeepSeek-V2-Lite's released keys (deepseek_v2), shrunk as the V3 stand-in below
    "deepseek-v2-lite": {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "vocab_size": 300,
                         "n_routed_experts": 4, "num_experts_per_tok": 2, "num_attention_heads": 2,
                         "num_key_value_heads": 2, "kv_lora_rank": 32, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16,
                         "v_head_dim": 16},
    "deepseek-v2-lite-v3": {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
                            "vocab_size": 300, "n_routed_experts": 4, "num_experts_per_tok": 2,
                            "num_attention_heads": 2, "num_key_value_heads": 2, "kv_lora_rank": 32,
                            "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16},
}  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize("model", sorted(MIXTURES))
def test_a_written_mixture_holds_the_tensors_save_pretrained_writes(tmp_path: Path, model: str) -> None:
    import transformers
    from safetensors import safe_open

    written = tool("write_checkpoint").write_checkpoint(model, tmp_path / "w", 2, MIXTURES[model], tokenizer=False)
    config = transformers.AutoConfig.from_pretrained(written["folder"])
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "saved")
    shapes = {}
    for folder in ("w", "saved"):
        with safe_open(str(tmp_path / folder / "model.safetensors"), "pt") as f:
            shapes[folder] = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    assert any(".experts.1.up_proj." in k for k in shapes["w"])  # experts apart, as saved
    assert shapes["w"] == shapes["saved"]
    spec, _ = resolve(DecoderRequest(checkpoint=str(tmp_path / "w"), weight_format="int4", block_size=16))
    weights = CheckpointWeights(spec, tmp_path / "w")  # every tensor read as the config's: none unexpected
    assert {k: weights[k].shape for k in weights} == expected(spec)


class OneExpertAtATime(CheckpointWeights):
    """A checkpoint that refuses to read a mixture's [E, ...] weight whole (a real size's truth cannot hold it)."""

    def __getitem__(self, name: str) -> np.ndarray:
        assert ".experts_" not in name, f"{name} read whole"
        return super().__getitem__(name)


@pytest.mark.fast
@pytest.mark.parametrize("model", sorted(MIXTURES))
def test_the_truth_reads_a_mixtures_experts_one_at_a_time(tmp_path: Path, model: str) -> None:
    from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
    from ropeexport.decoder.parts import position_pieces

    folder = tmp_path / "w"
    tool("write_checkpoint").write_checkpoint(model, folder, 2, MIXTURES[model], tokenizer=False)
    spec, _ = resolve(DecoderRequest(checkpoint=str(folder), weight_format="int4", block_size=16))
    ids = np.array([[3, 1, 4, 1, 5, 9]])
    feed = Feed(ids, np.arange(6)[None], np.ones((1, 6), dtype=np.int64))
    whole = Stored64(spec, CheckpointWeights(spec, folder))
    lazy = Stored64(spec, OneExpertAtATime(spec, folder))
    for name in [n for n in whole if ".experts_" in n]:  # each expert as the whole weight's, quantized alone
        stacked = whole[name]
        assert all(np.array_equal(lazy.expert(name, e), stacked[e]) for e in range(len(stacked))), name
    [expected_logits] = decoders_float64(spec, whole, [feed], position_pieces(spec))
    [logits] = decoders_float64(spec, lazy, [feed], position_pieces(spec))
    np.testing.assert_array_equal(logits, expected_logits)


def test_a_streamed_decoder_builds_verifies_and_verifies_again_where_it_lies(
    ckpt: Path, tmp_path: Path, streamed: None
) -> None:
    result = rx.build_decoder(tmp_path / "out", checkpoint=ckpt)
    assert result.passed, [s.summary.data for s in result.decoder_report.scenarios]
    manifest = json.loads((result.path / "manifest.json").read_text())
    assert {"model.onnx", DATA_FILE} <= set(manifest["files"])  # the data file is hashed like every file
    model = onnx.load(result.path / "model.onnx", load_external_data=False)
    inline = [t.name for t in model.graph.initializer if len(t.raw_data) >= 1024]
    assert not inline, inline  # the graph holds no weight bytes
    # The data's location is relative: the folder moved from the store's work folder into place and still loads.
    again = rx.verify(result.path)
    assert [r.passed for r in again] == [True]


@pytest.mark.parametrize(("dtype", "graph"), [("fp32", "fused"), ("fp16", "gqa"), ("fp32", "decomposed")])
def test_streamed_files_are_the_bytes_onnx_writes(ckpt: Path, tmp_path: Path, dtype: str, graph: str) -> None:
    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, dtype=dtype, graph=graph))
    held = export.build_decoder_graph(spec, load_checkpoint(spec, ckpt), describe(ckpt))
    (tmp_path / "held").mkdir()
    onnx.save_model(held, tmp_path / "held" / "model.onnx", save_as_external_data=True, location=DATA_FILE,
                    all_tensors_to_one_file=True, size_threshold=1024)  # fmt: skip
    (tmp_path / "streamed").mkdir()
    with ExternalData(tmp_path / "streamed" / DATA_FILE) as sink:
        model = export.build_decoder_graph(spec, CheckpointWeights(spec, ckpt), describe(ckpt), sink=sink)
        files = export.save_streamed(model, tmp_path / "streamed", sink)
    assert files == ["model.onnx", DATA_FILE]
    for name in files:
        assert (tmp_path / "streamed" / name).read_bytes() == (tmp_path / "held" / name).read_bytes(), name


class Watched(Mapping[str, np.ndarray]):
    """A weights mapping that records, at each read, the bytes of the weights it handed out that are still alive."""

    def __init__(self, weights: Mapping[str, np.ndarray]) -> None:
        self.weights = weights
        self.handed: list[tuple[weakref.ref[np.ndarray], int]] = []
        self.most = 0

    def __getitem__(self, name: str) -> np.ndarray:
        alive = sum(n for ref, n in self.handed if ref() is not None)
        self.most = max(self.most, alive)
        value = np.array(self.weights[name])  # an array of its own: alive only while the build holds it
        self.handed.append((weakref.ref(value), value.nbytes))
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.weights)

    def __len__(self) -> int:
        return len(self.weights)


@pytest.mark.parametrize("model", ["qwen3-4b", "llama-3.1-8b"])
def test_the_export_holds_one_layers_unit_at_a_time(tmp_path: Path, model: str) -> None:
    folder = write(tmp_path / model, model, layers=6, shard_gb=1.0, vocab_size=4000)
    spec, _ = resolve(DecoderRequest(checkpoint=folder))
    weights = Watched(CheckpointWeights(spec, folder))
    total = sum(weights.weights[n].nbytes for n in weights.weights)
    largest = max(weights.weights[n].nbytes for n in weights.weights)
    with ExternalData(tmp_path / DATA_FILE) as sink:
        graph = export.build_decoder_graph(spec, weights, describe(folder), sink=sink)
    # Alive beside a read: at most a layer's attention projections (read together for one MatMul) or its gate and
    # up (joined), never the model. The weights a build held all at once: every one.
    attention = sum(weights.weights[f"layers.0.{n}_proj"].nbytes for n in "qkvo")
    assert weights.most <= max(attention, 2 * largest), (weights.most, total)
    assert weights.most < total / 4
    assert graph.ByteSize() < 1 << 20  # the graph itself: names, shapes, places


# (checkpoint, symmetric): a tied head packed from the embedding's rows, an untied one from its own columns
HEADS = [("qwen3-4b", True), ("llama-3.1-8b", False)]


@pytest.mark.parametrize(("model", "symmetric"), HEADS)
def test_an_int4_head_packed_in_slices_is_the_whole_heads_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, symmetric: bool
) -> None:
    folder = write(tmp_path / model, model, layers=1, shard_gb=1.0)
    spec, _ = resolve(DecoderRequest(checkpoint=folder, dtype="fp32", weight_format="int4", block_size=32,
                                     symmetric=symmetric))  # fmt: skip
    weights, stores = CheckpointWeights(spec, folder), weight_format(spec)
    monkeypatch.setattr(export, "HEAD_SLICE_BYTES", 4 * spec.hidden_size * 7)  # 7 columns a slice: 43 of 300
    reads: list[int] = []
    read = CheckpointWeights.vocab_part
    monkeypatch.setattr(CheckpointWeights, "vocab_part", lambda self, name, start, stop: reads.append(stop - start)
                        or read(self, name, start, stop))  # fmt: skip
    sliced = export.head_weight(spec, weights, stores)
    whole = stores.pack(lm_head(spec, weights))
    assert isinstance(sliced, Packed) and max(reads) == 7 and sum(reads) == spec.vocab_size  # never read whole
    assert (sliced.zero_points is None) == symmetric
    for field in ("weight", "scales", "zero_points"):
        np.testing.assert_array_equal(getattr(sliced, field), getattr(whole, field), err_msg=field)


def _built(out: Path, ckpt: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    code, _, err = run(["build", "--artifact", "decoder", "--checkpoint", str(ckpt), "--out", str(out), "--no-eager",
                        "--name", "tiny", "--quiet"], capsys)  # fmt: skip
    assert code == 0, err
    return _hashes(out / "tiny")


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _cut_mid_tensor(shard: Path) -> None:
    """Truncate ``shard`` half-way through its largest tensor's bytes."""
    data = shard.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    begin, end = max((v["data_offsets"] for k, v in header.items() if k != "__metadata__"), key=lambda o: o[1] - o[0])
    shard.write_bytes(data[: 8 + length + (begin + end) // 2])


@pytest.mark.parametrize("fault", ["a shard truncated mid-tensor", "the disk fills while the data is written"])
def test_a_fault_is_one_line_and_leaves_the_old_decoder(
    fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, streamed: None
) -> None:
    import shutil

    folder = shutil.copytree(write(tmp_path / "ckpt"), tmp_path / "qwen3-tiny")
    out = tmp_path / "out"
    before = _built(out, folder, capsys)
    assert DATA_FILE in before
    if fault == "a shard truncated mid-tensor":
        shard = sorted(folder.glob("model-*.safetensors"))[-1]
        _cut_mid_tensor(shard)
        expect = f"ropeexport: error: --checkpoint: {shard.name} is not a safetensors file"
    else:
        place, written = ExternalData._place, []

        def fills(self: ExternalData, tensor: onnx.TensorProto, data: memoryview | bytes) -> onnx.TensorProto:
            if len(written) == 3:  # a few tensors in: the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            written.append(tensor.name)
            return place(self, tensor, data)

        monkeypatch.setattr(ExternalData, "_place", fills)
        expect = f"ropeexport: error: --out: cannot write {str(out)!r}: No space left on device; nothing was changed"
    code, _, err = run(["build", "--artifact", "decoder", "--checkpoint", str(folder), "--out", str(out),
                        "--no-eager", "--name", "tiny", "--quiet"], capsys)  # fmt: skip
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expect), err
    assert _hashes(out / "tiny") == before  # the old decoder, byte for byte
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "index.json", "tiny"]  # nothing half-written


def _rebuild_killed_mid_write(out: Path, folder: Path, marker: Path) -> subprocess.Popen[bytes]:
    """A rebuild of ``tiny`` from ``folder`` into ``out`` (streamed) that stops, writing ``marker``, once three
    tensors of its external data are written: the moment a kill leaves a half-written model.onnx.data behind.
    """  # noqa: D205
    script = marker.with_suffix(".py")
    script.write_text(textwrap.dedent(f"""
        import pathlib, time
        import ropeexport.decoder.export as export
        from ropeexport.graph.onnx_io import ExternalData
        export.EXTERNAL_DATA_THRESHOLD = 0
        place, written = ExternalData._place, []
        def slow(self, tensor, data):
            if len(written) == 3:
                pathlib.Path({str(marker)!r}).write_text(str(self.path))
                time.sleep(600)
            written.append(tensor.name)
            return place(self, tensor, data)
        ExternalData._place = slow
        from ropeexport.cli import main
        raise SystemExit(main(["build", "--artifact", "decoder", "--checkpoint", {str(folder)!r}, "--out",
                               {str(out)!r}, "--no-eager", "--name", "tiny", "--quiet", "--replace"]))
    """))
    proc = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 240
    while not marker.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the rebuild ended before writing its data: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the rebuild never reached its external data")
        time.sleep(0.05)
    return proc


@pytest.mark.slow
def test_a_streamed_rebuild_killed_mid_write_leaves_the_old_decoder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], streamed: None
) -> None:
    import shutil

    from ropeexport.store import Store

    folder = shutil.copytree(write(tmp_path / "ckpt"), tmp_path / "qwen3-tiny")
    out = tmp_path / "out"
    before = _built(out, folder, capsys)
    proc = _rebuild_killed_mid_write(out, folder, tmp_path / "reached")
    partial = Path((tmp_path / "reached").read_text())
    assert partial.exists() and partial.stat().st_size > 0 and out / "tiny" not in partial.parents  # written aside
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -9
    assert _hashes(out / "tiny") == before  # the verified decoder, byte for byte
    Store(out).clean()  # what the next writer does first: the dead build's work goes
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "index.json", "tiny"]
    [result] = rx.verify(out / "tiny")
    assert result.passed
