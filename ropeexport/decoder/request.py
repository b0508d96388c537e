"""What a decoder build is asked for: ``DecoderRequest`` (``rx.DecoderRequest``), the one typed record of it.

``rx.build_decoder(request, out_dir)`` and ``rx.resolve_decoder(request)`` take it, and the CLI's build flags become
one (``ropeexport.cli.decoder.request_of``). It is checked when it is made, each bad value one SpecError naming the
field; what needs a file or the config (a preset's card, a size the config cannot shrink to, a dtype past a tensor)
is checked when it is resolved (``decoder.build.resolve``), still before anything is written.

Torch-free: the allowed dtypes and graph forms are the spec's own tables (``decoder.spec``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ropeexport.decoder.spec import DTYPES, FORMS
from ropeexport.errors import SpecError
from ropeexport.runtimes.capabilities import CAPABILITIES
from ropeexport.specs import require_bool, require_choice, require_dtype, require_int

# The request's sources of a transformers config, in the order a conflict is reported (the first one given wins).
SOURCES = ("preset", "config", "hf_config")
SIZES = ("num_layers", "hidden_size", "vocab_size", "max_positions")  # ranges: the config's shrink and the spec's


@dataclass(frozen=True, kw_only=True)
class DecoderRequest:
    """What a decoder build is asked for (keyword-only fields; every one optional but a source of config).

    The config, exactly one of:

    - ``hf_config``: a transformers config.json (a path; never fetched),
    - ``checkpoint``: a local checkpoint folder (config.json + *.safetensors): its config.json unless ``hf_config``
      or ``config`` is given, and its weights (without one, the weights are seeded: numpy default_rng(0)),
    - ``preset``: a preset card's ``[config]`` (``ropeexport list --presets``); not with the three others,
    - ``config``: a transformers config as a mapping, in memory (as a card's ``[config]`` holds it).

    The model built:

    - ``dtype``: "fp32" (default) or "fp16"; ``graph``: the form, "fused" (default), "decomposed", "tensorrt" or
      "gqa",
    - ``num_layers``, ``hidden_size``, ``vocab_size``: shrink the config to a tiny model (seeded weights only; None,
      the default: the config's sizes), ``max_positions``: the context length (None: the config's),
    - ``name``: the folder's name (None: ``<preset or model name>-decoder-<l/h/v overrides>-<dtype>[-<weights>]-
      <graph>``),
    - ``weight_format``: "" (default: the projections rounded once to ``dtype``) or "int4" (MatMulNBits blocks of
      ``block_size``, 0 = 32, ``symmetric`` (default True) or with a zero point per block, at ``accuracy_level``
      0-4, default 0: ``components.linear.WeightFormat``),
    - ``eager``: also compare with the transformers reference (default True; its memory is counted first),
    - ``runtimes``: what every scenario runs on (default ``("ort",)``: ONNX Runtime's CPU provider), by registry
      name; each must run ``graph`` (its capability record, ``runtimes.capabilities``: a form it cannot run is
      refused before anything is built, with why); one that cannot run here is skipped with the reason (exit 3),
    - ``latent_cache``: latent attention's layers (deepseek_v3) cache the normed latent and the rotated rope key,
      ``kv_b_proj`` absorbed into the query and the output, in the decomposed form (default False: the expanded keys
      and values; the folder's name ends ``-latent``).

    A bad value is one SpecError naming the field (``str(err)``: ``"dtype: must be one of fp32, fp16; got 'bf16'"``).
    Paths are kept as ``Path``s and integral numbers as ints. ``dataclasses.replace(request, dtype="fp16")`` is a
    copy with one field changed, checked again.
    """

    hf_config: str | Path | None = None
    checkpoint: str | Path | None = None
    preset: str | None = None
    config: Mapping[str, object] | None = None
    dtype: str = "fp32"
    graph: str = "fused"
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    max_positions: int | None = None
    name: str | None = None
    weight_format: str = ""
    block_size: int = 0
    accuracy_level: int = 0
    symmetric: bool = True
    eager: bool = True
    runtimes: tuple[str, ...] = ("ort",)
    latent_cache: bool = False

    def __post_init__(self) -> None:
        given = [s for s in ("hf_config", "checkpoint", "config") if getattr(self, s) is not None]
        if self.preset is not None and given:  # a checkpoint brings its own config.json: two configs would disagree
            raise SpecError("preset", f"cannot be combined with `{given[0]}`: give one config")
        if self.config is not None and self.hf_config is not None:
            raise SpecError("config", "cannot be combined with `hf_config`: give one config")
        for field in ("hf_config", "checkpoint"):
            value = getattr(self, field)
            if value is not None:
                self._set(field, _path(value, field))
        if self.preset is not None and (not isinstance(self.preset, str) or not self.preset):
            raise SpecError("preset", f"must be a preset's name (ropeexport list --presets), got {self.preset!r}")
        if self.config is not None and not isinstance(self.config, Mapping):
            raise SpecError("config", f"must be a mapping (a transformers config's keys), got "
                            f"{type(self.config).__name__}")  # fmt: skip
        require_dtype(self.dtype, DTYPES, "int4 is how the projections are stored, not a dtype: give `weight_format` "
                      "int4 (onnxruntime-genai's builder's -p int4), its scales and activations in fp32 or fp16")
        require_choice("graph", self.graph, FORMS)
        for field in SIZES:
            if getattr(self, field) is not None:
                self._set(field, require_int(field, getattr(self, field), 1))
        if self.name is not None and not isinstance(self.name, str):
            raise SpecError("name", f"must be a folder name (a string), got {self.name!r}")
        if not isinstance(self.weight_format, str):
            raise SpecError("weight_format", f'must be "int4" or "", got {self.weight_format!r}')
        for field in ("block_size", "accuracy_level"):  # their allowed values are WeightFormat's, checked on resolve
            self._set(field, require_int(field, getattr(self, field), 0))
        for field in ("symmetric", "eager", "latent_cache"):
            self._set(field, require_bool(field, getattr(self, field)))
        runtimes = self.runtimes
        if isinstance(runtimes, str) or not isinstance(runtimes, (list, tuple)) or not runtimes:
            raise SpecError("runtimes", f"must be a list of runtimes ({', '.join(CAPABILITIES)}), got {runtimes!r}")
        for name in runtimes:
            require_choice("runtimes", name, tuple(CAPABILITIES))
        self._set("runtimes", tuple(dict.fromkeys(runtimes)))

    def _set(self, field: str, value: object) -> None:
        object.__setattr__(self, field, value)  # frozen: normalised once, while it is being made

    def origin(self) -> dict[str, str]:
        """What the build was asked from, for its manifest: the absolute paths given and the preset's name."""
        out = {k: str(Path(v).resolve()) for k, v in (("hf_config", self.hf_config),
                                                       ("checkpoint", self.checkpoint)) if v is not None}  # fmt: skip
        if self.preset is not None:
            out["preset"] = self.preset
        return out


def field_names() -> tuple[str, ...]:
    """DecoderRequest's fields, in order."""
    return tuple(f.name for f in dataclasses.fields(DecoderRequest))


def request_from(fields: Mapping[str, object], where: str) -> DecoderRequest:
    """A request from keyword arguments (the API's older keyword form, ``where``: the function given them); a name
    that is no field is a SpecError naming it and listing the fields, never a TypeError.
    """  # noqa: D205
    unknown = sorted(set(fields) - set(field_names()))
    if unknown:
        raise SpecError(unknown[0], f"is not an argument of {where} (DecoderRequest's fields: "
                        f"{', '.join(field_names())})")  # fmt: skip
    return DecoderRequest(**cast("dict[str, Any]", fields))  # each value is checked as the request is made


def _path(value: object, field: str) -> Path:
    """A path that is given: an empty string is an error, never the current folder."""
    if not isinstance(value, (str, os.PathLike)):
        raise SpecError(field, f"must be a path, got {type(value).__name__}")
    if not str(value).strip():
        raise SpecError(field, "is empty; give a path")
    return Path(value)
