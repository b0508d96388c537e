"""The proof's truth (``audits.truth``, issue 41 item 6): ropeexport's float64 decoder where it builds the model
type, transformers' own model in float64, eager, no cache, with exact float64 angles per layer type otherwise.

What shows the transformers truth right: on families ropeexport builds (Llama with llama3 scaling; Gemma 3 with two
layer types, sliding at theta 1e4 and global at 1e6 linear x8) it agrees with the oracle on the same calls (placed
by position_ids at the start and the last position, and a sequence fed whole) to 1e-10 of the logit scale; with
its patches off (transformers' float32 angles, or its float32 downcasts) it does not. Then every verdict names its
truth, and on the 2026 families ropeexport does not build (``hybrids.FAMILIES``: Qwen3.5, Granite 4, LFM2,
Gemma 3n, exported by dynamo) the audit reads each layer's rotations, graft is proven against transformers' model,
and one layer's cos and sin exchanged are named on that layer by the audit and fail the proof.

On Qwen3.5 (a quarter of each head rotated, mrope_section [2, 1, 1] interleaved: with text positions, one axis
given three times, the one-axis rotation) a fault of use on layer 3 is named on it with its effect as the audit
measures it within 2x of the planted model against transformers' float64 model; and a weight of the export not the
checkpoint's is located against transformers' model, in its MLP or its gated delta rule layer's token mixer. Those
run the config at 64 positions: the dynamo export's chunked gated delta rule refuses calls of more than 64 tokens
(ScatterElements, 256 tokens refused, 64 run), and a model without a cache is run on whole sequences. Not covered:
position axes that differ (vision positions): the audit maps one-axis sites, the transformers truth refuses them.
"""  # noqa: D205

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import ropeexport as rx
from ropeexport.audits import hf_truth
from ropeexport.audits.prove import DecoderProof
from ropeexport.audits.truth import Call, OracleTruth, call_ids
from ropeexport.cli import main
from tests.audits.hybrids import FAMILIES, export, write_checkpoint
from tests.audits.test_prove import _decoder
from tests.audits.uses_planted import plant, save_as

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
@pytest.mark.usefixtures("graft_without_use")  # the proof is read, not graft's `use`
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


# --- Qwen3.5: a fault's effect and where a model departs, against transformers' float64 model -----------------------

SHORT = 64  # positions the Qwen3.5 export is run at (module doc: its gated delta rule's export refuses longer calls)
# (the fault planted on layer 3's rotations, the finding's name)
FAULTS = [("swap", "cos-sin-exchanged"), ("sign", "sin-negated")]


def _qwen3_5(family, folder: Path) -> tuple[Path, Path, Path]:  # noqa: ANN001
    """(the Qwen3.5 checkpoint, its export, its config at ``SHORT`` positions written into ``folder``)."""
    checkpoint, model = family("Qwen3.5")
    assert isinstance(model, Path), f"dynamo refused Qwen3.5: {model}"
    fields = json.loads((checkpoint / "config.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**fields, "max_position_embeddings": SHORT}))
    return checkpoint, model, folder / "config.json"


def against_transformers(model: Path, checkpoint: Path, prompts: int = 3) -> float:
    """The independent measurement: the worst 8-token window, over ``prompts`` random prompts of ``SHORT`` tokens fed
    whole, of max |logits - truth| over max |truth|, the truth transformers' model in float64 with exact angles.
    """  # noqa: D205
    import onnxruntime as ort
    import torch

    truth = hf_truth.TransformersTruth(checkpoint / "config.json", checkpoint, "fp32")
    model_hf = truth.load()
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2468)
    worst = 0.0
    for _ in range(prompts):
        ids = rng.integers(0, truth.spec.vocab_size, (1, SHORT))
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, SHORT), np.int64),
                 "position_ids": np.arange(SHORT).reshape(1, SHORT)}  # fmt: skip
        got = session.run(["logits"], feeds)[0][0].astype(np.float64)
        with torch.no_grad(), hf_truth.float64_throughout():
            want = model_hf(**{k: torch.from_numpy(v) for k, v in feeds.items()}, use_cache=False).logits[0].numpy()
        for start in range(0, SHORT - 7, 8):
            window = slice(start, start + 8)
            worst = max(worst, float(np.max(np.abs(got[window] - want[window])) / np.max(np.abs(want[window]))))
    return worst


@pytest.mark.slow  # the module's dynamo export of Qwen3.5, the audit's effect runs and transformers in float64
@pytest.mark.usefixtures("graft_without_use")
@pytest.mark.parametrize(("kind", "name"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_fault_on_qwen3_5_is_named_with_its_effect_against_transformers_float64(kind: str, name: str, family,
                                                                                  tmp_path: Path) -> None:  # noqa: ANN001
    """Before, the audit named the fault but could not weigh it: graft could not rewire a use reached through Qwen3.5's
    recomposition of its axes, which the other layer reads through too ("unmeasured"); its rotations are now rebuilt.
    """  # noqa: D205
    _, _, _, layer, width = FAMILIES["Qwen3.5"]
    checkpoint, model, config = _qwen3_5(family, tmp_path / "config")
    planted = plant(model, tmp_path / "planted" / "model.onnx", "computed", kind, layer, width)
    result = rx.audit(planted, config)
    found = [f for f in result.findings if f["name"] == name]
    assert len(found) == 1 and found[0]["layers"] == [layer], result.findings
    assert {f["name"] for f in result.findings} <= {name, "float32-angles"}, result.findings
    effect = found[0]["effect"]
    assert found[0]["severity"]["level"] == "wrong", (found[0]["severity"], effect)
    assert f"whole sequences of {SHORT} tokens" in effect["how"], effect["how"]
    independent = against_transformers(planted, checkpoint)
    assert independent / 2 <= effect["relative"] <= 2 * independent, (effect["relative"], independent, effect)
    # the measurement tells the fault from the export's own float32 noise: the clean model is far closer
    assert against_transformers(model, checkpoint, prompts=1) < 1e-3 * independent
    if kind != "swap":  # one graft: the swap's use is the one reached through the shared recomposition
        return
    # and graft repairs it: rebuilt rotations, the audit after exact, proven against transformers
    done = rx.graft(planted, config, tmp_path / "fixed" / "model.onnx", trust="config", checkpoint=checkpoint)
    assert done.after is not None and done.after.verdict == "exact", done.after.to_dict()["findings"]
    assert done.truth == "transformers" and done.proven, done.text


def _scaled(checkpoint: Path, weight: str) -> Callable[[onnx.ModelProto], None]:
    """The export with the initializer holding the checkpoint's ``weight`` (as stored, or transposed: dynamo names its
    constants ``val_N``) times 1.5.
    """  # noqa: D205
    from onnx import numpy_helper
    from safetensors.numpy import load_file

    stored = load_file(str(checkpoint / "model.safetensors"))[weight]

    def change(model: onnx.ModelProto) -> None:
        arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        (name,) = [n for n, a in arrays.items() if a.shape in (stored.shape, stored.T.shape)
                   and (np.array_equal(a, stored) or np.array_equal(a, stored.T))]  # fmt: skip
        (tensor,) = [t for t in model.graph.initializer if t.name == name]
        tensor.CopyFrom(numpy_helper.from_array(arrays[name] * np.float32(1.5), name))

    return change


# (the checkpoint's weight planted x 1.5, where the model's hidden states must first depart from transformers')
WEIGHTS = [("model.layers.3.mlp.down_proj.weight", "layer 3's MLP"),
           ("model.layers.0.linear_attn.out_proj.weight", "layer 0's token mixer")]  # fmt: skip


@pytest.mark.slow  # the module's dynamo export of Qwen3.5; the proof's calls against transformers in float64
@pytest.mark.parametrize(("weight", "stage"), WEIGHTS, ids=["mlp", "token-mixer"])
def test_where_a_qwen3_5_export_first_departs_from_transformers_is_the_planted_layer(weight: str, stage: str, family,
                                                                                     tmp_path: Path) -> None:  # noqa: ANN001
    checkpoint, model, config = _qwen3_5(family, tmp_path / "config")
    planted = save_as(model, tmp_path / "planted" / "model.onnx", _scaled(checkpoint, weight))
    proof = DecoderProof(config, checkpoint, planted)
    done = proof.run({"original": planted})
    assert done["truth"]["kind"] == "transformers" and not done["passed"]["original"], done["verdict"]
    where = proof.locate(planted, "the model")
    assert where is not None and where["truth"] == "transformers", where
    assert where["first_differs"] == stage and where["relative"] > 1e-3, where
    assert "agree with transformers' float64 model through" in where["text"], where["text"]
