"""The ``linear`` component: how a projection's weight is stored, MatMul [+ bias], and its float64 twin.

A weight is held as MatMul reads it, [in, out] (transformers' ``nn.Linear`` keeps [out, in]). ``WeightFormat`` is
the one place that decides how a weight is stored in the graph (``store``) and what values the float64 twin
multiplies by (``read64``): the twin reads the stored values exactly, so the truth judges the graph's arithmetic, not
its storage. A weight is rounded once to a float dtype (fp32 / fp16: a MatMul), or quantized to int4 blocks
(``MatMulNBits``, ONNX Runtime's contrib op): packed by ONNX Runtime's own quantizer function (``pack``: the one
``onnxruntime.quantization``'s MatMulNBits quantizer calls, round to nearest per block), dequantized back to the
float64 values the graph holds by ``dequantize`` (nibbles, scales in the activation dtype, zero points). A tied
embedding is gathered from an int4 head's own bytes (``gather``: GatherBlockQuantized, as onnxruntime-genai's builder
does), its rows read back by ``gathered64`` (the dequantized values rounded once to the dtype, as ORT writes them).
A mixture's expert weights [E, i, o] in int4 are E MatMulNBits weights, one per expert (``store``: MatMulNBits holds a
2-D weight), which ``linear`` runs one by one and stacks, so the mixture's graph reads them as it reads a float
[E, i, o] (``read64``: each expert's weight dequantized alone); ``components.qmoe`` holds them for QMoE instead.

An int4 weight's blocks run along the in features of each out column (``block_size`` rows share a scale and, when
asymmetric, a zero point): columns are quantized independently, so a concatenation of weights along the out axis
(q | k | v, gate | up) holds exactly the values of each weight quantized alone. In features that are not a multiple
of the block size are padded with zeros to a whole block (as ONNX Runtime's quantizer does; ``K`` says how many are
real).

Notation: b batch, s tokens, i in features (K), o out features (N), n_b = ceil(i / block_size) blocks per column.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ropeexport.components import MICROSOFT
from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.numerics import round_once
from ropeexport.specs import require_choice, require_int

if TYPE_CHECKING:
    from ropeexport.graph.onnx_io import GraphBuilder

FLOATS = tuple(DTYPES)  # a weight rounded once to a float dtype (a decoder takes fp32, fp16)
FORMATS = (*FLOATS, "int4")
# MatMulNBits' block sizes: a power of 2 of at least 16 (ONNX Runtime's op), the ones its CPU kernels and
# onnxruntime-genai's builder offer.
BLOCK_SIZES = (16, 32, 64, 128, 256)
DEFAULT_BLOCK_SIZE = 32  # onnxruntime-genai's builder's and ONNX Runtime's quantizer CLI's default
# MatMulNBits' accuracy_level: the least precise arithmetic its kernel may use for the activations. 0: unset (the
# execution provider's default; fp32 on the CPU), 1: fp32, 2: fp16, 3: bf16, 4: int8 (the activations quantized to
# int8 per block before the dot products; onnxruntime-genai's builder's default on the CPU).
ACCURACY_LEVELS = (0, 1, 2, 3, 4)
COMPUTE = {0: "fp32", 1: "fp32", 2: "fp16", 3: "bf16", 4: "int8"}  # what each level may compute the activations in

# The MatMulNBits weights stored in a graph builder: {name ``store`` returned: (its other inputs, the attributes)};
# ``linear`` reads this to emit MatMulNBits instead of MatMul for them. Keyed weakly: a builder's table goes with it.
_NBITS: weakref.WeakKeyDictionary[GraphBuilder, dict[str, tuple[list[str], dict[str, int]]]] = (
    weakref.WeakKeyDictionary()
)
# The int4 expert weights stored in a graph builder: {the name ``store`` returned: each expert's MatMulNBits name}.
_EXPERTS: weakref.WeakKeyDictionary[GraphBuilder, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def is_weight(name: str) -> bool:
    """True for a canonical name the weight format stores (a projection: ``*_proj``, ``lm_head``, the indexer's
    ``wq_b`` and ``wk``); biases, norm scales, the embedding, a mixture's router (``router_proj``, [n, E]: in int4
    its rounding would move the routing itself, at a few kB a layer) and the indexer's ``weights_proj`` [n, H] (as
    the router: it weighs the scores that select the keys) are held in the activation dtype.
    """  # noqa: D205
    last = name.rpartition(".")[2]
    if name.startswith("indexer.") or ".indexer." in name:  # DeepSeek Sparse Attention's indexer: its query and key
        return last in ("wq_b", "wk")  # projections; weights_proj [n, H] kept, as the router (it moves the selection)
    return (last.endswith("_proj") and last != "router_proj") or name == "lm_head"


@dataclass(frozen=True)
class Packed:
    """An int4 weight as MatMulNBits holds it: ``weight`` uint8 [o, n_b, block_size / 2] (two values a byte, the
    first in the low nibble), ``scales`` [o, n_b] in the activation dtype, ``zero_points`` uint8 [o, ceil(n_b / 2)]
    (two a byte, low nibble first) or None (symmetric: every zero point is 8), ``K`` the real in features (the rest
    of the last block is padding).
    """  # noqa: D205

    weight: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    K: int
    block_size: int

    @property
    def N(self) -> int:  # noqa: N802 (MatMulNBits' attribute name)
        """The out features."""
        return int(self.weight.shape[0])


def joined_columns(parts: Sequence[Packed]) -> Packed:
    """One weight of column slices [i, o_k] packed alone, in order: the bytes ``WeightFormat.pack`` makes of the whole
    (every out feature's blocks, scale and zero point are its own), without the whole weight in float32 at once.
    """  # noqa: D205
    first = parts[0]
    points = [p.zero_points for p in parts if p.zero_points is not None]
    zero_points = np.concatenate(points) if points else None
    return Packed(np.concatenate([p.weight for p in parts]), np.concatenate([p.scales for p in parts]), zero_points,
                  first.K, first.block_size)  # fmt: skip


def _nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    """uint8 [..., m] -> float64 [..., count]: each byte's low nibble, then its high nibble, the first ``count``."""
    both = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return both[..., :count].astype(np.float64)


def dequantize(packed: Packed) -> np.ndarray:
    """float64 [i, o]: (nibble - zero point) x scale of every stored value, exactly, the padding dropped."""
    o, blocks, _ = packed.weight.shape
    q = _nibbles(packed.weight, 2 * packed.weight.shape[2]).reshape(o, blocks, packed.block_size)
    zero = np.full((o, blocks), 8.0) if packed.zero_points is None else _nibbles(packed.zero_points, blocks)
    scales = np.asarray(packed.scales, np.float64).reshape(o, blocks)
    # in place, the same float64 operations: one weight-sized array, not three (Gemma 4 31B's gate | up, 43008 x 5376,
    # is 1.85 GB in float64)
    q -= zero[:, :, None]
    q *= scales[:, :, None]  # [o, n_b, block]
    return q.reshape(o, blocks * packed.block_size)[:, : packed.K].T


def gathered64(packed: Packed) -> np.ndarray:
    """float64 [o, K]: the rows GatherBlockQuantized gathers from ``packed``'s bytes (``gather``), as ONNX Runtime's
    kernel writes them: (nibble - zero point) x scale, exact in float64 (4 bits times a float32 or float16
    significand), rounded once to the scales' dtype (ORT multiplies in float32 and writes that dtype).
    """  # noqa: D205
    return dequantize(packed).T.astype(packed.scales.dtype).astype(np.float64)


@dataclass(frozen=True)
class WeightFormat:
    """How a projection's weight is stored: ``kind`` a float dtype (fp32, fp16, bf16), rounded once from float64, or
    ``int4``: MatMulNBits blocks of ``block_size`` in features, ``symmetric`` (zero point 8) or with a zero point per
    block, its scales in ``dtype`` (the activations' dtype), run at ``accuracy_level`` (``ACCURACY_LEVELS``).
    A float kind's ``dtype`` is the kind itself (given as "" or the same name).
    """  # noqa: D205

    kind: str = "fp32"
    dtype: str = ""
    block_size: int = 0
    accuracy_level: int = 0
    symmetric: bool = True

    def __post_init__(self) -> None:
        require_choice("weight_format", self.kind, FORMATS)
        if self.kind != "int4":
            if self.dtype not in ("", self.kind):
                raise SpecError("weight_format", f"{self.kind} weights are held in {self.kind}, not {self.dtype!r}")
            object.__setattr__(self, "dtype", self.kind)
            for field, value, plain in (("block_size", self.block_size, 0), ("accuracy_level", self.accuracy_level,
                                        0), ("symmetric", self.symmetric, True)):  # fmt: skip
                if value != plain:
                    raise SpecError(field, f"is an int4 setting; {self.kind} weights take none (give weight_format "
                                    "int4)")  # fmt: skip
            return
        require_choice("dtype", self.dtype, ("fp32", "fp16"))  # ONNX Runtime's MatMulNBits: float or float16 A
        block = require_int("block_size", self.block_size or DEFAULT_BLOCK_SIZE, 1)
        if block not in BLOCK_SIZES:
            raise SpecError("block_size", f"must be one of {', '.join(map(str, BLOCK_SIZES))} (MatMulNBits: a power "
                            f"of 2, at least 16); got {block}")  # fmt: skip
        object.__setattr__(self, "block_size", block)
        level = require_int("accuracy_level", self.accuracy_level, 0, 4)
        object.__setattr__(self, "accuracy_level", level)
        if not isinstance(self.symmetric, bool):
            raise SpecError("symmetric", f"must be true or false, got {self.symmetric!r}")

    @classmethod
    def int4(cls, dtype: str = "fp32", block_size: int = DEFAULT_BLOCK_SIZE, accuracy_level: int = 0,
             symmetric: bool = True) -> WeightFormat:  # fmt: skip
        """An int4 format (class doc)."""
        return cls("int4", dtype, block_size, accuracy_level, symmetric)

    @property
    def quantized(self) -> bool:
        """True for int4: the stored values are not the weight rounded to a float dtype."""
        return self.kind == "int4"

    def describe(self) -> str:
        """For example ``fp32`` or ``int4 (MatMulNBits, block 32, symmetric, accuracy level 0: fp32), fp32 scales``."""
        if not self.quantized:
            return self.kind
        zero = "symmetric" if self.symmetric else "asymmetric (a zero point per block)"
        return (f"int4 (MatMulNBits, block {self.block_size}, {zero}, accuracy level {self.accuracy_level}: "
                f"{COMPUTE[self.accuracy_level]}), {self.dtype} scales")  # fmt: skip

    def store(self, g: GraphBuilder, name: str, weight: np.ndarray | Packed) -> str:
        """weight [i, o] added to ``g`` as the graph holds it; the name ``linear`` reads. In int4, experts' weights
        [E, i, o] are stored as E weights ``{name}.{e}`` (module doc), and a weight may come packed already
        (``joined_columns``).
        """  # noqa: D205
        if isinstance(weight, Packed):
            if not self.quantized:
                raise ValueError(f"{self.kind} weights are not packed: WeightFormat.stored")
            packed = weight
        elif not self.quantized:
            return g.const(name, self.stored(weight))
        elif weight.ndim == 3:
            _EXPERTS.setdefault(g, {})[name] = [self.store(g, f"{name}.{e}", weight[e]) for e in range(len(weight))]
            return name
        else:
            packed = self.pack(weight)
        stored = g.const(f"{name}_Q4", packed.weight)  # the names ONNX Runtime's quantizer gives them
        inputs = [g.const(f"{name}_scales", packed.scales)]
        if packed.zero_points is not None:
            inputs.append(g.const(f"{name}_zero_points", packed.zero_points))
        attributes = {"K": packed.K, "N": packed.N, "bits": 4, "block_size": self.block_size}
        if self.accuracy_level:  # left out at 0, as ONNX Runtime's quantizer does (unset: the provider's default)
            attributes["accuracy_level"] = self.accuracy_level
        _NBITS.setdefault(g, {})[stored] = (inputs, attributes)
        return stored

    def stored(self, weight: np.ndarray) -> np.ndarray:
        """A float kind's stored values: rounded once to its dtype (one rounding: a float32 detour would be a second).
        int4: ``pack``.
        """  # noqa: D205
        if self.quantized:
            raise ValueError("an int4 weight is stored packed: WeightFormat.pack")
        return round_once(weight, self.kind)

    def pack(self, weight: np.ndarray) -> Packed:
        """weight [i, o] (float64) as MatMulNBits holds it: rounded once to ``dtype`` (what a model of that dtype
        holds before quantization), then quantized by ONNX Runtime's own per-weight function (``quantize_matmul_4bits``,
        what its MatMulNBits quantizer calls), the in features padded with zeros to whole blocks as that quantizer
        pads them.
        """  # noqa: D205
        if not self.quantized:
            raise ValueError(f"{self.kind} weights are not packed: WeightFormat.stored")
        try:
            from onnxruntime.capi._pybind_state import quantize_matmul_4bits
        except ImportError:
            raise RuntimeUnavailable("int4 weights are packed by ONNX Runtime's quantizer: pip install "
                                     "'ropeexport[cpu]'") from None  # fmt: skip
        values = np.asarray(round_once(weight, self.dtype))
        K, N = values.shape
        block = self.block_size
        blocks = -(-K // block)
        if K % block == 0:  # no padding: the values as they are, in the row-major layout the quantizer reads
            padded = _row_major(values)
        else:
            padded = np.zeros((blocks * block, N), values.dtype)
            padded[:K] = values
        packed = np.zeros((N, blocks, block // 2), np.uint8)
        scales = np.zeros((N, blocks), values.dtype)
        zero_points = np.zeros((N, (blocks + 1) // 2), np.uint8)
        quantize_matmul_4bits(packed, padded, scales, zero_points, block, N, K, self.symmetric)
        return Packed(packed, scales, None if self.symmetric else zero_points, K, block)

    def read64(self, weight: np.ndarray) -> np.ndarray:
        """float64 [i, o]: the stored values, exactly (every fp32 / fp16 value is a float64; int4: ``dequantize``);
        experts' [E, i, o] in int4: each expert's weight dequantized alone, as ``store`` packs it.
        """  # noqa: D205
        if self.quantized and weight.ndim == 3:
            return np.stack([self.read64(expert) for expert in weight])
        if self.quantized:
            return dequantize(self.pack(weight))
        return self.stored(weight).astype(np.float64)

    def rows64(self, weight: np.ndarray) -> np.ndarray:
        """float64 [o, i]: the rows ``gather`` reads from weight [i, o] as stored (int4: ``gathered64``)."""
        if self.quantized:
            return gathered64(self.pack(weight))
        return self.stored(weight).T.astype(np.float64)


def _row_major(values: np.ndarray) -> np.ndarray:
    """``values`` [i, o] C-contiguous. A checkpoint's weight arrives as the transpose of its [o, i] tensor: torch's
    blocked transpose copies it about 5x faster than numpy's strided one (0.12 s against 0.66 s for one 4096 x 14336
    weight), the bulk of an int4 export's time before.
    """  # noqa: D205
    if values.flags.c_contiguous:
        return values
    if values.T.flags.c_contiguous:
        try:
            import torch
        except ImportError:  # numpy's copy: slower, the same values
            return np.ascontiguousarray(values)
        return torch.from_numpy(values.T).t().contiguous().numpy()
    return np.ascontiguousarray(values)


def linear(g: GraphBuilder, x: str, weight: str, bias: str | None = None, name: str | None = None) -> str:
    """x [b, s, i] @ weight [i, o] (+ bias [o]) -> [b, s, o]; ``weight`` as ``WeightFormat.store`` returned it
    (an int4 weight: one MatMulNBits, the model importing ``com.microsoft``).

    ``name``: the result's value name (the last node's), for a graph output. Experts' int4 weights (``store``):
    x [1 or E, T, i] -> [E, T, o], expert e's MatMulNBits on x[e] (x broadcast to E first, a copy of 1 / o of the
    products' work), stacked, + bias [E, 1, o].
    """  # noqa: D205
    experts = _EXPERTS.get(g, {}).get(weight)
    if experts is not None:
        count = g.const(f"{weight}_experts", np.array([len(experts), 1, 1], np.int64))
        each = g.const(f"{weight}_each", np.ones(len(experts), np.int64))
        parts = g.op("Split", [g.op("Expand", [x, count]), each], n_out=len(experts), axis=0)  # E x [1, T, i]
        parts = [parts] if isinstance(parts, str) else parts
        product = g.op("Concat", [linear(g, part, e) for part, e in zip(parts, experts, strict=True)], axis=0,
                       name=None if bias else name)  # fmt: skip
        return product if bias is None else g.op("Add", [product, bias], name=name)
    nbits = _NBITS.get(g, {}).get(weight)
    if nbits is not None:
        inputs, attributes = nbits
        product = g.op("MatMulNBits", [x, weight, *inputs], name=None if bias else name, domain=MICROSOFT,
                       **attributes)  # fmt: skip
        return product if bias is None else g.op("Add", [product, bias], name=name)
    if bias is None:
        return g.op("MatMul", [x, weight], name=name)
    return g.op("Add", [g.op("MatMul", [x, weight]), bias], name=name)


def gather(g: GraphBuilder, weight: str, ids: str) -> str:
    """ids [b, s] -> [b, s, i]: rows of the transpose of the int4 ``weight`` [i, o] (``WeightFormat.store``'s name,
    MatMulNBits' bytes [o, n_b, block_size / 2]) gathered by com.microsoft GatherBlockQuantized from those very bytes
    reshaped to [o, n_b x block_size / 2] with the same scales and zero points (ORT 1.31 reads MatMulNBits' layout
    bit for bit; onnxruntime-genai's builder's tied embedding), the padding of the last block sliced off. The float64
    twin: ``gathered64``.
    """  # noqa: D205
    inputs, attributes = _NBITS[g][weight]
    K, N, block = attributes["K"], attributes["N"], attributes["block_size"]
    blocks = -(-K // block)
    table = g.op("Reshape", [weight, g.const(f"{weight}_rows", np.array([N, blocks * block // 2], np.int64))])
    rows = g.op("GatherBlockQuantized", [table, ids, *inputs], domain=MICROSOFT, bits=4, block_size=block,
                gather_axis=0, quantize_axis=1)  # fmt: skip
    if blocks * block == K:
        return rows
    ends = [g.const(f"{weight}_rows_{n}", np.array([v], np.int64)) for n, v in (("start", 0), ("end", K), ("axis", -1))]
    return g.op("Slice", [rows, *ends])


def linear64(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """float64 x [b, s, i] @ weight [i, o] (+ bias [o]); ``weight`` as ``WeightFormat.read64`` returned it."""
    return x @ weight + (bias if bias is not None else 0.0)
