"""The projections a foreign model holds as 4-bit ``MatMulNBits``, and the embedding it holds as a 4-bit
``GatherBlockQuantized`` table, read as the float64 values it computes with.

``audit.prove`` takes them from the model itself where it can (onnxruntime-genai's ``-p int4``, ropeexport's
``weight_format="int4"``): the model is judged on its own terms, not by its int4 rounding against the checkpoint.
Their layer and projection come from their names; each is dequantized exactly (``components.linear.dequantize``)
when asked for, from the model's initializers read one at a time (``graph.initializers.Initializers``): a model's
weights are never held whole. One home for the proof (``audits.prove``) and a decoder's verification
(``decoder.kind``), below both.

The embedding: the builder's int4 model of a checkpoint with tied embeddings (``shared_embeddings``, its default for
``tie_word_embeddings``) gathers its token rows from the LM head's own packed weight, reshaped to [vocab, bytes]
(``com.microsoft.GatherBlockQuantized``, ORT's contrib op: uint8 data two values a byte, low nibble first, blocks
along the last axis, scales [vocab, blocks], zero points packed like the data or 8 by default); the recompute takes
its rows from that table (and, tied, its head is that table's transpose), each value (nibble - zero point) x scale
rounded once to the scales' dtype, as ORT's kernel writes it (``components.linear.gathered64``). ropeexport's own int4
decoders with tied embeddings gather theirs the same way (``DecoderSpec.tied_embedding_int4``).
"""  # noqa: D205

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.decoder.parts import head_name
from ropeexport.decoder.weights import expected, geometry
from ropeexport.errors import SpecError
from ropeexport.graph.initializers import Initializers

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


@dataclass(frozen=True)
class BlockTable:
    """A 4-bit ``GatherBlockQuantized`` table as the model holds it (module doc): its initializers (uint8 data
    [rows, width / 2] as stored, or reshaped from the LM head's [rows, blocks, block_size / 2]; scales [rows, blocks];
    zero points [rows, ceil(blocks / 2)] or ""), ``width`` the values a row holds (padded to whole blocks by the
    builder), ``columns`` those the model keeps (the hidden size: the builder slices the padding off).
    """  # noqa: D205

    data: str
    scales: str
    zero_points: str
    rows: int
    width: int
    columns: int
    block_size: int

    def read(self, tensors: Mapping[str, np.ndarray], start: int, stop: int) -> np.ndarray:
        """float64 [stop - start, columns]: rows start .. stop - 1 as ORT's kernel gives them (module doc)."""
        from ropeexport.components.linear import Packed, gathered64

        blocks = -(-self.width // self.block_size)
        data = tensors[self.data].reshape(self.rows, -1)[start:stop]
        whole = blocks * self.block_size // 2  # a row's bytes in whole blocks: the kernel's last block may be short
        data = np.pad(data, ((0, 0), (0, whole - data.shape[1]))).reshape(-1, blocks, self.block_size // 2)
        scales = tensors[self.scales].reshape(self.rows, blocks)[start:stop]
        zero = tensors[self.zero_points].reshape(self.rows, -1)[start:stop] if self.zero_points else None
        return gathered64(Packed(data, scales, zero, self.columns, self.block_size))  # as ORT's kernel writes them


_UINT8 = 2  # onnx.TensorProto.UINT8: the builder's packed data (int4 / uint4 data types are another layout)


def block_tables(model: Any) -> dict[str, BlockTable]:
    """{"embed": BlockTable} of ``model``'s ``com.microsoft.GatherBlockQuantized`` node gathering rows by
    ``input_ids`` (the embedding; ``model`` an ``onnx.ModelProto``, nothing read) whose data (an initializer, or a
    ``Reshape`` of one), scales and zero points are initializers; {} when it has none. SpecError for a table the
    proof cannot read (not uint8 data of 4-bit values gathered along rows and blocked along the last axis).
    """  # noqa: D205
    held = {t.name: t for t in model.graph.initializer}
    made = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for node in model.graph.node:
        if node.op_type != "GatherBlockQuantized" or node.domain != "com.microsoft" or node.input[1] != "input_ids":
            continue
        attributes = {a.name: a.i for a in node.attribute}
        inputs = list(node.input) + [""] * 4
        data, rank = inputs[0], None
        if data not in held and data in made and made[data].op_type == "Reshape":
            reshape = made[data]  # the builder's tied table: the LM head's packed weight, rows unchanged
            data, rank = reshape.input[0], _length(reshape.input[1], held, made)
        if data not in held or inputs[2] not in held or (inputs[3] and inputs[3] not in held):
            continue  # a table computed in the graph: the checkpoint's embedding stands
        tensor, bits = held[data], attributes.get("bits", 4)
        rank = len(tensor.dims) if rank is None else rank  # the rank of the data the node is fed
        axes = (attributes.get("gather_axis", 0), attributes.get("quantize_axis", 1))
        if tensor.data_type != _UINT8 or bits != 4 or rank != 2 or axes[0] != 0 or axes[1] not in (1, -1):
            raise SpecError("model", f"GatherBlockQuantized {node.name!r} holds its table as "
                            f"{onnx_type(tensor.data_type)} of {bits} bits, {rank} axes, gathered along axis "
                            f"{axes[0]} and quantized along axis {axes[1]}: the decoder proof reads uint8 [rows, "
                            "bytes] of 4-bit values gathered along axis 0 and quantized along axis 1")  # fmt: skip
        rows, width, block = int(tensor.dims[0]), 2 * int(np.prod(tensor.dims[1:])), attributes.get("block_size", 128)
        scales = list(held[inputs[2]].dims)
        if block < 16 or block & (block - 1) or int(np.prod(scales)) != rows * -(-width // block):
            raise SpecError("model", f"GatherBlockQuantized {node.name!r} has scales {scales} for {rows} rows of "
                            f"{width} values in blocks of {block}: not a table ONNX Runtime runs")  # fmt: skip
        out["embed"] = BlockTable(data, inputs[2], inputs[3], rows, width, width, block)
    return out


def _length(name: str, held: Mapping[str, Any], made: Mapping[str, Any]) -> int | None:
    """The element count of the 1-D tensor ``name`` (a Reshape's shape: the rank it makes), from its initializer's or
    its Constant's dims (nothing read); None when it is computed.
    """  # noqa: D205
    if name in held and len(held[name].dims) == 1:
        return int(held[name].dims[0])
    node = made.get(name)
    if node is not None and node.op_type == "Constant":
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        if value is not None and len(value.dims) == 1:
            return int(value.dims[0])
    return None


def onnx_type(code: int) -> str:
    """An onnx element type's name, lower case (``uint8``)."""
    import onnx

    return str(onnx.TensorProto.DataType.Name(code)).lower()


class HeldWeights(Mapping[str, np.ndarray]):
    """The projections a model holds as 4-bit MatMulNBits by the decoder's canonical names, and its embedding where it
    holds a 4-bit table (``tables``), each dequantized from the model's initializers when asked for
    (``held_weights``); a fused weight's part read alone (its columns), a table's packed tensors once read
    (1/16 of its float64 values: the recompute reads it a few rows, or a slice of the tied head, at a time).
    """  # noqa: D205

    def __init__(self, tensors: Mapping[str, np.ndarray], parts: dict[str, tuple[NBits, tuple[int, int]]],
                 tables: dict[str, BlockTable] | None = None) -> None:  # fmt: skip
        self._tensors, self._parts, self.tables = tensors, parts, tables or {}
        self._packed: dict[str, np.ndarray] = {}  # a table's packed tensors: 1/16 of its float64 values

    @property
    def projections(self) -> int:
        """How many projections the model holds as MatMulNBits (the tables left out)."""
        return len(self._parts)

    def _table(self, name: str, start: int, stop: int) -> np.ndarray:
        table = self.tables[name]
        for key in (table.data, table.scales, table.zero_points):
            if key and key not in self._packed:
                self._packed[key] = self._tensors[key]
        return table.read(self._packed, start, stop)

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self.tables:
            return self._table(name, 0, self.tables[name].rows)
        weight, (start, stop) = self._parts[name]
        if (start, stop) == (0, weight.N):
            return weight.read(self._tensors)
        # a fused weight's part read alone (its out features): the whole one kept for its other parts held Gemma 4
        # 31B's gate | up, 1.8 GB of float64, from one layer's MLP through the next layer's attention
        return weight.read(self._tensors, (start, stop))

    def __contains__(self, name: object) -> bool:
        # Mapping's own asks __getitem__, which dequantizes the whole weight: twice a read, through Stored64
        return name in self._parts or name in self.tables

    def __iter__(self) -> Iterator[str]:
        return iter([*self._parts, *self.tables])

    def __len__(self) -> int:
        return len(self._parts) + len(self.tables)

    def vocab_part(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of ``embed`` [vocab, hidden] or columns of ``lm_head`` [hidden, vocab], dequantized
        alone.
        """  # noqa: D205
        if name in self.tables:
            return self._table(name, start, stop)
        weight, _ = self._parts[name]
        return weight.read(self._tensors, (start, stop))


def held_weights(model: Any, spec: Any, folder: Path | None = None) -> tuple[HeldWeights, int]:
    """The projections ``model`` (an ``onnx.ModelProto``; ``folder``: where its external data lies) holds as 4-bit
    MatMulNBits, by the decoder's canonical names (``layers.3.q_proj``, ``lm_head``; a fused q | k | v or gate | up
    split by the spec's widths), read as float64 [in, out] when asked for (``HeldWeights``), with ``embed`` [vocab,
    hidden] where it gathers its embedding from a 4-bit table (``block_tables``), and the highest accuracy level among
    the MatMulNBits (0 when there are none). SpecError when one's shape is not the checkpoint's (told from the
    attributes and the initializers' shapes: nothing is read).
    """  # noqa: D205
    shapes = expected(spec)
    if head_name(spec) == "lm_head":  # a tied head stored in int4: the embedding's transpose, a projection of its own
        shapes.setdefault("lm_head", (spec.hidden_size, spec.vocab_size))
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
                kept = "qk" if spec.layers[i].attention.k_eq_v else "qkv"  # keys as values (Gemma 4): no v_proj
                names, cuts = [f"layers.{i}.{k}_proj" for k in kept], [H * d, (H + KV) * d][: len(kept) - 1]
            elif kind == "gate_up":
                names, cuts = [f"layers.{i}.gate_proj", f"layers.{i}.up_proj"], [weight.N // 2]
            else:
                names, cuts = [f"layers.{i}.{kind}_proj"], []
        edges = [0, *(min(c, weight.N) for c in cuts), weight.N]  # np.split's parts: the last takes the rest
        for canonical, start, stop in zip(names, edges[:-1], edges[1:], strict=True):
            shape, columns = (weight.K, stop - start), (start, stop)
            if canonical == "lm_head" and head_name(spec) == "embed":  # the recompute's head: the embedding's transpose
                continue
            if shapes.get(canonical) != shape:
                raise SpecError("model", f"MatMulNBits weight {name!r} holds {canonical} as {list(shape)}, the "
                                f"checkpoint's is {list(shapes.get(canonical, ()))}: not the checkpoint the model "
                                "was exported from")  # fmt: skip
            parts[canonical] = (weight, columns)
    tables = {}
    for canonical, table in block_tables(model).items():
        if table.rows != spec.vocab_size or table.width < spec.hidden_size:
            raise SpecError("model", f"GatherBlockQuantized table {table.data!r} holds {table.rows} rows of "
                            f"{table.width} values, the checkpoint's embedding is [{spec.vocab_size}, "
                            f"{spec.hidden_size}]: not the checkpoint the model was exported from")  # fmt: skip
        tables[canonical] = replace(table, columns=spec.hidden_size)  # the padding past the hidden size sliced off
    return HeldWeights(Initializers(model, folder), parts, tables), level


