"""Serving a built decoder (``ropeexport.decoder.serve``, ``rx.generate``, ``ropeexport generate``).

The served tokens must be the float64 truth's: each next token the argmax of a float64 no-cache recompute of the
whole sequence at its exact positions (RoPE at L = that call's length, so across a LongRoPE or dynamic-NTK switch the
truth re-rotates every key), and the verified loop's (``decoder.greedy``, the one the build judged call by call).
Bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.cli import main
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.greedy import run_scenario as verified_loop
from ropeexport.decoder.oracle import decoder_float64, stored_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.scenarios import Scenario, threshold
from ropeexport.decoder.serve import DecoderSession
from ropeexport.errors import SpecError
from ropeexport.runtimes.ort import OrtRunner
from tests.decoder.tiny import checkpoint

pytestmark = pytest.mark.slow  # eight decoders built for the served-token and bad-input tables

tokenizers = pytest.importorskip("tokenizers", reason="tokenizers (brought by transformers) reads --prompt text")

# name -> (tiny checkpoint, graph form, prompt length, position offset, new tokens): offsets put the generation across
# original_max_position_embeddings where the schedule has one (64 in tests.decoder.tiny), and near the end of
# max_positions elsewhere.
CASES = {
    "llama-fused": ("llama", "fused", 7, 0, 24),
    "llama-gqa-far": ("llama", "gqa", 5, 2030, 12),  # max_positions 2048: the last token at 2046
    "longrope-across": ("phi3-longrope", "fused", 6, 52, 14),  # positions 52..71: short, then long at L = 65
    "longrope-gqa-across": ("phi3-longrope", "gqa", 6, 52, 14),
    "dynamic-across": ("llama-dynamic", "fused", 6, 55, 14),  # base, then a new base per length past 64
    "yarn-across": ("qwen2-yarn", "decomposed", 6, 56, 12),
    "window": ("mistral-window", "fused", 9, 0, 12),  # sliding window 6
    "neox-partial": ("gpt_neox", "fused", 5, 100, 10),
    "alibi": ("bloom", "fused", 8, 0, 12),
    "cohere2-to-the-end": ("cohere2", "gqa", 7, 237, 12),  # windows of 6, a layer without RoPE; reaches 255 of 256
    "glm4-partial-interleaved": ("glm4", "fused", 6, 238, 12),  # half of each head rotated in pairs; reaches 255
    "exaone4-to-the-end": ("exaone4", "gqa", 7, 237, 12),  # local layers with RoPE, a global one without; 255
    "olmo3-two-encodings": ("olmo3", "gqa", 7, 237, 12),  # unscaled sliding layers, a YaRN full one; reaches 255
    "qwen3-moe-to-the-end": ("qwen3_moe", "gqa", 7, 237, 12),  # dense and sparse layers, ORT's MoE; reaches 255
    # the query scale's step at 128 crossed while decoding (and YaRN's switch at 64 behind it)
    "ministral3-query-step": ("ministral3", "gqa", 7, 117, 16),
    # two cache geometries (head_dim 8 sliding, 16 full, one key/value head there), windows of 6, the mixture beside
    # every MLP (26B-A4B's shape); reaches 255
    "gemma4-moe-to-the-end": ("gemma4-moe", "gqa", 7, 237, 12),
    # shared key/value layers: the served cache holds layers 0 and 1 only, layers 2 and 3 read theirs in place
    "gemma4-shared-to-the-end": ("gemma4-shared", "gqa", 7, 237, 12),
    # latent attention (keys 16 wide, values 8: cached padded to 16 in the gqa form), YaRN's far end; reaches 255
    "deepseek-v3-to-the-end": ("deepseek_v3", "gqa", 7, 237, 12),
    # Llama 4: chunks of 8 and the NoPE layer's temperature steps (every 4 positions) crossed from position 0
    "llama4-chunks-and-steps": ("llama4", "gqa", 7, 0, 20),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Any) -> dict[tuple[str, str], tuple[Path, Path]]:
    """(checkpoint, graph) -> (checkpoint folder, built decoder folder), built once for the module."""
    root = tmp_path_factory.mktemp("serve")
    out: dict[tuple[str, str], tuple[Path, Path]] = {}
    for name, graph, *_ in CASES.values():
        if (name, graph) not in out:
            ckpt = tiny_checkpoint(name)
            result = rx.build_decoder(root / "out", checkpoint=ckpt, graph=graph, eager=False)
            assert result.passed
            out[name, graph] = (ckpt, result.path)
    return out


def _truth(folder: Path, ckpt: Path, prompt: list[int], offset: int, count: int) -> list[int]:
    """Greedy tokens of the float64 no-cache recompute: every step recomputes the whole sequence."""
    session = DecoderSession(folder)
    spec = session.spec
    pieces = position_pieces(spec)  # each layer its own encoding's (OLMo 3's two), None where it has none
    weights64 = stored_float64(spec, load_checkpoint(spec, ckpt))
    sequence, new = list(prompt), []
    for _ in range(count):
        ids = np.array([sequence])
        pos = np.arange(offset, offset + len(sequence))[None]
        logits = decoder_float64(spec, weights64, ids, pos, np.ones_like(ids), pieces=pieces)
        new.append(int(logits[0, -1].argmax()))
        sequence.append(new[-1])
    return new


def _prompt(vocab: int, n: int) -> list[int]:
    return np.random.default_rng(7).integers(0, vocab, n).tolist()


@pytest.mark.parametrize("case", list(CASES))
def test_served_tokens_are_the_float64_truth(case: str, built: dict) -> None:
    name, graph, n, offset, count = CASES[case]
    ckpt, folder = built[name, graph]
    session = DecoderSession(folder, threads=1)
    prompt = _prompt(session.spec.vocab_size, n)
    served = session.generate(prompt, count, offset)
    assert served.prompt == prompt and len(served.tokens) == count
    assert served.tokens == _truth(folder, ckpt, prompt, offset, count)
    assert [s.token for s in served.steps] == served.tokens
    assert served.steps[0].kind == "prefill" and served.steps[0].tokens == n
    assert [s.last for s in served.steps] == list(range(offset + n - 1, offset + n - 1 + count))


@pytest.mark.parametrize("policy", ["re-prefill", "keep"])
@pytest.mark.parametrize("case", ["longrope-across", "dynamic-across", "llama-fused"])
def test_served_tokens_are_the_verified_loops(case: str, policy: str, built: dict) -> None:
    """Same prompt, same policy: the served loop (IO binding, preallocated cache) and the loop the build judged."""
    name, graph, n, offset, count = CASES[case]
    _, folder = built[name, graph]
    session = DecoderSession(folder)
    runner = OrtRunner(folder / "model.onnx", providers=["CPUExecutionProvider"])
    calls = verified_loop(runner.infer, session.spec, Scenario("serve", (n,), count - 1, start=offset, policy=policy))
    prompt = calls[0].input_ids[0].tolist()
    served = session.generate(prompt, count, offset, policy)
    assert served.tokens == [int(c.logits[0, -1].argmax()) for c in calls]
    assert [s.kind for s in served.steps] == [c.kind for c in calls]
    assert [s.regime for s in served.steps] == [c.regime for c in calls]


def test_a_longrope_switch_is_one_re_prefill_and_keep_never_recomputes(built: dict) -> None:
    _, folder = built["phi3-longrope", "fused"]
    session = DecoderSession(folder)
    limit = threshold(session.position)
    prompt = _prompt(session.spec.vocab_size, 6)
    exact = session.generate(prompt, 14, 52)
    regimes = [s.regime for s in exact.steps]
    switch = regimes.index("long")
    assert set(regimes[:switch]) == {"short"} and set(regimes[switch:]) == {"long"}
    assert exact.steps[switch].last + 1 == limit + 1  # L = original_max + 1: the first long call
    assert [s.kind for s in exact.steps].count("re-prefill") == 1
    assert exact.steps[switch].kind == "re-prefill" and exact.steps[switch].first == 52
    assert exact.steps[switch].tokens == exact.steps[switch].last - 52 + 1  # the whole sequence again
    kept = session.generate(prompt, 14, 52, policy="keep")
    assert {s.kind for s in kept.steps[1:]} == {"decode"}


def test_one_session_serves_many_generations(built: dict) -> None:
    """The cache buffers are reused and grown: no state leaks from one generation into the next."""
    _, folder = built["llama", "fused"]
    session = rx.open_decoder(folder, threads=1)
    prompt = _prompt(session.spec.vocab_size, 5)
    first = session.generate(prompt, 6)
    longer = session.generate(prompt[:3], 20)  # a larger cache than the first call's
    again = session.generate(prompt, 6)
    assert again.tokens == first.tokens
    assert longer.tokens == DecoderSession(folder).generate(prompt[:3], 20).tokens


@pytest.mark.parametrize("graph", ["fused", "gqa"])
def test_append_in_pieces_grows_the_cache_and_equals_one_call(graph: str, built: dict) -> None:
    """The low-level loop: appends of 3 + 3 + 4 tokens into a cache reserved for 4 (it grows twice, keeping what it
    holds) give the logits of one 10-token call; shared (gqa) and two-set (fused) buffers alike.
    """  # noqa: D205
    _, folder = built["llama", graph]
    session = DecoderSession(folder)
    assert session.shared == (graph == "gqa")
    prompt = _prompt(session.spec.vocab_size, 10)
    session.reserve(4)
    session.reset(40)
    pieces = [session.append(prompt[a:b]).copy() for a, b in ((0, 3), (3, 6), (6, 10))]
    assert session.length == 10 and session._capacity >= 10
    session.reset(40)
    whole = session.append(prompt).copy()
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=0, atol=2e-5 * np.abs(whole).max())
    session.reset(2040)
    with pytest.raises(SpecError, match=r"^ids: 9 token\(s\) at position 2040 pass the decoder's last position 2047"):
        session.append(prompt[:9])
    with pytest.raises(SpecError, match=r"^ids: id 96 is outside the vocabulary \[0, 96\)"):
        session.append([1, 96])
    assert session.length == 0  # a refused call runs nothing


def test_api_and_cli_agree(built: dict, capsys: pytest.CaptureFixture[str]) -> None:
    _, folder = built["phi3-longrope", "fused"]
    api = rx.generate(folder, prompt_ids=[3, 1, 4, 1, 5], max_new_tokens=16, position_offset=55, threads=1)
    assert main(["generate", str(folder), "--prompt-ids", "3,1,4,1,5", "--max-new-tokens", "16",
                 "--position-offset", "55", "--threads", "1", "--json"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out)
    assert printed["tokens"] == api.tokens and printed["prompt"] == [3, 1, 4, 1, 5]
    assert printed["regimes"] == ["long", "short"]
    assert [s["regime"] for s in printed["steps"]] == [s.regime for s in api.steps]
    assert printed["decode_ms_per_token"] > 0 and printed["prefill_tokens_per_second"] > 0
    assert main(["generate", str(folder), "--prompt-ids", "3,1,4,1,5", "--max-new-tokens", "16",
                 "--position-offset", "55", "--steps"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert f"tokens: {' '.join(map(str, api.tokens))}" in text
    assert "re-prefill at position 64" in text and "  short: positions 55..63" in text
    assert len([line for line in text.splitlines() if " decode " in line]) == 14  # --steps: one line per call


def _tokenized(tmp: Path) -> Path:
    """A llama checkpoint with a word-level tokenizer.json (w0 .. w95 -> ids 0..95), built."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    ckpt = checkpoint(tmp / "ckpt", "llama")
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(96)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(ckpt / "tokenizer.json"))
    return rx.build_decoder(tmp / "out", checkpoint=ckpt, eager=False).path


def test_a_text_prompt_is_read_by_the_folders_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _tokenized(tmp_path)
    result = rx.generate(folder, prompt="w5 w17 w42", max_new_tokens=6)
    assert result.prompt == [5, 17, 42]
    assert result.text == " ".join(f"w{t}" for t in result.tokens)
    assert result.tokens == rx.generate(folder, prompt_ids=[5, 17, 42], max_new_tokens=6).tokens
    assert main(["generate", str(folder), "--prompt", "w5 w17 w42", "--max-new-tokens", "6"]) == 0
    assert f"text: {result.text!r}" in capsys.readouterr().out


def test_stop_at_eos(built: dict) -> None:
    _, folder = built["llama", "fused"]
    session = DecoderSession(folder)
    prompt = _prompt(session.spec.vocab_size, 5)
    full = session.generate(prompt, 12)
    session.config = {**session.config, "eos_token_id": full.tokens[3]}
    stopped = session.generate(prompt, 12, stop_at_eos=True)
    assert stopped.tokens == full.tokens[: full.tokens.index(full.tokens[3]) + 1] and stopped.stopped_at_eos


def _copy(built: dict, tmp: Path, name: str = "llama", graph: str = "fused") -> Path:
    return Path(shutil.copytree(built[name, graph][1], tmp / "copy"))


def _edited(built: dict, tmp: Path) -> Path:
    folder = _copy(built, tmp)
    data = folder / "model.onnx"
    data.write_bytes(data.read_bytes() + b"\0")
    return folder


def _genai_list(built: dict, tmp: Path) -> Path:
    """genai_config.json a JSON list, its hash rewritten: the manifest no longer catches it."""
    from ropeexport.graph.onnx_io import sha256

    folder = _copy(built, tmp)
    (folder / "genai_config.json").write_text("[1, 2]")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = {name: sha256(folder / name) for name in manifest["files"]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _rope_artifact(built: dict, tmp: Path) -> Path:
    return rx.build(rx.spec("rope", head_dim=16, num_heads=2, max_positions=64), tmp / "tree").path


# (name, folder maker, extra argv, the flag the one-line error names, a phrase of it)
BAD = [
    ("not-a-folder", lambda b, t: t / "missing", [], "DIR", "is not a decoder folder"),
    ("rope-artifact", _rope_artifact, [], "DIR", "is not a decoder folder"),
    ("edited-model", _edited, [], "files.model.onnx", "sha256 differs"),
    ("id-past-vocab", _copy, ["--prompt-ids", "1,96"], "--prompt-ids", "outside the vocabulary [0, 96)"),
    ("negative-id", _copy, ["--prompt-ids", "-1"], "--prompt-ids", "outside the vocabulary"),
    ("not-ids", _copy, ["--prompt-ids", "1,x"], "--prompt-ids", "comma-separated integers"),
    ("past-max", _copy, ["--prompt-ids", "1,2", "--position-offset", "2040", "--max-new-tokens", "7"],
     "--max-new-tokens", "reach position 2048"),
    # no --position-offset given: the context is at fault (issue 43, item 9: it blamed --position-offset)
    ("prompt-past-context", _copy, ["--prompt-ids", ",".join(["1"] * 3000)], "--prompt-ids",
     "is 3000 tokens: longer than the decoder's context (max_positions 2048)"),
    ("prompt-filling-context", _copy, ["--prompt-ids", ",".join(["1"] * 2048)], "--prompt-ids",
     "holds a prompt of at most 2047 tokens and one new token"),
    # issue 43, item 8: it read "is None but this decoder's is None"
    ("genai-config-a-list", _genai_list, [], "genai_config.json", "must be a JSON object (onnxruntime-genai's config), "
     "got a list"),
    ("offset-past-max", _copy, ["--prompt-ids", "1,2", "--position-offset", "2047"], "--position-offset",
     "past the decoder's last position 2047"),
    ("negative-offset", _copy, ["--prompt-ids", "1", "--position-offset", "-1"], "--position-offset", ">= 0"),
    ("no-new-tokens", _copy, ["--prompt-ids", "1", "--max-new-tokens", "0"], "--max-new-tokens", ">= 1"),
    ("zero-threads", _copy, ["--prompt-ids", "1", "--threads", "0"], "--threads", "[1, 1024]"),
    ("text-without-tokenizer", _copy, ["--prompt", "hello"], "--prompt", "no tokenizer.json"),
    ("alibi-offset", lambda b, t: _copy(b, t, "bloom"), ["--prompt-ids", "1", "--position-offset", "4"],
     "--position-offset", "must be 0 for a alibi decoder"),
    # $'\xff' on a command line: Python hands over a lone surrogate (PEP 383), which no tokenizer takes
    ("prompt-not-utf8", _copy, ["--prompt", "\udcff"], "--prompt", "is not UTF-8 text: byte 0xff at character 0"),
    ("prompt-not-utf8-inside", _copy, ["--prompt", "w1 \udce9 w2"], "--prompt", "byte 0xe9 at character 3"),
    # int() reads Arabic-Indic, full-width and other Unicode digits, and 1_000: only ASCII digits are ids
    ("arabic-indic-ids", _copy, ["--prompt-ids", "\u0661,\u0662"], "--prompt-ids", "ASCII digits (0-9), got '\u0661,"),
    ("full-width-ids", _copy, ["--prompt-ids", "\uff11"], "--prompt-ids", "ASCII digits"),
    ("underscored-id", _copy, ["--prompt-ids", "1_0"], "--prompt-ids", "ASCII digits"),
    ("arabic-indic-count", _copy, ["--prompt-ids", "1", "--max-new-tokens", "\u0662"], "argument --max-new-tokens",
     "must be an integer in ASCII digits"),
    ("arabic-indic-offset", _copy, ["--prompt-ids", "1", "--position-offset", "\u0662"],
     "argument --position-offset", "ASCII digits"),
    # onnxruntime-genai's loop places a prompt at 0 and keeps its cache: what it cannot do is said before it runs
    ("genai-offset", _copy, ["--prompt-ids", "1", "--engine", "onnxruntime-genai", "--position-offset", "3"],
     "--position-offset", "must be 0 with onnxruntime-genai"),
    ("genai-re-prefill", _copy, ["--prompt-ids", "1", "--engine", "onnxruntime-genai", "--policy", "re-prefill"],
     "--policy", "onnxruntime-genai keeps its cache"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "argv", "flag", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(
    case: str,
    make: Callable[[dict, Path], Path],
    argv: list[str],
    flag: str,
    phrase: str,
    built: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = make(built, tmp_path)
    before = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    argv = argv or ["--prompt-ids", "1,2,3"]
    try:
        code = main(["generate", str(folder), *argv])
    except SystemExit as usage:  # argparse's own one-line usage error (a flag's type)
        code = usage.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert err.startswith(f"ropeexport: error: {flag}") and phrase in err, err
    after = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
    assert after == before  # nothing written


def test_the_api_names_the_field(built: dict) -> None:
    _, folder = built["llama", "fused"]
    with pytest.raises(SpecError, match=r"^prompt_ids: give the prompt as token ids"):
        rx.generate(folder)
    with pytest.raises(SpecError, match=r"^prompt_ids: give the prompt"):
        rx.generate(folder, prompt_ids=[1], prompt="w1")
    with pytest.raises(SpecError, match=r"^policy: must be one of re-prefill, keep"):
        rx.generate(folder, prompt_ids=[1], policy="wrap")
    with pytest.raises(SpecError, match=r"^engine: must be one of ort, onnxruntime-genai, got 'trt'"):
        rx.generate(folder, prompt_ids=[1], engine="trt")
    with pytest.raises(SpecError, match=r"^prompt_ids: the prompt is empty"):
        rx.generate(folder, prompt_ids=[])
    with pytest.raises(SpecError, match=r"^path: is empty"):
        rx.generate("", prompt_ids=[1])
