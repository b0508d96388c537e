"""A ``block`` artifact with one layer's attention weights read from a checkpoint.

The checkpoint's config gives the decoder (``decoder.spec``); its encoding's block spec is the artifact's spec, in the
dtype and form asked for. The layer's q/k/v/o projections and biases are read and checked as the decoder reads them
(``decoder.checkpoint``), and its sliding window comes along. The block kind is the family's own with those weights in
its export, eager reference and float64 oracle (and, where the model's width is not heads x head_dim, hidden
inputs of the model's width): the pipeline builds and verifies it like any block. The manifest's ``origin``
records the checkpoint and the layer, so ``verify`` reads the same weights again (``recipe_for_origin``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard

import numpy as np
from onnx import helper

from ropeexport.catalog import recipe_for
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.checkpoint import load_checkpoint
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import BLOCK_NAMES, describe, layer_weights
from ropeexport.dtypes import DTYPES
from ropeexport.encoding import EncodingKind
from ropeexport.errors import ArtifactError, SpecError
from ropeexport.recipes import Feeds, Probe, Recipe


def _weights(decoder: DecoderSpec, checkpoint: Path, layer: int) -> dict[str, np.ndarray]:
    if not 0 <= layer < decoder.num_layers:
        raise SpecError("layer", f"must be in [0, {decoder.num_layers - 1}] (the checkpoint's layers), got {layer}")
    a = decoder.layers[layer].attention
    if a.qk_norm or a.scale or a.softcap or a.sinks or decoder.layers[layer].chunk:
        # The block artifact's attention has no q/k norms, logit scale, cap, sinks or chunks: it would not be this
        # model's (Llama 4's chunked layers among them).
        raise SpecError("layer", f"a {decoder.model_type} layer (q/k norms, its logit scale, cap, sinks or chunked "
                        "attention) is not a block artifact yet; build the whole decoder "
                        "(--artifact decoder)")  # fmt: skip
    if decoder.layer_position_spec(layer) is None:
        raise SpecError("layer", f"layer {layer} has no positional encoding (no_rope_layers): its block has no "
                        "position to verify; pick a layer with one")  # fmt: skip
    every = load_checkpoint(decoder, checkpoint)
    return {n: v for n, v in layer_weights(every, layer).items() if n in BLOCK_NAMES}


class _WeightedStage(Protocol):
    """A block kind's eager or oracle: every kind's (spec, feeds), and a checkpoint layer's weights and window."""

    def __call__(self, spec: Any, feeds: Feeds, weights: Mapping[str, np.ndarray] | None = None,
                 window: int = 0) -> dict[str, np.ndarray]: ...  # fmt: skip


def _takes_weights(stage: Callable[..., dict[str, np.ndarray]]) -> TypeGuard[_WeightedStage]:
    return {"weights", "window"} <= set(inspect.signature(stage).parameters)


def layer_recipe(kind: Recipe, weights: Mapping[str, np.ndarray], window: int, source: str) -> Recipe:
    """``kind`` (an encoding's block kind) with ``weights`` in every stage; ``source`` goes in the model metadata."""
    width = int(weights["q_proj"].shape[0])
    eager, oracle = kind.eager, kind.oracle
    if not (_takes_weights(eager) and _takes_weights(oracle)):
        raise SpecError("artifact", f"{kind.encoding} {kind.artifact} takes no layer weights (a block kind does)")

    def export(spec: Any) -> Any:
        piece = kind.piece_of(spec)
        from ropeexport.block.export import build_block_graph

        model = build_block_graph(spec, piece.rotary, piece.bias, weights, window)
        props = {p.key: p.value for p in model.metadata_props} | {"ropeexport.weights": source}
        del model.metadata_props[:]
        helper.set_model_props(model, dict(sorted(props.items())))
        return model

    def feeds(spec: Any, probe: Probe, rng: np.random.Generator) -> Feeds:
        out = kind.feeds(spec, probe, rng)
        b, s, now = out["hidden"].shape
        if now != width:  # the model's width differs from heads x head_dim (Mistral-Nemo's, say)
            out["hidden"] = rng.standard_normal((b, s, width), dtype=np.float32).astype(DTYPES[spec.dtype].np_dtype)
        return out

    def probes(spec: Any) -> tuple[list[Probe], dict[str, Any]]:
        calls, coverage = kind.probes(spec)
        return calls, coverage | {"weights": source}  # the report names the checkpoint and the layer

    return dataclasses.replace(
        kind,
        summary=f"{kind.summary} (the attention weights of {source})",
        export=export,
        probes=probes,
        feeds=feeds,
        eager=lambda spec, f: eager(spec, f, weights=weights, window=window),
        oracle=lambda spec, f: oracle(spec, f, weights=weights, window=window),
    )


def layer_block(
    checkpoint: str | Path,
    layer: int = 0,
    dtype: str = "fp32",
    graph: str = "fused",
    name: str | None = None,
    hf_config: str | Path | None = None,
) -> tuple[Any, Recipe, dict[str, Any]]:
    """(block spec, its kind with the layer's weights, the manifest origin) of one checkpoint layer."""
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise SpecError("layer", f"must be an integer, got {layer!r}")
    checkpoint = Path(checkpoint)
    decoder, _ = resolve(DecoderRequest(hf_config=hf_config, checkpoint=checkpoint, dtype=dtype, graph=graph))
    weights = _weights(decoder, checkpoint, layer)
    base = decoder.name.split("-decoder-")[0]
    own = decoder.layer_position_spec(layer)  # the layer's own encoding (Gemma 3: its type's), never the model's
    assert own is not None  # _weights refused a layer without one
    position = own.replace(name=name or f"{base}-block-layer{layer}-{dtype}-{graph}")
    source = f"{describe(checkpoint)}, layer {layer}"
    origin = {"checkpoint": str(checkpoint.resolve()), "layer": layer, "weights": source}
    if hf_config is not None:
        origin["hf_config"] = str(Path(hf_config).resolve())
    kind = layer_recipe(recipe_for(position), weights, decoder.layer(layer).window, source)
    return position, kind, origin


def recipe_for_origin(spec: Any, origin: Mapping[str, Any]) -> Recipe:
    """The kind a manifest's spec and origin stand for when it names a checkpoint layer (``verify`` again)."""
    checkpoint = Path(str(origin["checkpoint"]))
    if not checkpoint.is_dir():
        raise SpecError("checkpoint", f"{str(checkpoint)!r}, the folder this block's weights were read from, no "
                        "longer exists")  # fmt: skip
    decoder, _ = resolve(DecoderRequest(hf_config=origin.get("hf_config"), checkpoint=checkpoint, dtype=spec.dtype,
                                         graph=spec.graph))
    layer = int(origin["layer"])
    return layer_recipe(recipe_for(spec), _weights(decoder, checkpoint, layer), decoder.layer(layer).window,
                      str(origin["weights"]))  # fmt: skip


def _origin(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    build = manifest.get("build")
    origin = build.get("origin") if isinstance(build, Mapping) else None
    return origin if isinstance(origin, Mapping) else {}


@dataclass
class LayerBlockKind(EncodingKind):
    """A checkpoint layer's block: an encoding block whose weights come from the checkpoint its manifest names."""

    name: str = "layer-block"
    source: str = ""  # for a build: the words of the weights' source (``describe`` of the checkpoint, the layer)

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        """A block manifest whose origin names a checkpoint and a layer."""
        origin = _origin(manifest)
        return manifest.get("artifact") == "block" and "checkpoint" in origin and "layer" in origin

    def owns_report(self, report: Mapping[str, Any]) -> bool:
        """None: a block's report is an encoding artifact's, read and compared as such."""
        return False

    def identity(self, spec: Any) -> dict[str, object]:
        """The layer's weights (the checkpoint and layer they were read from): a rebuild from another checkpoint of
        the same config is another artifact.
        """  # noqa: D205
        return {"weights": self.source}

    def spec_of(self, folder: Path, manifest: Mapping[str, Any]) -> Any:
        """The block's spec, once the checkpoint its origin names is there to read the layer's weights from again."""
        checkpoint = Path(str(_origin(manifest).get("checkpoint", "")))
        if not checkpoint.is_dir():
            raise ArtifactError("manifest.json build.origin.checkpoint", f"{str(checkpoint)!r}, the folder this "
                                "block's weights were read from, no longer exists; restore it to verify "
                                "again")  # fmt: skip
        return super().spec_of(folder, manifest)

    def recipe_for_manifest(self, spec: Any, manifest: Mapping[str, Any]) -> Recipe:
        """The family's block kind with the weights of the layer the manifest's origin names, read again."""
        return recipe_for_origin(spec, _origin(manifest))
