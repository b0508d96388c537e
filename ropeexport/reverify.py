"""A built model read back before anything runs it: the checks every kind's ``verify`` makes on its model file.

Hashes (``store.check_files``) only prove the files are the ones the manifest names: a manifest written over a
damaged model would still match, so the model itself is read defensively (``check_model``), and the spec it embeds
(hashed with it) must be the one the manifest says (``check_embedded_spec``): a manifest edited after the build must
not be what the model is judged by.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ropeexport.errors import ArtifactError
from ropeexport.inputs import loads_json
from ropeexport.store import flat, inside

MAX_INITIALIZER_BYTES = 2**31  # protobuf's cap on a model; a larger claimed tensor is damage, not a table


def check_model(folder: Path, files: Mapping[str, str], record: str = "the manifest") -> onnx.ModelProto:
    """model.onnx parses, its tensors are as large as their dims say, and its external data is listed in ``files``
    (and so hashed); else ArtifactError.
    """  # noqa: D205
    try:
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: the bytes are no ONNX model
        raise ArtifactError("model.onnx", f"is not an ONNX model ({type(exc).__name__})") from None
    if not model.HasField("graph") or not model.graph.output:
        raise ArtifactError("model.onnx", "has no graph (or no outputs): not a ropeexport artifact")
    for tensor in model.graph.initializer:
        dims = list(tensor.dims)
        if any(d < 0 for d in dims):
            raise ArtifactError("model.onnx", f"initializer {tensor.name!r} has negative dims {dims}")
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize if tensor.data_type else 0
        size = itemsize * int(np.prod(dims, dtype=np.float64)) if dims else itemsize
        if size > MAX_INITIALIZER_BYTES:
            raise ArtifactError("model.onnx", f"initializer {tensor.name!r} claims {dims}: {size:.3g} bytes, over "
                                "2 GiB")  # fmt: skip
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            where = f"model.onnx external data of {tensor.name!r}"
            inside(folder, location, where)
            if location not in files:
                raise ArtifactError(where, f"{location!r} is not listed (and hashed) in {record}'s files")
        elif tensor.HasField("raw_data") and len(tensor.raw_data) != size:
            raise ArtifactError("model.onnx", f"initializer {tensor.name!r}: dims {dims} need {size} bytes, it holds "
                                f"{len(tensor.raw_data)}")  # fmt: skip
    return model


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    """The model's metadata props."""
    return {p.key: p.value for p in model.metadata_props}


def embedded_spec(model: onnx.ModelProto) -> dict[str, Any]:
    """The spec the model carries in its ``ropeexport.spec`` metadata; else ArtifactError."""
    meta = metadata(model)
    if "ropeexport.spec" not in meta:
        raise ArtifactError("model.onnx", "carries no ropeexport.spec metadata: not a ropeexport artifact")
    embedded = loads_json(meta["ropeexport.spec"], "model.onnx ropeexport.spec metadata")
    if not isinstance(embedded, dict):
        raise ArtifactError("model.onnx", "ropeexport.spec metadata must be a table of fields")
    return embedded


def same_fields(stored: Mapping[str, Any], embedded: Mapping[str, Any], where: str) -> None:
    """Every (dotted) field of ``stored`` equal to the model's ``embedded`` one; else ArtifactError naming it."""
    a, b = flat(stored), flat(embedded)
    for key in sorted(a.keys() | b.keys()):
        if a.get(key) != b.get(key):
            raise ArtifactError(f"{where}.{key}", f"is {a.get(key)!r} but the model was built with {b.get(key)!r}")


def check_embedded_spec(model: onnx.ModelProto, manifest: Mapping[str, Any]) -> None:
    """The manifest's spec (not hashed) must equal the spec embedded in the model (hashed), field by field, and its
    name, encoding and artifact the spec's.
    """  # noqa: D205
    meta = metadata(model)
    if manifest.get("artifact") != meta.get("ropeexport.artifact"):
        raise ArtifactError("manifest.json artifact", f"is {manifest.get('artifact')!r} but the model is a "
                            f"{meta.get('ropeexport.artifact')!r} artifact")  # fmt: skip
    embedded = embedded_spec(model)
    declared = meta.get("ropeexport.max_positions", "")
    if not declared.isdigit() or int(declared) != embedded.get("max_positions"):
        raise ArtifactError("model.onnx", f"ropeexport.max_positions metadata {declared!r} is not the spec's "
                            f"max_positions {embedded.get('max_positions')!r}")  # fmt: skip
    same_fields(manifest["spec"], embedded, "manifest.json spec")
    for key in ("name", "encoding", "artifact"):
        if manifest.get(key) != embedded.get(key):
            raise ArtifactError(f"manifest.json {key}", f"is {manifest.get(key)!r} but the model's spec says "
                                f"{embedded.get(key)!r}")  # fmt: skip
