"""The projections a foreign model holds as 4-bit ``MatMulNBits``, read as the float64 values it multiplies by.

``audit.prove`` takes them from the model itself where it can (onnxruntime-genai's ``-p int4``, ropeexport's
``weight_format="int4"``): the model is judged on its own terms, not by its int4 rounding against the checkpoint.
Their layer and projection come from their names; each is dequantized exactly (``components.linear.dequantize``)
when asked for, from the model's initializers read one at a time (``audits.model.Initializers``): a model's weights
are never held whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.errors import SpecError

# A MatMulNBits weight's layer and projection in its name: onnxruntime-genai's ``model.layers.3.attn.qkv_proj.MatMul.
# weight_Q4`` or ropeexport's ``layers.3/block/qkv_proj_Q4``, ``layers.3.gate_up_proj_Q4``.
_PROJECTION = re.compile(r"layers\.(\d+)[./](?:.*[./])?(?<![a-z_])(qkv|q|k|v|o|gate_up|gate|up|down)_proj(?![a-z])")


@dataclass(frozen=True)
class NBits:
    """A 4-bit MatMulNBits weight as the model holds it: its initializers (packed weight, scales, zero points or "")
    and attributes. ``read`` dequantizes it (``components.linear.dequantize``), whole or some of its out features.
    """  # noqa: D205

    weight: str
    scales: str
    zero_points: str
    K: int
    N: int
    block_size: int
    accuracy_level: int

    def read(self, tensors: Mapping[str, np.ndarray], columns: tuple[int, int] | None = None) -> np.ndarray:
        """float64 [K, N] (``columns``: [K, stop - start], out features start .. stop - 1), read from ``tensors``."""
        from ropeexport.components.linear import Packed, dequantize

        blocks = -(-self.K // self.block_size)
        start, stop = columns if columns is not None else (0, self.N)
        packed = tensors[self.weight].reshape(self.N, blocks, self.block_size // 2)[start:stop]
        scales = tensors[self.scales].reshape(self.N, blocks)[start:stop]
        zero = tensors[self.zero_points].reshape(self.N, -1)[start:stop] if self.zero_points else None
        return dequantize(Packed(packed, scales, zero, self.K, self.block_size))


def nbits_weights(model: Any) -> dict[str, NBits]:
    """{weight input name: NBits} of every 4-bit MatMulNBits node of ``model`` (an ``onnx.ModelProto``, its external
    data loaded or not: nothing is read here) whose packed weight, scales and zero points are initializers. SpecError
    for one the proof cannot read (another bit width, a ``g_idx``).
    """  # noqa: D205
    held = {t.name for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits" or node.domain != "com.microsoft":
            continue
        attributes = {a.name: a.i for a in node.attribute}
        inputs = list(node.input) + [""] * 6
        if attributes.get("bits", 4) != 4 or inputs[4]:
            raise SpecError("model", f"MatMulNBits {node.name!r} has {attributes.get('bits')} bits or a g_idx input: "
                            "the decoder proof reads 4-bit weights in blocks only")  # fmt: skip
        if inputs[1] not in held or inputs[2] not in held or (inputs[3] and inputs[3] not in held):
            continue  # a weight computed in the graph: the checkpoint's values stand
        out[inputs[1]] = NBits(inputs[1], inputs[2], inputs[3], attributes["K"], attributes["N"],
                               attributes["block_size"], attributes.get("accuracy_level", 0))  # fmt: skip
    return out


class HeldWeights(Mapping[str, np.ndarray]):
    """The projections a model holds as 4-bit MatMulNBits by the decoder's canonical names, each dequantized from the
    model's initializers when asked for (``held_weights``); a fused weight's last read is kept for its other parts.
    """  # noqa: D205

    def __init__(self, tensors: Mapping[str, np.ndarray], parts: dict[str, tuple[NBits, tuple[int, int]]]) -> None:
        self._tensors, self._parts = tensors, parts
        self._last: tuple[str, np.ndarray] | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        weight, (start, stop) = self._parts[name]
        if (start, stop) == (0, weight.N):
            return weight.read(self._tensors)
        if self._last is None or self._last[0] != weight.weight:
            self._last = (weight.weight, weight.read(self._tensors))
        return self._last[1][:, start:stop]

    def __iter__(self) -> Iterator[str]:
        return iter(self._parts)

    def __len__(self) -> int:
        return len(self._parts)

    def vocab_part(self, name: str, start: int, stop: int) -> np.ndarray:
        """Columns [start, stop) of ``lm_head`` [hidden, vocab], dequantized alone."""
        weight, _ = self._parts[name]
        return weight.read(self._tensors, (start, stop))


def held_weights(model: Any, spec: Any, folder: Path | None = None) -> tuple[HeldWeights, int]:
    """The projections ``model`` (an ``onnx.ModelProto``; ``folder``: where its external data lies) holds as 4-bit
    MatMulNBits, by the decoder's canonical names (``layers.3.q_proj``, ``lm_head``; a fused q | k | v or gate | up
    split by the spec's widths), read as float64 [in, out] when asked for (``HeldWeights``), and the highest accuracy
    level among them (0 when there are none). SpecError when one's shape is not the checkpoint's (told from the
    attributes: nothing is read).
    """  # noqa: D205
    from ropeexport.audits.model import Initializers
    from ropeexport.decoder.checkpoint import expected, geometry

    shapes = expected(spec)
    parts: dict[str, tuple[NBits, tuple[int, int]]] = {}
    level = 0
    for name, weight in nbits_weights(model).items():
        found = _PROJECTION.search(name)
        if found is None and "lm_head" not in name:
            continue
        level = max(level, weight.accuracy_level)
        if found is None:
            names, cuts = ["lm_head"], []
        else:
            i, kind = int(found.group(1)), found.group(2)
            if kind == "qkv":
                H, KV, d = geometry(spec, i)
                names, cuts = [f"layers.{i}.{k}_proj" for k in "qkv"], [H * d, (H + KV) * d]
            elif kind == "gate_up":
                names, cuts = [f"layers.{i}.gate_proj", f"layers.{i}.up_proj"], [weight.N // 2]
            else:
                names, cuts = [f"layers.{i}.{kind}_proj"], []
        edges = [0, *(min(c, weight.N) for c in cuts), weight.N]  # np.split's parts: the last takes the rest
        for canonical, start, stop in zip(names, edges[:-1], edges[1:], strict=True):
            shape, columns = (weight.K, stop - start), (start, stop)
            if canonical == "lm_head" and spec.tie_embeddings:  # the recompute's head is the embedding's transpose
                continue
            if shapes.get(canonical) != shape:
                raise SpecError("model", f"MatMulNBits weight {name!r} holds {canonical} as {list(shape)}, the "
                                f"checkpoint's is {list(shapes.get(canonical, ()))}: not the checkpoint the model "
                                "was exported from")  # fmt: skip
            parts[canonical] = (weight, columns)
    return HeldWeights(Initializers(model, folder), parts), level


