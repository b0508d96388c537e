"""A model's tensors read safely: external data inside the model's folder, of the bytes its dims say, read one tensor
at a time (``Initializers``). What ``ropeexport.audits`` reads other tools' models with, and a written decoder's stored
weights are read back with (``decoder.held``).
"""  # noqa: D205

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from ropeexport.errors import SpecError

EXTERNAL = onnx.TensorProto.EXTERNAL


def nbytes(tensor: onnx.TensorProto) -> int | None:
    """Bytes the tensor's dims and type take (None: a type of no fixed width, strings)."""
    try:
        bits = ir.DataType(tensor.data_type).bitwidth
    except (TypeError, ValueError):
        return None
    return math.ceil(math.prod(tensor.dims) * bits / 8)


def check_external(tensor: onnx.TensorProto, what: str, folder: Path) -> None:
    """SpecError unless ``tensor``'s external data lies inside ``folder``, exists and holds the bytes its dims take."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    where = (folder / location).resolve()
    if not location or not where.is_relative_to(folder):
        raise SpecError("model", f"{what} reads external data {location!r}, outside the model's folder "
                        f"{str(folder)!r}: refused")  # fmt: skip
    if not where.is_file():
        raise SpecError("model", f"{what} reads external data {location!r}, which does not exist")
    try:
        offset, length = int(entries.get("offset", 0)), entries.get("length")
        length = None if length is None else int(length)
    except ValueError:
        raise SpecError("model", f"{what} gives its external data an offset or length that is not a whole number "
                        f"({entries.get('offset')!r}, {entries.get('length')!r})") from None  # fmt: skip
    needed, size = nbytes(tensor), where.stat().st_size
    if needed is None:
        raise SpecError("model", f"{what} keeps {onnx.TensorProto.DataType.Name(tensor.data_type)} values in external "
                        "data, which have no fixed width: refused")  # fmt: skip
    if offset < 0 or (length is not None and length != needed):
        raise SpecError("model", f"{what} says its external data is {length} bytes at offset {offset}, but dims "
                        f"{list(tensor.dims)} of its type take {needed} bytes: refused")  # fmt: skip
    if offset + needed > size:
        raise SpecError("model", f"{what} reads {needed} bytes at offset {offset} of {location!r}, which has {size}: "
                        "refused")  # fmt: skip


class Initializers(Mapping[str, np.ndarray]):
    """The main graph's initializers of ``proto`` (an ``onnx.ModelProto``, its external data not loaded: ``folder``
    holds it), each read when asked for and not kept (module doc).
    """  # noqa: D205

    def __init__(self, proto: onnx.ModelProto, folder: Path | None) -> None:
        self._tensors = {t.name: t for t in proto.graph.initializer}
        self.folder = folder

    def __getitem__(self, name: str) -> np.ndarray:
        tensor = self._tensors[name]
        if tensor.data_location != EXTERNAL:
            return onnx.numpy_helper.to_array(tensor)
        if self.folder is None:
            raise SpecError("model", f"initializer {name!r} keeps its values in external data, and the model has no "
                            "folder to read them from")  # fmt: skip
        folder = self.folder.resolve()
        check_external(tensor, f"initializer {name!r}", folder)
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)  # the graph's own proto keeps no bytes: this copy holds them while they are used
        onnx.external_data_helper.load_external_data_for_tensor(copy, str(folder))
        return onnx.numpy_helper.to_array(copy)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors  # Mapping's own reads the tensor's data

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)
