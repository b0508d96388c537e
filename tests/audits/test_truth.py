"""The proof's truth (``audits.truth``, issue 41 item 6): ropeexport's float64 decoder where it builds the model
type, transformers' own model in float64, eager, no cache, with exact float64 angles per layer type otherwise.

What shows the transformers truth right: on families ropeexport builds (Llama with llama3 scaling; Gemma 3 with two
layer types, sliding at theta 1e4 and global at 1e6 linear x8) it agrees with the oracle on the same calls (placed
by position_ids at the start and the last position, and a sequence fed whole) to 1e-10 of the logit scale; with
its patches off (transformers' float32 angles, or its float32 downcasts) it does not. Then every verdict names its
truth, and on the 2026 families ropeexport does not build (``hybrids.FAMILIES``: Qwen3.5, Granite 4, LFM2,
Gemma 3n, exported by dynamo) the audit reads each layer's rotations, graft is proven against transformers' model,
and one layer's cos and sin exchanged are named on that layer by the audit and fail the proof.
"""  # noqa: D205

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.audits import hf_truth
from ropeexport.audits.prove import DecoderProof
from ropeexport.audits.truth import Call, OracleTruth, call_ids
from ropeexport.cli import main
from tests.audits.hybrids import FAMILIES, export, write_checkpoint
from tests.audits.test_prove import _decoder
from tests.audits.uses_planted import plant

AGREE = 1e-10  # of the logit scale: the two float64 truths on the same calls


def _calls(vocab: int, top: int) -> list[Call]:
    """The start and the last position placed by position_ids, and 64 tokens fed whole."""
    places = [(0, 0, "positions"), (1, top - 8, "positions"), (2, 56, "whole")]
    return [Call(i, p, how, call_ids(vocab, i, p, how)) for i, p, how in places]


def _as_the_oracle(truth: hf_truth.TransformersTruth) -> None:
    """Gemma's embedding scale sqrt(hidden) as the oracle takes it, a float32 constant (``decoder.export.embed_scale``:
    the exported graph's, and transformers' own in a float32 model); transformers' float64 model holds it exact, 1.7e-8
    of the logits apart. Everything else is compared as each truth computes it.
    """  # noqa: D205
    import torch

    load = truth.load

    def rounded() -> object:
        model = load()
        scale = getattr(getattr(model.model, "embed_tokens", None), "embed_scale", None)
        if scale is not None:
            with torch.no_grad():
                scale.copy_(scale.to(torch.float32).to(torch.float64))
        return model

    truth.load = rounded  # type: ignore[method-assign]


# (checkpoint, what is switched off in the transformers truth, whether they then agree to AGREE)
AGREEMENT = [("llama-llama3", None, True), ("gemma3", None, True),
             ("llama-llama3", "angles", False), ("gemma3", "downcasts", False)]  # fmt: skip


@pytest.mark.parametrize(("name", "off", "agree"), AGREEMENT, ids=[f"{n}-{o or 'patched'}" for n, o, _ in AGREEMENT])
def test_the_transformers_truth_agrees_with_the_oracle_where_both_exist(name: str, off: str | None, agree: bool,
                                                                        tiny_checkpoint, monkeypatch) -> None:  # noqa: ANN001
    folder = tiny_checkpoint(name)
    if off == "angles":  # transformers' own float32 angles kept
        monkeypatch.setattr(hf_truth, "patch_rotary", lambda module, specs, where: where)
    elif off == "downcasts":  # RMSNorm's and softmax's float32 kept
        monkeypatch.setattr(hf_truth, "float64_throughout", contextlib.nullcontext)
    oracle = OracleTruth(folder / "config.json", folder, None, "fp32")
    truth = hf_truth.TransformersTruth(folder / "config.json", folder, "fp32")
    _as_the_oracle(truth)
    calls = _calls(truth.spec.vocab_size, truth.spec.position_spec().max_positions)
    errors = [float(np.abs(a - b).max() / np.abs(a).max())
              for a, b in zip(oracle.logits(calls), truth.logits(calls), strict=True)]  # fmt: skip
    if agree:
        assert max(errors) <= AGREE, errors
    else:  # the test can fail: without the patch the truth is float32's, 1e-8 and more off
        assert max(errors) > 100 * AGREE, errors


@pytest.fixture
def phi3(tiny_checkpoint) -> Path:  # noqa: ANN001
    """A tiny Phi-3 checkpoint: LongRoPE, max 256 positions, original 64 (``test_prove``)."""
    return tiny_checkpoint("phi3-longrope")


# (--truth, the kind used, the words a user reads, how the calls are placed)
TRUTHS = [("auto", "oracle", "float64 recompute by ropeexport's decoder", ["cache"]),
          ("oracle", "oracle", "float64 recompute by ropeexport's decoder", ["cache"]),
          ("transformers", "transformers",
           "transformers' Phi3ForCausalLM in float64, eager, exact float64 angles per layer type", ["positions"])]


@pytest.mark.parametrize(("asked", "kind", "words", "placed"), TRUTHS, ids=[t[0] for t in TRUTHS])
def test_a_verdict_names_its_truth(asked: str, kind: str, words: str, placed: list[str], phi3: Path, tmp_path: Path,
                                   capsys) -> None:  # noqa: ANN001
    """ropeexport's own decoder of a LongRoPE checkpoint, its schedule planted wrong, grafted and proven against each
    truth: the JSON names the truth (``decoder.truth.kind``, each verdict's ``truth``), the text says it in words.
    """  # noqa: D205
    model = _decoder(tmp_path / "planted", phi3, "fused", unscaled=True)
    out = tmp_path / "fixed" / "model.onnx"
    argv = ["graft", str(model), "--hf-config", str(phi3 / "config.json"), "--out", str(out), "--trust", "config",
            "--checkpoint", str(phi3), "--truth", asked]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["truth"] == kind and result["decoder"]["truth"]["kind"] == kind
    assert result["decoder"]["truth"]["words"] == words and result["decoder"]["truth"]["placed"] == placed
    assert {v["truth"] for v in result["decoder"]["verdict"].values()} == {kind}
    assert result["decoder"]["reference"].startswith(words)
    assert result["decoder"]["passed"] == {"original": False, "grafted": True}, result["decoder"]["verdict"]
    assert main([*argv[:5], str(tmp_path / "again.onnx"), *argv[6:]]) == 0
    text = capsys.readouterr().out
    assert f"  whole decoder against {words} (1.00e-04 of the logit scale; {placed[0]}: " in text, text


def test_an_unknown_truth_is_one_line_and_exit_2(phi3: Path, tmp_path: Path) -> None:
    from ropeexport.errors import SpecError

    model = _decoder(tmp_path, phi3, "fused", unscaled=False)
    with pytest.raises(SpecError, match="truth: must be one of auto, oracle, transformers, got 'numpy'"):
        DecoderProof(phi3 / "config.json", phi3, model, truth="numpy")


# --- the 2026 families ropeexport does not build, exported by dynamo ------------------------------------------------


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], tuple[Path, Path | str]]:
    """``family(name)``: (its checkpoint, its dynamo export or the exporter's reason), made once per module."""
    root = tmp_path_factory.mktemp("families")
    made: dict[str, tuple[Path, Path | str]] = {}

    def get(name: str) -> tuple[Path, Path | str]:
        if name not in made:
            folder = root / f"f{list(FAMILIES).index(name)}"
            checkpoint = write_checkpoint(name, folder / "checkpoint")
            made[name] = (checkpoint, export(checkpoint, folder / "clean"))
        return made[name]

    return get


@pytest.mark.slow  # a dynamo export each (10-60 s), audited, grafted and proven against transformers' model
@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_ropeexport_does_not_build_is_audited_per_layer_grafted_and_proven(name: str, family,
                                                                                   tmp_path: Path) -> None:  # noqa: ANN001
    _, _, rotated, layer, width = FAMILIES[name]
    checkpoint, model = family(name)
    assert isinstance(model, Path), f"dynamo refused {name}: {model}"
    config = checkpoint / "config.json"
    audited = rx.audit(model, config, effects=False)  # the effects as users run them: test_uses measures those
    read = sorted({int(k) for s in audited.sites for k in s["roles"]})
    assert read == list(rotated), audited.sites  # each rotated layer's q and k rotations read, no other layer's
    assert all(sorted(r) == ["k", "q"] for s in audited.sites for r in s["roles"].values()), audited.sites
    assert {f["name"] for f in audited.findings} <= {"float32-angles"}, audited.findings
    out = tmp_path / "grafted.onnx"
    done = rx.graft(model, config, out, checkpoint=checkpoint)
    assert done.after is not None and done.after.verdict == "exact", done.after.to_dict()["findings"]
    assert done.truth == "transformers" and done.proven, done.decoder
    assert all(m["grafted"]["placed"] == "positions" and m["grafted"]["rel"] <= 1e-5
               for m in (c["models"] for c in done.decoder["calls"])), done.decoder["calls"]  # fmt: skip
    # one layer's cos and sin exchanged where its rotations use them: named on that layer, and the proof fails
    planted = plant(model, tmp_path / "planted" / "model.onnx", "computed", "swap", layer, width)
    found = [f for f in rx.audit(planted, config, effects=False).findings if f["name"] == "cos-sin-exchanged"]
    assert len(found) == 1 and found[0]["layers"] == [layer], found
    proof = DecoderProof(config, checkpoint, planted).run({"planted": planted})
    assert proof["truth"]["kind"] == "transformers" and proof["verdict"]["planted"]["verdict"] == "not proven"
