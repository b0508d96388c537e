"""The memory estimate of a decoder build (``ropeexport.decoder.memory``) against a real build's peak, and its parts.

The refusals themselves (an 8B config seeded, a 2^17-wide config, a checkpoint past the limit, a limit that is not a
size) are rows of ``tests/decoder/test_bad_decoder_inputs.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.memory import ENV, available, estimate, parse_size, per_parameter
from ropeexport.errors import SpecError
from tests.toolmod import tool

pytest.importorskip("transformers", reason="the build's transformers reference is part of what the estimate bounds")

ROOT = Path(__file__).resolve().parents[2]

# 4.1M parameters: large enough that the weights' part (about 180 MiB) shows beside the imports (about 500 MiB).
SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "intermediate_size": 1024, "vocab_size": 4096,
         "max_position_embeddings": 128}  # fmt: skip
FACTOR = 1.5  # the estimate bounds the peak from above, and by at most this much (measured x1.18 to x1.32)

# The child's own peak is VmHWM of /proc/self/status (its address space's high-water mark, which starts afresh at
# exec). Not ru_maxrss: Linux carries the parent's peak into it across fork and exec, and pytest's own grows past
# 1 GiB in a long session.
CHILD = """
import json, sys
import ropeexport as rx
result = rx.build_decoder(sys.argv[2], hf_config=sys.argv[1])
kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"passed": result.passed, "peak": kib * 1024}))
"""


@pytest.mark.slow
def test_the_estimate_bounds_a_small_builds_peak_within_a_factor(tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL))
    need = estimate(rx.resolve_decoder(hf_config=config), seeded=True)
    # A fresh interpreter: its peak RSS is this build's alone, imports included.
    run = subprocess.run([sys.executable, "-c", CHILD, str(config), str(tmp_path / "out")], capture_output=True,
                         text=True, env=os.environ | {ENV: "64G"}, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["passed"]
    ratio = need.total / measured["peak"]
    print(f"peak {measured['peak'] / 2**20:.0f} MiB, estimate {need.total / 2**20:.0f} MiB, x{ratio:.2f}")
    assert 1.0 <= ratio <= FACTOR, (measured["peak"], need.total)


def test_the_parameter_count_is_llama_3_1_8bs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "100T")  # nothing refused: the figure itself is what is checked
    spec = rx.resolve_decoder(preset="llama-3.1-8b")
    need = estimate(spec, seeded=True)
    assert need.parameters == 8_030_261_248  # Meta's published count: our canonical weights are the model's
    assert need.per_parameter == 24 and 205 * 2**30 < need.total < 215 * 2**30
    # from a checkpoint, streamed, without the transformers reference: ONNX Runtime's copy alone scales with the model
    streamed = estimate(spec, seeded=False, eager=False)
    # (ONNX Runtime's session let go before the float64 passes: the scenarios' phase, its fp32 weights, is the peak)
    assert streamed.per_parameter == 4 and 34 * 2**30 < streamed.total < 37 * 2**30


# (block size, symmetric, ONNX Runtime's bytes a projection weight: half a byte plus the block's fp32 scale and,
# asymmetric, its half-byte zero point, held once: the prepacked copy replaces the initializer)
INT4 = [(32, True, 0.5 + 4 / 32), (128, True, 0.5 + 4 / 128), (32, False, 0.5 + 4.5 / 32)]


@pytest.mark.parametrize(("block", "symmetric", "projection"), INT4)
def test_an_int4_8b_decoder_is_estimated_at_its_packed_size(block: int, symmetric: bool, projection: float,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # Llama-3.1-8B from a checkpoint, int4, without the transformers reference: the projections (7.5e9 of its 8.03e9
    # parameters, lm_head with them) at their packed size, the embedding (525M) and the 65 norms' scales in fp32. It
    # fits this 24 GB machine; in fp32 it does not.
    monkeypatch.setenv(ENV, "100T")
    spec = rx.resolve_decoder(preset="llama-3.1-8b", weight_format="int4", block_size=block, symmetric=symmetric)
    need = estimate(spec, seeded=False, eager=False)
    floats = 128256 * 4096 + (2 * 32 + 1) * 4096
    expected = (floats * 4 + (need.parameters - floats) * projection) / need.parameters
    assert need.per_parameter == pytest.approx(expected, rel=1e-9)
    # measured 7.98 GiB verified (tools/figures/sizes.md; block 32, symmetric, the session then held through the
    # float64 passes): the estimate above it for that form, every form within 1.5x of it as for fp32
    if (block, symmetric) == (32, True):
        assert 7.98 * 2**30 < need.total
    assert need.total < 1.5 * 7.98 * 2**30 < estimate(rx.resolve_decoder(preset="llama-3.1-8b"), False, False).total


def test_a_tied_int4_embedding_gathered_from_the_head_is_counted_at_its_packed_size(tmp_path: Path) -> None:
    # Llama-3.2-1B int4 (tied embeddings), from a checkpoint without the transformers reference: its embedding is
    # gathered from the int4 head's bytes (tied_embedding_int4), so every parameter but the 33 norms' scales is held
    # at the packed size; a spec built before the field keeps its embedding (263M) in fp32, as its model does.
    model_type, fields = tool("write_checkpoint").MODELS["llama-3.2-1b"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **fields}))
    spec, _ = resolve(DecoderRequest(hf_config=tmp_path / "config.json", weight_format="int4"))
    assert spec.storage.tied_embedding_int4
    older = spec.replace(tied_embedding_int4=False)
    need, before = estimate(spec, seeded=False, eager=False), estimate(older, seeded=False, eager=False)
    norms, embed, packed = (2 * 16 + 1) * 2048, 128256 * 2048, 0.5 + 4 / 32
    assert need.per_parameter == pytest.approx((norms * 4 + (need.parameters - norms) * packed) / need.parameters)
    assert before.per_parameter * need.parameters == pytest.approx(
        need.per_parameter * need.parameters + embed * (4 - packed))
    assert need.total < before.total


def test_an_int4_heads_export_is_a_slice_of_it_and_its_packed_bytes(tmp_path: Path) -> None:
    # Gemma 4 31B's text model (write_checkpoint's entry: a 262144 x 5376 tied head), int4 from a checkpoint: the
    # export reads and packs the head a slice at a time (export.head_weight), so its in-flight part is the widest
    # layer weight (gate, 21504 x 5376) and the head's packed bytes twice, not 1.4e9 values in bf16 and float32
    from ropeexport.decoder.export import HEAD_SLICE_BYTES as SLICE
    from ropeexport.decoder.memory import EXPORT_BYTES

    _, fields = tool("write_checkpoint").MODELS["gemma-4-31b"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4_text", **fields["text_config"]}))
    spec, _ = resolve(DecoderRequest(hf_config=tmp_path / "config.json", weight_format="int4", block_size=32))
    need = estimate(spec, seeded=False, eager=False)
    head = 262144 * 5376
    assert SLICE // 4 < 21504 * 5376 < head
    assert need.export == EXPORT_BYTES * 21504 * 5376 + int(2 * head * (0.5 + 4 / 32))
    assert need.export < EXPORT_BYTES * head / 4  # the whole head in flight: over 4x this


@pytest.mark.parametrize(
    ("dtype", "seeded", "eager", "count"),
    [("fp32", True, True, 24), ("fp16", True, True, 26), ("fp32", False, True, 8), ("fp16", False, True, 12),
     ("fp32", True, False, 12), ("fp16", True, False, 14), ("fp32", False, False, 4), ("fp16", False, False, 6)],
)
def test_bytes_a_parameter(dtype: str, seeded: bool, eager: bool, count: int) -> None:
    # float64 draws (8) or a checkpoint read as used (0); ONNX Runtime's copy in the dtype (fp16: and a float32 one);
    # transformers' model likewise, and for seeded weights the float32 state dict and its copy it is loaded from
    assert per_parameter(dtype, seeded, eager) == count


def test_a_real_checkpoint_is_estimated_to_fit_where_it_did_not(tmp_path: Path) -> None:
    # Llama-3.2-1B's full shape from a checkpoint (tools/write_checkpoint.py's config): streamed, with the transformers
    # reference, it fits a 24 GB machine; holding every weight 28 times over (the estimate before streaming) it needed
    # 37 GiB and was refused.
    model_type, fields = tool("write_checkpoint").MODELS["llama-3.2-1b"]
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **fields}))
    spec, _ = resolve(DecoderRequest(hf_config=tmp_path / "config.json"))  # resolved, not checked: seeded it is not
    need = estimate(spec, seeded=False, eager=True)
    assert need.parameters == 1_235_814_400  # Meta's published count, the tied head once
    assert 8 * 2**30 < need.total < 20 * 2**30
    assert need.parameters * 28 > 32 * 2**30  # what the estimate before streaming held


@pytest.mark.parametrize(
    ("text", "count"),
    [("8G", 8 * 2**30), ("8GiB", 8 * 2**30), ("512M", 512 * 2**20), ("1.5g", 3 * 2**29), ("4096", 4096),
     (" 2T ", 2**41)],
)
def test_the_limit_override_reads_sizes(text: str, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_size(text) == count
    monkeypatch.setenv(ENV, text)
    assert available() == (count, f"{ENV}={text.strip()}")


@pytest.mark.parametrize("text", ["lots", "-1G", "0", "8 Q", "\u0668G", "1e9"])
def test_a_limit_that_is_not_a_size_names_the_variable(text: str) -> None:
    with pytest.raises(SpecError, match=rf"^{ENV}: must be a size such as 8G"):
        parse_size(text)


def test_without_the_override_the_machines_memory_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    have, where = available()
    assert have is not None and have > 2**28
    assert where in ("physical memory", "the cgroup's memory limit", "ulimit -v")
    assert have <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_gemma_4_31bs_two_layers_are_estimated_above_their_measured_verification(tmp_path: Path) -> None:
    # Gemma 4 31B's widths on 2 layers (tools/write_checkpoint.py gemma-4-31b --layers 2: one sliding, one full;
    # a 262144-word tied head), int4 gqa, verified without transformers: measured 9.35 GiB peak RSS
    # (tools/figures/sizes.md, after the verification let go of the session and the unquantized pass before the
    # truth's, and read a layer's MLP a projection at a time; before: stopped at a 9 GiB cap, estimated 20.7 GiB)
    tool("write_checkpoint").config_of("gemma-4-31b", 2).save_pretrained(tmp_path)
    spec, _ = resolve(DecoderRequest(hf_config=tmp_path / "config.json", weight_format="int4", block_size=32,
                                     symmetric=True, graph="gqa"))  # fmt: skip
    need = estimate(spec, seeded=False, eager=False)
    assert 9.35 * 2**30 < need.total < 1.5 * 9.35 * 2**30, need
    # by phase (the process's VmHWM at each phase's end): the float64 passes 9.35 GiB, the estimate's peak above it;
    # ONNX Runtime's scenarios 6.84, estimated 5.74 with the soft-capped head's buffer in its arena (4.57 before) and
    # the export 4.53, estimated 3.96: both under, by what is not explained here (held so: a change to either shows)
    phases = need.phases
    assert 9.35 * 2**30 < phases["passes"] == need.total, phases
    assert 0.8 * 6.84 * 2**30 < phases["scenarios"] < 6.84 * 2**30, phases
    assert 0.8 * 4.53 * 2**30 < phases["export"] < 4.53 * 2**30, phases


# One ONNX Runtime call of 1024 slots over a vocabulary of 65536 (256 MiB of float32 logits) on a 1-layer decoder, in
# a fresh interpreter (its VmHWM its own): how far the process's peak rises above the logits it returns.
CALL = """
import json, sys
import numpy as np
from pathlib import Path
from ropeexport.runtimes.ort import OrtRunner
runner = OrtRunner(Path(sys.argv[1]) / "model.onnx", providers=["CPUExecutionProvider"])
feeds = {"input_ids": np.ones((1, 1024), np.int64), "attention_mask": np.ones((1, 1024), np.int64),
         "position_ids": np.arange(1024, dtype=np.int64)[None]}
for i in runner.session.get_inputs():
    if i.name not in feeds:  # an empty cache
        feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
status = lambda key: next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(key))
# the import and the session's load peaked above the resident set and freed it (on CI's machine by more than here):
# writing 5 to clear_refs resets the high-water mark to the resident set (Linux >= 4.0), so the call's peak is what
# rises past it
open("/proc/self/clear_refs", "w").write("5")
before = status("VmHWM:")
assert abs(before - status("VmRSS:")) < 2**20, "the high-water mark was not reset"
logits = runner.session.run(None, feeds)[0]
print(json.dumps({"peak": status("VmHWM:") - before, "logits": logits.nbytes}))
"""

# (case, final soft cap, graph form, weight format): ONNX Runtime's buffers beyond the returned logits, HEAD_BUFFERS
HEADS = [("plain head", 0.0, "fused", ""), ("soft cap after it", 30.0, "fused", ""),
         ("soft cap, gqa int4", 30.0, "gqa", "int4")]  # fmt: skip


@pytest.mark.parametrize(("case", "cap", "graph", "weights"), HEADS, ids=[h[0] for h in HEADS])
def test_onnx_runtime_holds_the_head_buffers_the_estimate_counts(
    case: str, cap: float, graph: str, weights: str, tmp_path: Path
) -> None:
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.decoder.memory import HEAD_BUFFERS
    from ropeexport.decoder.weights import seeded_weights
    from ropeexport.graph.onnx_io import save_model

    config = {**SMALL, "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1, "vocab_size": 65536,
              "max_position_embeddings": 2048}  # fmt: skip
    request = DecoderRequest(config=config, name="head", graph=graph, weight_format=weights)
    spec = resolve(request)[0].replace(final_softcap=cap)
    save_model(build_decoder_graph(spec, seeded_weights(spec), "seeded"), tmp_path)
    run = subprocess.run([sys.executable, "-c", CALL, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    beyond = out["peak"] / out["logits"] - 1  # buffers held beyond the returned logits, at the call's peak
    assert HEAD_BUFFERS[bool(cap)] - 0.05 < beyond < HEAD_BUFFERS[bool(cap)] + 0.3, (case, beyond)


def test_the_truths_hidden_states_are_counted_per_run_of_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Qwen3-VL-4B (M-RoPE, static tables): a scenario's calls extend one another and are one run of the truth
    # (oracle.chained_float64), so its hidden states are the scenario's token-rows once; a length-dependent schedule's
    # are bounded as every call recomputed from its start (the count every decoder had before)
    from ropeexport.decoder import memory

    tool("write_checkpoint").config_of("qwen3-vl-4b", 2).save_pretrained(tmp_path)
    spec, _ = resolve(DecoderRequest(hf_config=tmp_path / "config.json", weight_format="int4", graph="gqa"))
    runs = memory.scenarios(spec)
    rows = [len(s.prompts) * (max(s.prompts) + s.steps) for s in runs]
    whole = sum(n * (s.steps + 1) for n, s in zip(rows, runs, strict=True))
    chained = estimate(spec, seeded=False, eager=False)
    monkeypatch.setattr(memory, "regime_kind", lambda position: "continuous")
    bound = estimate(spec, seeded=False, eager=False)
    assert bound.activations - chained.activations == 8 * spec.hidden_size * (whole - sum(rows)) > 0
