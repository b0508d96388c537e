"""The onnxruntime-genai package a decoder build writes: loaded by onnxruntime-genai 0.18, greedy, same tokens.

onnxruntime-genai runs the model with its own loop and keeps the cache from step to step: its tokens must equal
ropeexport's own ORT loop under the ``keep`` policy. Where no regime switches (every schedule but LongRoPE's and
dynamic NTK's past their original length) that is also the ``re-prefill`` loop, whose every token the build checked
against the float64 recompute. Across a LongRoPE switch the two loops may part: onnxruntime-genai follows ``keep``,
unless its caller re-prefills at the switch (``rewind_to(0)``, the sequence appended again): then it is the exact one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.decoder.greedy import run_scenario
from ropeexport.decoder.scenarios import Scenario
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import CheckpointError
from ropeexport.runtimes.ort import OrtRunner
from tests.decoder.tiny import checkpoint

pytestmark = pytest.mark.slow  # onnxruntime-genai generating from nine built decoders

og = pytest.importorskip("onnxruntime_genai", reason="onnxruntime-genai (the test extra) is the serving engine")
PROMPT, STEPS = 12, 64
CASES = [("llama", "fused"), ("llama", "gqa"), ("phi3-longrope", "fused"), ("llama-dynamic", "fused"),
         ("mistral-window", "fused"), ("qwen2-yarn", "gqa"), ("gpt_neox", "fused"), ("gptj", "fused"),
         ("bloom", "fused"), ("gpt_oss", "fused"), ("gpt_oss", "gqa"), ("qwen3_moe", "fused"),
         ("qwen3_moe", "gqa"), ("ministral3", "gqa"),
         ("qwen2_5_vl", "gqa"), ("qwen3_vl", "fused"),
         ("llama4", "gqa")]  # fmt: skip  # ministral3: 76 positions cross its step at 64; llama4: 9 chunks, 19 steps
# qwen2_5_vl, qwen3_vl: position_ids [3, batch, seq], fed by onnxruntime-genai's Qwen-VL pipeline type (text only)


def _ours(folder: Path, policy: str) -> tuple[list[int], list[int]]:
    """(prompt, greedy tokens) of ropeexport's own loop on the built model."""
    spec = DecoderSpec.from_dict(json.loads((folder / "decoder.json").read_text())["spec"])
    runner = OrtRunner(folder / "model.onnx", providers=["CPUExecutionProvider"])
    calls = run_scenario(runner.infer, spec, Scenario("genai", (PROMPT,), STEPS, policy=policy))
    return calls[0].input_ids[0, :PROMPT].tolist(), [int(c.logits[0, -1].argmax()) for c in calls]


def _genai(folder: Path, prompt: list[int], count: int) -> list[int]:
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + count, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([prompt], np.int32))
    out = []
    while not generator.is_done():
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


@pytest.mark.parametrize(("name", "graph"), CASES, ids=[f"{n}-{g}" for n, g in CASES])
def test_onnxruntime_genai_generates_our_tokens(name: str, graph: str, tmp_path: Path, tiny_checkpoint) -> None:  # noqa: ANN001
    result = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint(name), graph=graph, eager=False)
    assert result.passed
    folder = result.path
    config = json.loads((folder / "genai_config.json").read_text())
    assert config["model"]["decoder"]["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert config["search"]["past_present_share_buffer"] == (graph == "gqa")  # GroupQueryAttention writes in place
    # ONNX Runtime's thread count (one a physical core), not onnxruntime-genai's half of the logical CPUs; served below
    assert config["model"]["decoder"]["session_options"]["intra_op_num_threads"] == 0
    prompt, kept = _ours(folder, "keep")
    _, exact = _ours(folder, "re-prefill")
    # An end-of-sequence id that none of the tokens is, so onnxruntime-genai runs every step.
    config["model"]["eos_token_id"] = next(t for t in range(config["model"]["vocab_size"]) if t not in kept + exact)
    (folder / "genai_config.json").write_text(json.dumps(config))
    served = _genai(folder, prompt, STEPS + 1)
    assert served == kept
    switched = {c.regime for s in result.decoder_report.scenarios if s.name == "decode-64" for c in s.calls}
    if len(switched) == 1:  # one regime over the whole generation: both loops are the exact one
        assert served == exact


def test_the_checkpoints_tokenizer_files_are_packaged(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    ckpt = checkpoint(tmp_path / "ckpt", "llama")
    Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")).save(str(ckpt / "tokenizer.json"))
    (ckpt / "tokenizer_config.json").write_text("{}")
    (tmp_path / "vocab.json").write_text('{"a": 0}')
    (ckpt / "vocab.json").symlink_to(tmp_path / "vocab.json")  # a link leaving the folder: refused, not copied
    with pytest.raises(CheckpointError, match=r"^checkpoint: vocab.json points outside the checkpoint folder"):
        rx.build_decoder(tmp_path / "refused", checkpoint=ckpt, eager=False)
    assert not (tmp_path / "refused").exists()
    (ckpt / "vocab.json").unlink()
    (ckpt / "merges.txt").symlink_to("tokenizer_config.json")  # a link within the folder: followed, its file copied
    result = rx.build_decoder(tmp_path / "out", checkpoint=ckpt, eager=False)
    files = result.decoder_report.files
    assert {"genai_config.json", "tokenizer.json", "tokenizer_config.json", "merges.txt"} <= set(files)
    assert (result.path / "tokenizer.json").read_bytes() == (ckpt / "tokenizer.json").read_bytes()
    assert not (result.path / "merges.txt").is_symlink() and (result.path / "merges.txt").read_text() == "{}"


def _genai_re_prefilled(folder: Path, prompt: list[int], count: int, limit: int) -> list[int]:
    """onnxruntime-genai's loop with the re-prefill policy done by its caller: when the sequence first passes ``limit``
    (the call of L = limit + 1), ``rewind_to(0)`` and the whole sequence appended again, so every cached key is
    rotated under the long regime.
    """  # noqa: D205
    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + count, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([prompt], np.int32))
    out: list[int] = []
    while not generator.is_done():
        sequence = generator.get_sequence(0)
        if len(sequence) == limit + 1:
            generator.rewind_to(0)
            generator.append_tokens(np.array([sequence], np.int32))
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


def test_onnxruntime_genai_re_prefilled_across_the_longrope_switch_is_the_float64_truth(
    tmp_path: Path, tiny_checkpoint  # noqa: ANN001
) -> None:
    """Served by onnxruntime-genai past original_max_position_embeddings (64), every token the build's exact loop
    picked, and so the float64 recompute's (the build judged each of those calls against it).
    """  # noqa: D205
    result = rx.build_decoder(tmp_path / "out", checkpoint=tiny_checkpoint("phi3-longrope"), eager=False)
    assert result.passed
    folder = result.path
    config = json.loads((folder / "genai_config.json").read_text())
    prompt, exact = _ours(folder, "re-prefill")
    _, kept = _ours(folder, "keep")
    assert exact != kept  # the switch matters for this model: the test can tell the two loops apart
    config["model"]["eos_token_id"] = next(t for t in range(config["model"]["vocab_size"]) if t not in kept + exact)
    (folder / "genai_config.json").write_text(json.dumps(config))
    assert _genai_re_prefilled(folder, prompt, STEPS + 1, 64) == exact
    decode = next(s for s in result.decoder_report.scenarios if s.name == "decode-64")
    assert decode.passed and {c.regime for c in decode.calls} == {"short", "long"}
