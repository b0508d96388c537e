"""Llama 4 (Scout, Maverick; the text model of a ``llama4`` checkpoint, its ``text_config``): Llama's body with
chunked attention, no RoPE and a query temperature on every 4th layer, an L2 q/k norm on the RoPE layers, and
experts with a shared one on every ``interleave_moe_layer_step``-th layer.

Read from transformers 5.23 (``models/llama4``): ``Llama4TextConfig.__post_init__`` derives ``no_rope_layers`` (1 =
RoPE) as ``(i + 1) % no_rope_layer_interval != 0`` (interval 4), ``moe_layers`` as every
``interleave_moe_layer_step``-th layer from step - 1 (step 1: all), and ``layer_types`` ``chunked_attention`` on the
RoPE layers, ``full_attention`` on the others; ``create_chunked_causal_mask`` lets a query see only the keys of its
chunk of ``attention_chunk_size`` slots, counted from the row's first real token. ``Llama4TextAttention``: the
rotation in complex form (``view_as_complex``: pairs (2i, 2i + 1)), then, with ``use_qk_norm``, on the RoPE layers
only, ``Llama4TextL2Norm(rms_norm_eps)`` of query and key (no weight); with ``attn_temperature_tuning``, on the NoPE
layers only, the query times log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1 (the ``temperature`` query
scale of ``components.query_scale``; its pos here is the row's ``position_ids``, where transformers takes the cache
slot: the same wherever a row's positions start at 0 with no left padding); ``self.scaling`` head_dim ** -0.5.
``Llama4TextMoe``: ``Llama4Router`` (the top ``num_experts_per_tok`` of ``num_local_experts``, each expert fed the
token times the sigmoid of its logit: ``components.moe``'s ``topk_sigmoid``), experts ``intermediate_size`` wide
(``experts.gate_up_proj`` [E, n, 2m], the gate's columns then the up's), plus ``shared_expert`` (a gated MLP as wide);
the dense layers' ``Llama4TextMLP`` is ``intermediate_size_mlp`` wide. Biases only with ``attention_bias`` (q, k, v
and o together).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ropeexport.architectures.base import MOE_KEYS, Architecture, Keys, number, read_layout
from ropeexport.architectures.hooks import interleaved
from ropeexport.architectures.llama import BODY, NAMES
from ropeexport.errors import SpecError

_FF = "model.layers.{i}.feed_forward."
# transformers' Llama4TextConfig defaults of the keys read here
DEFAULTS = {"attention_chunk_size": 8192, "use_qk_norm": True, "attn_temperature_tuning": True, "floor_scale": 8192,
            "attn_scale": 0.1, "interleave_moe_layer_step": 1, "no_rope_layer_interval": 4}  # fmt: skip


def _value(config: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """The config's value of ``key`` and its source, or transformers' default (``DEFAULTS``) where absent."""
    if key in config:
        return config[key], key
    return DEFAULTS[key], f"default {DEFAULTS[key]} (transformers' Llama4TextConfig)"


def _switch(config: Mapping[str, Any], where: str, key: str) -> tuple[bool, str]:
    value, source = _value(config, key)
    if not isinstance(value, bool):
        raise SpecError(f"{where}: {key}", f"must be true or false, got {value!r}")
    return value, source


def _index_list(config: Mapping[str, Any], where: str, key: str, layers: int, flags: bool = False) -> list[int]:
    """A per-layer list (``flags``: one 0/1 per layer) or a list of layer indices, checked."""
    value = config[key]
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise SpecError(f"{where}: {key}", f"must be a list of integers, got {value!r}")
    if flags and len(value) < layers:
        raise SpecError(f"{where}: {key}", f"holds {len(value)} entries, the model has {layers} layers")
    outside = next((v for v in value if not (0 <= v <= 1 if flags else 0 <= v < layers)), None)
    if outside is not None:
        allowed = "0 (no RoPE) or 1 (RoPE)" if flags else f"a layer index 0 to {layers - 1}"
        raise SpecError(f"{where}: {key}", f"holds {outside!r}; each entry must be {allowed}")
    return value[:layers] if flags else value


def _rotated(config: Mapping[str, Any], where: str, layers: int) -> tuple[list[bool], str]:
    """Per layer whether it uses RoPE, as ``Llama4TextConfig.__post_init__`` derives it (an empty list: derived)."""
    if config.get("no_rope_layers"):
        return [bool(f) for f in _index_list(config, where, "no_rope_layers", layers, flags=True)], "no_rope_layers"
    interval, source = _value(config, "no_rope_layer_interval")
    interval = int(number(where, "no_rope_layer_interval", interval))
    return [(i + 1) % interval != 0 for i in range(layers)], f"every {interval}th layer NoPE ({source})"


def _changes(config: Mapping[str, Any], where: str,
             layout: Mapping[str, Any]) -> tuple[list[dict[str, object]], dict[str, str]]:  # fmt: skip
    """Per layer: its mask (chunked on the layer types saying so), the L2 q/k norm (RoPE layers), the temperature
    (NoPE layers) and its feed-forward (the mixture, or the dense MLP ``intermediate_size_mlp`` wide), each with the
    keys it came from (module doc).
    """  # noqa: D205
    layers = int(layout["num_layers"])
    rotated, rotated_source = _rotated(config, where, layers)
    said = {"no RoPE": f"{[i for i, r in enumerate(rotated) if not r]} ({rotated_source})"}
    types = config.get("layer_types")
    if types is None:
        types = ["chunked_attention" if r else "full_attention" for r in rotated]
        said["chunked layers"] = "the RoPE layers (no layer_types: transformers derives them from no_rope_layers)"
    else:
        said["chunked layers"] = "layer_types"  # its length and entries are checked by ropeexport.hf
    chunk = 0
    if "chunked_attention" in types:
        value, source = _value(config, "attention_chunk_size")
        if value is None:
            raise SpecError(f"{where}: attention_chunk_size", "is null while layer_types has chunked_attention "
                            "layers: transformers' chunked mask needs it (a positive integer)")  # fmt: skip
        chunk = int(number(where, "attention_chunk_size", value))
        said["chunk"] = f"{chunk} ({source})"
    qk_norm, qk_source = _switch(config, where, "use_qk_norm")
    said["L2 q/k norm"] = f"{'on the RoPE layers' if qk_norm else 'none'} (use_qk_norm: {qk_source})"
    scale = _temperature(config, where, said)
    moe = _moe_layers(config, where, layers, said)
    inner = config.get("intermediate_size_mlp")
    out: list[dict[str, object]] = []
    for i in range(layers):
        layer: dict[str, object] = {}
        if types[i] == "chunked_attention":
            layer |= {"attention": "chunked", "window": chunk}
        if rotated[i] and qk_norm:
            layer["qk_norm"] = "l2"
        if not rotated[i] and scale is not None:
            layer["query_scale"] = scale
        if i not in moe:
            if inner is None:
                raise SpecError(f"{where}: intermediate_size_mlp", "missing: llama4_text's dense layers are that "
                                "wide (transformers' default 16384 is a real model's)")  # fmt: skip
            layer |= {"mlp": "gated", "intermediate_size": int(number(where, "intermediate_size_mlp", inner)),
                      "num_experts": 0, "experts_per_token": 0, "router": "", "n_shared_experts": 0}  # fmt: skip
        out.append(layer)
    if len(moe) < layers:
        said["dense layers"] = "intermediate_size_mlp wide"
    return out, said


def _temperature(config: Mapping[str, Any], where: str, said: dict[str, str]) -> dict[str, object] | None:
    """The NoPE layers' query scale (``temperature``), None without ``attn_temperature_tuning`` or at attn_scale 0."""
    tuning, source = _switch(config, where, "attn_temperature_tuning")
    if not tuning:
        said["temperature"] = f"none (attn_temperature_tuning: {source})"
        return None
    floor, floor_source = _value(config, "floor_scale")
    attn, attn_source = _value(config, "attn_scale")
    if isinstance(attn, bool) or not isinstance(attn, (int, float)) or not 0 <= attn < float("inf"):
        raise SpecError(f"{where}: attn_scale", f"must be a finite number >= 0 (0: the query times 1), got {attn!r}")
    floor = int(number(where, "floor_scale", floor))
    if not attn:
        said["temperature"] = "none (attn_scale 0: the query times 1)"
        return None
    said["temperature"] = (f"NoPE layers: q * (log(floor((pos + 1) / {floor}) + 1) * {attn} + 1) (floor_scale: "
                           f"{floor_source}; attn_scale: {attn_source})")  # fmt: skip
    return {"kind": "temperature", "floor_scale": floor, "attn_scale": float(attn)}


def _moe_layers(config: Mapping[str, Any], where: str, layers: int, said: dict[str, str]) -> set[int]:
    """The layers holding the mixture: ``moe_layers``, else every ``interleave_moe_layer_step``-th (from step - 1)."""
    if config.get("moe_layers") is not None:
        moe = set(_index_list(config, where, "moe_layers", layers))
        said["mixture layers"] = f"{sorted(moe)} (moe_layers)"
        return moe
    step, source = _value(config, "interleave_moe_layer_step")
    step = int(number(where, "interleave_moe_layer_step", step))
    moe = set(range(step - 1, layers, step))
    said["mixture layers"] = f"{sorted(moe)} (every {step}th from {step - 1}: interleave_moe_layer_step {source})"
    return moe


def _read(arch: Architecture, config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Llama's model-wide fields (``read_layout``), the shared expert's source said."""
    fields, sources = read_layout(arch, config, where)
    sources["n_shared_experts"] = "architecture (Llama4TextMoe's one shared_expert, intermediate_size wide)"
    return fields, sources


ARCHITECTURE = replace(
    BODY,
    model_type="llama4_text",
    names={
        **{k: v.replace(".mlp.", ".feed_forward.") for k, v in NAMES.items()},
        "layers.{i}.router_proj": _FF + "router.weight",
        "layers.{i}.experts_gate_up_halves": _FF + "experts.gate_up_proj",
        "layers.{i}.experts_down_proj": _FF + "experts.down_proj",
        "layers.{i}.shared_gate_proj": _FF + "shared_expert.gate_proj.weight",
        "layers.{i}.shared_up_proj": _FF + "shared_expert.up_proj.weight",
        "layers.{i}.shared_down_proj": _FF + "shared_expert.down_proj.weight",
    },
    keys=Keys(eps=("rms_norm_eps",), eps_default=1e-5, qkv_bias=("attention_bias", False),
              o_bias=("attention_bias", False), reads=MOE_KEYS),  # fmt: skip
    layer_fields={"mlp": "moe", "router": "topk_sigmoid", "expert": "gated", "n_shared_experts": 1},
    hook=replace(interleaved("llama4_text", "view_as_complex"), default_theta=500_000.0, reads_layer_types=True,
                 reads_no_rope_layers=True, no_rope_interval=4, chunked=True),  # fmt: skip
    read=_read,
    changes=_changes,
    wrappers=("llama4",),  # Llama 4 with its vision tower ships as llama4: text_config
)
