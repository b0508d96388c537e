"""The bytes of the models ropeexport exports (every kind, the feature specs, the default build, decoders), pinned:
a refactor must not change one of them.

``hashes.json`` holds the sha256 of model.onnx (and model.onnx.data where there is one) as the code wrote them before
the one-artifact-system redesign: the embedded default build's nine artifacts, every encoding x artifact x dtype x
graph form on small specs, the feature specs, and decoders of every tiny architecture (seeded weights, fp32 and
fp16, each graph form; and from a tiny random checkpoint, fp32, each graph form), and some with int4 weights
(``INT4``, pinned when int4 came, after the redesign: ONNX Runtime's packing included). Each is exported again here and
written as the build writes it (``save_model``). A checkpoint decoder embeds the checkpoint's folder in its
``ropeexport.weights`` metadata; that one value is set to ``PINNED`` before hashing (the folder differs per run),
every other byte counts. Not pinned: a checkpoint layer's block (the block's graph with the layer's weights and the
checkpoint in its metadata) and grafted models (another tool's model, edited).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

import ropeexport as rx
from ropeexport.catalog import encodings, recipes, spec_from_dict
from ropeexport.defaults import FEATURE_SPECS
from ropeexport.graph.onnx_io import save_model

PINNED = json.loads((Path(__file__).parent / "hashes.json").read_text())
SMALL = {"max_positions": 96, "num_heads": 3, "head_dim": 8, "d_model": 16, "clip": 5, "num_buckets": 8,
         "max_distance": 32}  # fmt: skip
FORMS = ("fused", "decomposed", "tensorrt", "gqa")
# Decoders with int4 weights (dtype, graph, their key's label, the weight-format fields): the default int4 and one of
# every other setting (block size, zero points, accuracy level, fp16 scales).
INT4 = [("fp32", "fused", "int4-b32", {"weight_format": "int4"}),
        ("fp16", "gqa", "int4-b128-a4-asym", {"weight_format": "int4", "block_size": 128, "accuracy_level": 4,
                                              "symmetric": False})]  # fmt: skip

# The tiny decoders whose tensorrt form is refused: gemma2 (TensorRT cannot cap attention logits), the Qwen-VL ones
# (M-RoPE: no TensorRT run of it verified), deepseek_v3, deepseek_v32, glm4_moe_lite, glm_moe_dsa, mistral4 and
# deepseek_v2 (latent attention's keys and values differ in width).
NO_TENSORRT = ("gemma2", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "deepseek_v3", "deepseek_v32", "glm4_moe_lite",
               "glm_moe_dsa", "mistral4", "deepseek_v2")  # fmt: skip
# The tiny decoders whose gqa form is refused: deepseek_v32 and glm_moe_dsa (GroupQueryAttention takes no mask for the
# indexer's selection to narrow)
NO_GQA = ("deepseek_v32", "glm_moe_dsa")


def _written(model: object, folder: Path) -> str:
    """sha256 over the files ``save_model`` writes for ``model`` (model.onnx, then its data file if any)."""
    digest = hashlib.sha256()
    for name in save_model(model, folder):  # type: ignore[arg-type]
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def _small(encoding: str, **fields: object) -> object:
    cls = encodings()[encoding]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in SMALL.items() if k in names}, **fields)


def _pin_new(section: str, got: dict[str, str]) -> None:
    """With ROPEEXPORT_PIN_NEW=1 (adding an encoding): every pinned hash of ``section`` checked unchanged, then the new
    keys written into hashes.json (the run itself still fails: it compared against the file as it was).
    """  # noqa: D205
    if os.environ.get("ROPEEXPORT_PIN_NEW"):
        assert {k: got[k] for k in PINNED[section]} == PINNED[section]
        on_disk = json.loads((Path(__file__).parent / "hashes.json").read_text())
        on_disk[section] = PINNED[section] | got  # the pinned keys in their order, the new ones after
        (Path(__file__).parent / "hashes.json").write_text(json.dumps(on_disk, indent=1) + "\n")


def test_the_default_build_writes_the_pinned_models(tmp_path: Path) -> None:
    from ropeexport.defaults import DEFAULT_PRESETS

    got = {s.name: _written(rx.export(s), tmp_path / s.name) for p in DEFAULT_PRESETS for s in rx.from_preset(p)}
    _pin_new("default", got)
    assert got == PINNED["default"]


def test_every_kind_writes_its_pinned_model(tmp_path: Path) -> None:
    got = {}
    for encoding, artifact in sorted(recipes()):
        forms = ["fused", "decomposed"] + (["tensorrt", "static-cache", "gqa"] if artifact == "block" else [])
        forms += ["plugin"] if "plugin" in encodings()[encoding].graphs and artifact == "rope" else []
        for dtype in ("fp32", "fp16"):
            for graph in forms:
                spec = _small(encoding, artifact=artifact, dtype=dtype, graph=graph)
                got[f"{encoding}/{artifact}/{dtype}/{graph}"] = _written(rx.export(spec), tmp_path / spec.name)
    _pin_new("kinds", got)
    assert got == PINNED["kinds"]


def test_the_feature_specs_write_their_pinned_models(tmp_path: Path) -> None:
    got = {}
    for fields in FEATURE_SPECS:
        base = spec_from_dict(dict(fields))
        for graph in ("fused", "decomposed"):
            try:
                spec = base.replace(graph=graph, name=f"{base.name}-{graph}")
            except rx.errors.SpecError:  # a form the encoding does not have
                continue
            got[spec.name] = _written(rx.export(spec), tmp_path / spec.name)
    _pin_new("features", got)
    assert got == PINNED["features"]


@pytest.fixture(scope="module")
def tiny_checkpoints(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Any) -> dict[str, tuple[Path, Path]]:
    """{name: (its config.json, a random checkpoint)} for every tiny architecture of tests/decoder/tiny.py (CONFIGS and
    VL_CONFIGS)."""
    from tests.decoder.tiny import CONFIGS, VL_CONFIGS, hf_config

    root = tmp_path_factory.mktemp("pinned")
    out = {}
    for name in {**CONFIGS, **VL_CONFIGS}:  # the Qwen-VL ones: whole checkpoints (tiny.WRAPPED)
        hf_config(name).save_pretrained(root / "cfg" / name)
        out[name] = (root / "cfg" / name / "config.json", tiny_checkpoint(name))
    out["mistral_large4"] = (Path(), tiny_checkpoint("mistral_large4"))  # its wrapper's checkpoint (tiny.LATENT_TEXT)
    return out


def _latent_text_decoders(ckpt: Path, tmp_path: Path) -> dict[str, str]:
    """Mistral Large 4's (its layers share latent caches: the latent cache's decomposed form only), from its
    checkpoint in fp32 (LeRoPE's alpha read from it) and seeded in fp16.
    """  # noqa: D205
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.decoder.weights import describe, seeded_weights

    spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="decomposed", latent_cache=True))
    model = build_decoder_graph(spec, load_checkpoint(spec, ckpt), describe(ckpt))
    for prop in model.metadata_props:
        if prop.key == "ropeexport.weights":
            prop.value = "PINNED"
    got = {"checkpoint/mistral_large4/fp32-latent/decomposed": hashlib.sha256(model.SerializeToString()).hexdigest()}
    spec, _ = resolve(DecoderRequest(hf_config=ckpt / "config.json", dtype="fp16", graph="decomposed",
                                     latent_cache=True))  # fmt: skip
    model = build_decoder_graph(spec, seeded_weights(spec), describe(None))
    got["seeded/mistral_large4/fp16-latent/decomposed"] = _written(model, tmp_path / "seeded" / "mistral_large4")
    return got


def test_every_decoder_writes_its_pinned_model(tiny_checkpoints: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.checkpoint import load_checkpoint
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.decoder.weights import describe, seeded_weights

    got = {}
    for name, (config, ckpt) in tiny_checkpoints.items():
        if name == "mistral_large4":  # the latent cache only (``_latent_text_decoders``)
            continue
        for dtype in ("fp32", "fp16"):
            for graph in FORMS:
                if (name in NO_TENSORRT and graph == "tensorrt") or (name in NO_GQA and graph == "gqa"):  # refused
                    continue
                spec, _ = resolve(DecoderRequest(hf_config=config, dtype=dtype, graph=graph))
                model = build_decoder_graph(spec, seeded_weights(spec), describe(None))
                got[f"seeded/{name}/{dtype}/{graph}"] = _written(model, tmp_path / "seeded" / name / dtype / graph)
        for dtype, graph, label, weights in INT4:  # int4 weights: ONNX Runtime's packing, pinned with the rest (a
            # mixture's experts too: one MatMulNBits per expert, or QMoE where it holds them)
            if name in NO_GQA and graph == "gqa":
                continue
            spec, _ = resolve(DecoderRequest(hf_config=config, dtype=dtype, graph=graph, **weights))
            model = build_decoder_graph(spec, seeded_weights(spec), describe(None))
            got[f"seeded/{name}/{dtype}-{label}/{graph}"] = _written(model, tmp_path / "int4" / name / label / graph)
        for graph in FORMS:
            if (name in NO_TENSORRT and graph == "tensorrt") or (name in NO_GQA and graph == "gqa"):
                continue
            spec, _ = resolve(DecoderRequest(checkpoint=ckpt, dtype="fp32", graph=graph))
            model = build_decoder_graph(spec, load_checkpoint(spec, ckpt), describe(ckpt))
            for prop in model.metadata_props:
                if prop.key == "ropeexport.weights":
                    prop.value = "PINNED"
            got[f"checkpoint/{name}/fp32/{graph}"] = hashlib.sha256(model.SerializeToString()).hexdigest()
        spec, _ = resolve(DecoderRequest(checkpoint=ckpt, graph="decomposed", **INT4[0][3]))
        model = build_decoder_graph(spec, load_checkpoint(spec, ckpt), describe(ckpt))
        for prop in model.metadata_props:
            if prop.key == "ropeexport.weights":
                prop.value = "PINNED"
        got[f"checkpoint/{name}/fp32-int4-b32/decomposed"] = hashlib.sha256(model.SerializeToString()).hexdigest()
    got |= _latent_text_decoders(tiny_checkpoints["mistral_large4"][1], tmp_path)
    if os.environ.get("ROPEEXPORT_PIN_NEW"):  # adding an architecture: pin its new decoders, never change one
        assert {k: got[k] for k in PINNED["decoders"]} == PINNED["decoders"]
        pinned = dict(PINNED, decoders=dict(sorted((PINNED["decoders"] | got).items())))
        (Path(__file__).parent / "hashes.json").write_text(json.dumps(pinned, indent=1) + "\n")
    assert got == PINNED["decoders"]
