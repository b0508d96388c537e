"""onnx-community folders, as transformers.js loads them, read by ``audit`` and ``graft`` as they are.

A folder published for transformers.js (the Hugging Face ``onnx-community`` organisation's, or
``ropeexport package --for transformers.js``'s) holds ``config.json`` (and ``generation_config.json``, tokenizer
files) beside ``onnx/``, where each dtype is its own model: ``model.onnx`` (fp32), ``model_fp16.onnx``,
``model_q4.onnx`` (MatMulNBits weights, fp32 activations), ``model_q4f16.onnx``, ``model_quantized.onnx`` (8-bit
MatMulInteger), ``model_int8.onnx``, ``model_uint8.onnx``, ``model_bnb4.onnx`` (transformers.js's
``scripts/quantize.py`` names them so; ``utils/dtypes.js`` maps the ``dtype`` a user asks for to the suffix).
Every variant is its own graph with its own rotary tables, and a quantizer or a float16 conversion rewrites each
separately: ``audit DIR`` audits every variant (one result each), ``graft DIR --variant FILE --out NEW`` grafts one and
writes NEW as transformers.js loads it: the grafted model at ``onnx/FILE`` (external data as ``FILE_data``, named in
``config.json``'s ``transformers.js_config``), and every top-level file of DIR copied as it is (config, generation
config, tokenizer, chat template). The other variants are not copied: they were not grafted.

The config is the folder's ``config.json`` unless one is given.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ropeexport.errors import SpecError
from ropeexport.store import MANIFEST

ONNX = "onnx"  # the sub-folder transformers.js reads models from
CONFIG = "config.json"
# A variant's file name: model.onnx, or model_SUFFIX.onnx (fp16, q4, q4f16, quantized, int8, uint8, bnb4, ...).
VARIANT = re.compile(r"^model(_[A-Za-z0-9]+)?\.onnx$")
TJS_CONFIG = "transformers.js_config"  # config.json's section that names the models with external data


def is_folder(path: Path) -> bool:
    """True for a folder (not a model file): what ``audit`` and ``graft`` read as an onnx-community folder."""
    return path.is_dir()


def variants(folder: Path) -> list[Path]:
    """The folder's ``onnx/model*.onnx`` files, ``model.onnx`` first, then by name; SpecError naming ``model`` when
    there are none (module doc).
    """  # noqa: D205
    found = sorted((p for p in (folder / ONNX).glob("*.onnx") if VARIANT.match(p.name) and p.is_file()),
                   key=lambda p: (p.name != "model.onnx", p.name))  # fmt: skip
    if not found:
        raise SpecError("model", f"{str(folder)!r} is a folder without onnx/model*.onnx: give an ONNX file, or a "
                        "folder published for transformers.js (config.json beside onnx/model.onnx, "
                        "onnx/model_q4.onnx, ...)")  # fmt: skip
    return found


def chosen(folder: Path, variant: str | None) -> list[Path]:
    """Every variant, or the one named ``variant`` (its file name, ``model_q4.onnx``, or its dtype suffix, ``q4``;
    ``fp32`` is model.onnx); SpecError naming ``variant`` with the ones there when it is not one of them.
    """  # noqa: D205
    found = variants(folder)
    if variant is None:
        return found
    names = {p.name: p for p in found}
    wanted = variant if variant.endswith(".onnx") else ("model.onnx" if variant == "fp32" else f"model_{variant}.onnx")
    if wanted not in names:
        raise SpecError("variant", f"must be one of {', '.join(names)} (the models in {str(folder / ONNX)!r}), got "
                        f"{variant!r}")  # fmt: skip
    return [names[wanted]]


def config_of(folder: Path, hf_config: Path | None, spec_file: Path | None) -> Path | None:
    """The config to audit against: ``hf_config`` when given (or None with a ``spec_file``), else the folder's
    config.json; SpecError naming ``hf_config`` when the folder has none.
    """  # noqa: D205
    if hf_config is not None or spec_file is not None:
        return hf_config
    config = folder / CONFIG
    if not config.is_file():
        raise SpecError("hf_config", f"{str(folder)!r} has no config.json: give --hf-config (the transformers config "
                        "the models came from) or --spec")  # fmt: skip
    return config


@dataclass
class CommunityFolder:
    """The transformers.js folder a graft writes: the grafted model's place inside it and the files copied beside
    it (module doc).
    """  # noqa: D205

    folder: Path
    model: str  # onnx/FILE
    companions: dict[str, Path] = field(default_factory=dict)  # name -> the original folder's file

    def write(self, into: Path) -> list[str]:
        """Copy the companions into ``into`` (the store's work folder) and name the grafted model's external data
        as transformers.js does (``FILE_data``, in config.json); the names written.
        """  # noqa: D205
        for name, path in self.companions.items():
            shutil.copyfile(path, into / name)
        written = list(self.companions)
        model = into / self.model
        data = model.with_name(f"{model.name}.data")  # what ``audits.model.write_model`` wrote
        if data.is_file() and data.stat().st_size == 0:  # every tensor stayed inline
            data.unlink()
        elif data.is_file():
            proto = onnx.load(str(model), load_external_data=False)
            for tensor in _tensors(proto.graph):
                for entry in tensor.external_data:
                    if entry.key == "location" and entry.value == data.name:
                        entry.value = f"{model.name}_data"
            model.write_bytes(proto.SerializeToString(deterministic=True))
            data.rename(model.with_name(f"{model.name}_data"))
            _name_external_data(into / CONFIG, model.name)
        return written


def community_folder(folder: Path, source: Path, out: Path) -> CommunityFolder:
    """The folder to write at ``out`` for a graft of ``source`` (one of ``folder``'s variants): every regular
    top-level file of ``folder`` copied (links followed; hidden files and a store's manifest.json left out).
    """  # noqa: D205
    from ropeexport.audits.package import regular_files

    return CommunityFolder(out, f"{ONNX}/{source.name}", regular_files(folder, {MANIFEST}))


def _name_external_data(config: Path, model: str) -> None:
    """config.json's ``transformers.js_config.use_external_data_format`` naming ``model``'s one data file."""
    data: dict[str, Any] = json.loads(config.read_text()) if config.is_file() else {}
    section = data.setdefault(TJS_CONFIG, {})
    formats = section.get("use_external_data_format")
    section["use_external_data_format"] = (formats if isinstance(formats, dict) else {}) | {model: 1}
    config.write_text(json.dumps(data, indent=2) + "\n")


def _tensors(graph: onnx.GraphProto) -> list[onnx.TensorProto]:
    """Every initializer of ``graph`` and of its subgraphs."""
    out = list(graph.initializer)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                out += _tensors(attribute.g)
            out += [t for g in attribute.graphs for t in _tensors(g)]
    return out
