"""The copy roofline every figure is divided by, and ORT's floor: the least any runtime can do for the same bytes.

RoPE, ALiBi and the sinusoidal ``apply`` are memory-bound: the limit is reading their inputs and writing their
outputs once. ``CopyRoofline`` moves exactly those bytes with numpy (copy, fill, stream-read), on one thread and
split over the ORT thread count. ``ort_floor`` is the smallest ORT graph that writes the same outputs (Identity or
ConstantOfShape): ORT's fixed per-call cost plus one pass, which numpy's copy does not pay.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .sessions import ort_entry
from .timing import ROOFLINE, Entry

SCRATCH_BYTES = 256 * 1024  # the read-only roofline streams inputs through a buffer this size: it stays in L2


class CopyRoofline:
    """Move the op's bytes once: copy same-size input -> output, fill outputs, stream-read leftover inputs.

    ``pairs`` [(src, dst)] are copied, ``writes`` filled, ``reads`` read through an L2-sized scratch buffer. With
    ``threads`` > 1 each array is split into that many contiguous parts run on a thread pool (numpy releases the GIL
    while it copies), the way ORT splits a kernel over its intra-op threads.
    """

    def __init__(
        self,
        pairs: list[tuple[np.ndarray, np.ndarray]],
        writes: list[np.ndarray],
        reads: list[np.ndarray],
        threads: int,
        pool: ThreadPoolExecutor | None,
    ) -> None:
        self.threads, self.pool = threads, pool
        self.scratch = [np.empty(SCRATCH_BYTES, np.uint8) for _ in range(threads)]
        flat = lambda a: a.reshape(-1).view(np.uint8)  # noqa: E731  (bytes: a part boundary may fall anywhere)
        self.jobs: list[list[tuple[str, np.ndarray, np.ndarray | None]]] = [[] for _ in range(threads)]
        groups = (("copy", pairs), ("fill", [(w, None) for w in writes]), ("read", [(r, None) for r in reads]))
        for kind, arrays in groups:
            for a, b in arrays:
                src = flat(a)
                dst = None if b is None else flat(b)
                bounds = np.linspace(0, src.size, threads + 1).astype(int)
                for t in range(threads):
                    part = slice(bounds[t], bounds[t + 1])
                    self.jobs[t].append((kind, src[part], None if dst is None else dst[part]))
        self.bytes_read = sum(a.nbytes for a, _ in pairs) + sum(r.nbytes for r in reads)
        self.bytes_written = sum(b.nbytes for _, b in pairs) + sum(w.nbytes for w in writes)

    def _work(self, t: int) -> None:
        scratch = self.scratch[t]
        for kind, a, b in self.jobs[t]:
            if kind == "copy":
                np.copyto(b, a)
            elif kind == "fill":
                a.fill(0)
            else:
                for start in range(0, a.size, SCRATCH_BYTES):
                    part = a[start : start + SCRATCH_BYTES]
                    np.copyto(scratch[: part.size], part)

    def __call__(self) -> None:
        """One pass over every byte."""
        if self.threads == 1 or self.pool is None:
            self._work(0)
        else:
            list(self.pool.map(self._work, range(self.threads)))


def roofline_entries(
    feeds: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]], args: argparse.Namespace
) -> list[Entry]:
    """``copy_1t`` and ``copy_mt`` for these feeds and output shapes (inputs matched to outputs by size)."""
    dsts = {name: np.zeros(shape, dtype) for name, (shape, dtype) in outputs.items()}
    unmatched_in = dict(feeds)
    pairs, writes = [], []
    for dst in dsts.values():
        src = next((k for k, v in unmatched_in.items() if v.nbytes == dst.nbytes), None)
        if src is None:
            writes.append(dst)
        else:
            pairs.append((unmatched_in.pop(src), dst))
    reads = list(unmatched_in.values())
    single = CopyRoofline(pairs, writes, reads, 1, None)
    multi = CopyRoofline(pairs, writes, reads, args.threads, args.pool)
    info = {"bytes_read": single.bytes_read, "bytes_written": single.bytes_written}
    return [
        Entry("copy_1t", "roofline: np.copyto / fill / stream-read, one thread", single, info=info),
        Entry("copy_mt", f"roofline: the same split over {args.threads} threads", multi, info=info),
    ]


ROOFLINE_DOC = {
    "entries": list(ROOFLINE),
    "per_round": "the faster of copy_1t and copy_mt in that round",
    "method": (
        "numpy: inputs with a same-size output are np.copyto'd into it, other outputs are filled, other inputs "
        "are streamed through a 256 KiB scratch buffer (read only); copy_mt splits each array over the ORT thread "
        "count on a thread pool"
    ),
    "why": (
        "numpy moves exactly the op's bytes with no runtime overhead, so it is the memory limit itself; an ORT "
        "Identity graph adds ORT's fixed per-call cost (tens of microseconds), which would hide the difference at "
        "decode sizes. That graph is timed too, as ort_floor, to separate ORT's fixed cost from the kernel's."
    ),
}


def floor_model(feeds: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]]) -> bytes:
    """ORT's floor: each output an Identity of the same-size input, or a ConstantOfShape when none (shape fed)."""
    onnx_type = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16}
    nodes, inputs, inits, unmatched = [], [], [], dict(feeds)
    for name, (shape, dtype) in outputs.items():
        src = next((k for k, v in unmatched.items() if v.nbytes == int(np.prod(shape)) * dtype.itemsize), None)
        if src is not None:
            unmatched.pop(src)
            nodes.append(helper.make_node("Identity", [src], [name]))
        else:
            shape_name = f"{name}_shape"
            inits.append(numpy_helper.from_array(np.array(shape, np.int64), shape_name))
            value = numpy_helper.from_array(np.zeros(1, dtype))
            nodes.append(helper.make_node("ConstantOfShape", [shape_name], [name], value=value))
    used = {i for n in nodes for i in n.input}
    for name, array in feeds.items():
        if name in used:
            inputs.append(helper.make_tensor_value_info(name, onnx_type.get(array.dtype, TensorProto.INT64), None))
    outs = [helper.make_tensor_value_info(n, onnx_type[d], list(s)) for n, (s, d) in outputs.items()]
    graph = helper.make_graph(nodes, "ort_floor", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def floor_feeds(model: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds a floor model reads (it leaves out inputs that no output copies)."""
    used = {i.name for i in onnx.load_from_string(model).graph.input}
    return {k: v for k, v in feeds.items() if k in used}


def floor_entry(
    feeds: dict[str, np.ndarray], outputs: dict[str, tuple[tuple[int, ...], np.dtype]], args: argparse.Namespace
) -> Entry:
    """``ort_floor``: the smallest ORT graph that moves the same output bytes (fixed per-call cost + one copy)."""
    model = floor_model(feeds, outputs)
    what = "ORT Identity / ConstantOfShape graph, same options and binding: ORT's fixed cost + one pass"
    return ort_entry("ort_floor", what, model, floor_feeds(model, feeds), args)


def same_shapes(feeds: dict[str, np.ndarray], pairs: dict[str, str]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Output shapes equal to input shapes: {output: (shape, dtype)}."""
    return {out: (feeds[src].shape, feeds[src].dtype) for out, src in pairs.items()}
