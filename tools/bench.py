"""Speed of ropeexport's artifacts in ONNX Runtime against the memory roofline and the paths people use today.

    python tools/bench.py --out tools/figures/bench.json          # every scenario (about 3 minutes on 2 cores)
    python tools/bench.py --tiny --out /tmp/bench.json            # tiny shapes, seconds (what the test runs)
    python tools/bench.py --only rope-prefill-fp32 rope-decode-fp32

RoPE, ALiBi and the sinusoidal ``apply`` are memory-bound: the limit is reading their inputs and writing their
outputs once. So every figure is a ratio to a *copy roofline* measured in the same run on the same bytes:
- every input that has an output of the same size is ``np.copyto``'d into a preallocated array of that size
  (RoPE: query -> query_out, key -> key_out; sinusoidal: x -> y);
- an output with no such input is written with ``fill`` (ALiBi bias: the [1, H, q, k] tensor);
- an input with no such output is streamed through a 256 KiB scratch buffer that stays in L2 (read, not written).
The roofline is timed twice, single-threaded and split over the same thread count ORT gets; a round's roofline is
the faster of the two in that round. numpy rather than an ORT Identity graph because an Identity graph also pays
ORT's fixed per-call cost, which would flatter every ORT figure at decode sizes; the Identity graph is still timed
(``ort_floor``) to show how much of a small call that fixed cost is.

Scenarios (Llama geometry: 32 query heads, 8 key heads, head_dim 128, max_positions 4096):
- ``rope-prefill-{fp32,fp16}``: query [1, 32, 2048, 128], key [1, 8, 2048, 128], positions 0..2047;
- ``rope-decode-{fp32,fp16}``: query [16, 32, 1, 128], key [16, 8, 1, 128], position 3990 + row;
- ``alibi-bias-{fp32,fp16}``: [1, 32, 512, 512] written from positions (32 MiB fp32, like RoPE's 40 MiB);
- ``alibi-scores-fp32``: query and key [1, 32, 512, 128] -> scores [1, 32, 512, 512] (MatMul-bound, for context);
- ``sinusoidal-apply-{fp32,fp16}``: x [1, 2048, 4096] + PE[position_ids] -> y;
- ``*-experiments``: why a target is missed (guard nodes removed, ``session.run`` instead of IO binding, one
  thread, graph optimizations off, fp16 computed in fp32, ALiBi graphs with fewer full-size passes), plus the ORT
  profiler's per-operator time.
Entries per RoPE scenario: ``fused`` / ``decomposed`` (ropeexport artifacts, IO binding into preallocated outputs,
as a server runs them), ``peer`` (``torch.onnx.export`` of ``HFRotary`` below, same session options and binding),
``eager`` and ``torch_compile`` (``HFRotary`` in PyTorch; ropeexport's eager reference recomputes float64 angles
per call and is a correctness oracle, not a serving path).

Timing: every entry gets warm-up calls, then ``--rounds`` rounds; in each round every entry runs a block of
``--repeats`` calls, and more until ``--min-block-ms`` has passed (order reversed every other round, A B C C B A
...), and the block's median is that round's figure. Ratios are the median over rounds of (entry / roofline of the
same round), so drift of a shared, noisy machine cancels; ``ratio_iqr`` gives the quartiles of those per-round
ratios. Each round also records the CPU time other processes took (``/proc/stat`` minus this process): figures use
only the rounds where others took under 10% of the machine when at least 5 rounds were that quiet, else every round
(``scenario_meta[...].basis`` says which). Absolute medians are over every call of those rounds. ORT threads do not
spin (intra and inter op) and PyTorch's OpenMP threads wait passively, so no entry steals a core from the next.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import io
import json
import logging
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# PyTorch's OpenMP threads spin after each parallel region by default: they would steal the cores of whichever entry
# runs next (ORT, the roofline). Set before torch loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from torch import nn  # noqa: E402

from ropeexport.encodings.alibi import alibi_bias  # noqa: E402
from ropeexport.encodings.attention import scores_with_bias  # noqa: E402
from ropeexport.encodings.sinusoidal import SinusoidalEmbedding  # noqa: E402
from ropeexport.export.alibi import alibi_bias_nodes  # noqa: E402
from ropeexport.export.attention import build_bias_graph  # noqa: E402
from ropeexport.registry import kind_for  # noqa: E402
from ropeexport.spec import spec_from_dict  # noqa: E402

NP_DTYPES = {"fp32": np.float32, "fp16": np.float16}
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
ROOFLINE = ("copy_1t", "copy_mt")
QUIET = 0.10  # a round is quiet when other processes took under 10% of the machine's CPU time during it
MIN_QUIET = 5  # fewer quiet rounds than this: figures fall back to every round
SCRATCH_BYTES = 256 * 1024  # the read-only roofline streams inputs through a buffer this size: it stays in L2

# Shapes. Tiny ones keep every code path but run in milliseconds (the test).
FULL = {
    "max_positions": 4096,
    "theta": 10000.0,
    "rope": {"heads": 32, "kv_heads": 8, "head_dim": 128},
    "prefill": {"batch": 1, "seq": 2048, "first": 0},
    "decode": {"batch": 16, "seq": 1, "first": 3990},  # row b sits at position 3990 + b: near 4000, inside 4096
    "alibi": {"batch": 1, "heads": 32, "q": 512, "k": 512, "head_dim": 128},
    "sinusoidal": {"batch": 1, "seq": 2048, "d_model": 4096},
}
TINY = {
    "max_positions": 64,
    "theta": 10000.0,
    "rope": {"heads": 4, "kv_heads": 2, "head_dim": 16},
    "prefill": {"batch": 1, "seq": 16, "first": 0},
    "decode": {"batch": 2, "seq": 1, "first": 50},
    "alibi": {"batch": 1, "heads": 4, "q": 16, "k": 16, "head_dim": 16},
    "sinusoidal": {"batch": 1, "seq": 16, "d_model": 32},
}
SCENARIOS = (
    "rope-prefill-fp32",
    "rope-prefill-fp16",
    "rope-decode-fp32",
    "rope-decode-fp16",
    "alibi-bias-fp32",
    "alibi-bias-fp16",
    "alibi-scores-fp32",
    "sinusoidal-apply-fp32",
    "sinusoidal-apply-fp16",
    "rope-prefill-fp32-experiments",
    "rope-decode-fp32-experiments",
    "rope-prefill-fp16-experiments",
    "alibi-bias-fp32-experiments",
    "alibi-bias-fp16-experiments",
)


# --------------------------------------------------------------------------------------------------------------------
# The peer module: what a Hugging Face Llama-style model does, written here so that transformers is not needed.


class HFRotary(nn.Module):
    """Hugging Face-style RoPE (``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, transformers 4.3x).

    ``forward(q, k, position_ids) -> (q_out, k_out)``: q [b, heads, s, d], k [b, kv_heads, s, d], position_ids int64
    [b, s]. As HF does: ``inv_freq`` = 1 / theta^(2i/d) in float32, the cos/sin cache [max_positions, d] built once in
    the module from ``torch.outer(t, inv_freq)`` duplicated to full width with ``cat``, cast to the input dtype per
    call, indexed by ``position_ids`` and rotated with ``rotate_half``.
    """

    cos_cached: torch.Tensor  # [max_positions, d] float32
    sin_cached: torch.Tensor

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # [P, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, d]
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        """[x1, x2] -> [-x2, x1] over the last axis."""
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Rotate q and k by their positions (shapes in the class docstring)."""
        cos = self.cos_cached.to(q.dtype)[position_ids].unsqueeze(1)  # [b, 1, s, d]
        sin = self.sin_cached.to(q.dtype)[position_ids].unsqueeze(1)
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


# --------------------------------------------------------------------------------------------------------------------
# Timing.


@dataclass
class Entry:
    """One contender of a scenario: ``fn()`` does one call; ``error`` instead when it could not be built or run."""

    name: str
    what: str
    fn: Callable[[], Any] | None = None
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    outputs: Callable[[], list[np.ndarray]] | None = None  # the last call's outputs, for the sanity check


def failed(name: str, what: str, exc: BaseException, **info: Any) -> Entry:
    """An entry that records why it has no time (first line of the exception)."""
    message = (str(exc).strip().splitlines() or [""])[0][:400]
    return Entry(name, what, error=f"{type(exc).__name__}: {message}", info=info)


def block(fn: Callable[[], Any], repeats: int, min_s: float) -> list[float]:
    """Seconds of each call (each timed alone): at least ``repeats`` calls, and more until ``min_s`` has passed.

    The time floor keeps a round of microsecond calls long enough for ``cpu_others`` to see who else ran.
    """
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - begin < min_s and len(times) < 100_000):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def cpu_snapshot() -> tuple[float, float, float] | None:
    """(all CPUs' seconds, their busy seconds, this process's CPU seconds) now; None without /proc/stat."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:8]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    total = sum(fields) / hz
    busy = total - (fields[3] + fields[4]) / hz  # minus idle and iowait
    own = os.times()
    return total, busy, own.user + own.system  # every thread of this process: ORT's, torch's, the roofline's


def cpu_others(before: tuple | None, after: tuple | None) -> float | None:
    """Share of the machine's CPU time that other processes used between two snapshots."""
    if before is None or after is None or after[0] - before[0] <= 0:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, others / (after[0] - before[0]))


def measure(entries: list[Entry], roofline: tuple[str, ...], args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, time alternating blocks, and return per-entry figures relative to the per-round roofline.

    Each round also records how much CPU other processes took. Figures are taken over the *quiet* rounds (others
    under ``QUIET`` of the machine) when there are at least ``MIN_QUIET`` of them, else over every round; the
    basis is recorded (``_basis``), and the all-rounds ratio is kept beside it.
    """
    live = []
    for e in entries:
        if e.fn is None:
            continue
        try:
            for _ in range(args.warmup):
                e.fn()
            live.append(e)
        except Exception as exc:  # a runtime failure is a result too
            e.error, e.fn = failed(e.name, e.what, exc).error, None
    rounds: dict[str, list[float]] = {e.name: [] for e in live}
    samples: dict[str, list[list[float]]] = {e.name: [] for e in live}
    others: list[float | None] = []
    for r in range(args.rounds):
        before = cpu_snapshot()
        for e in live if r % 2 == 0 else live[::-1]:  # A B C, then C B A: drift hits every entry alike
            times = block(e.fn, args.repeats, args.min_block_s)
            samples[e.name].append(times)
            rounds[e.name].append(statistics.median(times))
        others.append(cpu_others(before, cpu_snapshot()))
    quiet = [r for r, o in enumerate(others) if o is not None and o < QUIET]
    basis = quiet if len(quiet) >= MIN_QUIET else list(range(args.rounds))
    present = [n for n in roofline if n in rounds]
    roof = [min(rounds[n][r] for n in present) for r in range(args.rounds)] if present else None
    out: dict[str, Any] = {}
    for e in entries:
        item: dict[str, Any] = {"what": e.what, **e.info}
        if e.name not in rounds:
            item["error"] = e.error or "not run"
            out[e.name] = item
            continue
        item["median_us"] = round(statistics.median(t for r in basis for t in samples[e.name][r]) * 1e6, 2)
        item["calls"] = sum(len(samples[e.name][r]) for r in range(args.rounds))
        item["round_medians_us"] = [round(t * 1e6, 2) for t in rounds[e.name]]
        if roof:
            ratios = [t / rt for t, rt in zip(rounds[e.name], roof, strict=True)]
            chosen = [ratios[r] for r in basis]
            item["ratio"] = round(statistics.median(chosen), 4)
            item["ratio_range"] = [round(min(chosen), 4), round(max(chosen), 4)]
            item["ratio_iqr"] = iqr(chosen)
            item["ratio_all_rounds"] = round(statistics.median(ratios), 4)
        out[e.name] = item
    if roof:
        out["_roofline_round_us"] = [round(t * 1e6, 2) for t in roof]
    out["_others_cpu_by_round"] = [None if o is None else round(o, 3) for o in others]
    out["_basis"] = {
        "rounds": "quiet" if basis == quiet else "all",
        "used": len(basis),
        "of": args.rounds,
        "quiet_threshold": QUIET,
    }
    out["_rounds"] = {name: [rounds[name][r] for r in basis] for name in rounds}  # for paired(); not written
    return out


def iqr(values: list[float]) -> list[float]:
    """[first quartile, third quartile]: how far the per-round figures spread around their median."""
    if len(values) < 2:
        return [round(values[0], 4)] * 2
    q = statistics.quantiles(values, n=4, method="inclusive")
    return [round(q[0], 4), round(q[2], 4)]


def paired_iqr(result: dict[str, Any], a: str, b: str) -> list[float] | None:
    """The interquartile range of the per-round ratios behind ``paired``."""
    rounds = result["_rounds"]
    if a not in rounds or b not in rounds:
        return None
    return iqr([x / y for x, y in zip(rounds[a], rounds[b], strict=True)])


def paired(result: dict[str, Any], a: str, b: str) -> float | None:
    """Median over the basis rounds of time(a) / time(b): timed in the same rounds, so shared drift cancels."""
    rounds = result["_rounds"]
    if a not in rounds or b not in rounds:
        return None
    return round(statistics.median(x / y for x, y in zip(rounds[a], rounds[b], strict=True)), 4)


# --------------------------------------------------------------------------------------------------------------------
# Rooflines.


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


# --------------------------------------------------------------------------------------------------------------------
# ONNX Runtime.


def session_options(args: argparse.Namespace, **changes: Any) -> ort.SessionOptions:
    """The options every compared session shares; ``changes``: threads, opt_level, profile_prefix."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = changes.get("threads", args.threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = changes.get("opt_level", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    # Spinning threads would keep a core busy after the call and slow whichever entry runs next.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.log_severity_level = 3
    if changes.get("profile_prefix"):
        so.enable_profiling = True
        so.profile_file_prefix = changes["profile_prefix"]
    return so


class OrtCall:
    """A session bound once to its feeds and to preallocated outputs: ``__call__`` is ``run_with_iobinding``.

    Inputs are wrapped without a copy (``OrtValue.ortvalue_from_numpy``); outputs are numpy arrays ORT writes into,
    as a server with a KV cache or a preallocated activation buffer would. ``binding=False`` calls
    ``session.run(None, feeds)`` instead, letting ORT allocate the outputs each call.
    """

    def __init__(self, model: bytes, feeds: dict[str, np.ndarray], so: ort.SessionOptions, binding: bool = True):
        self.session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in self.session.get_inputs()]
        # Exporters may rename inputs: match by position when the names differ.
        self.feeds = feeds if set(names) == set(feeds) else dict(zip(names, feeds.values(), strict=True))
        first = self.session.run(None, self.feeds)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.out = [np.empty_like(a) for a in first]
        self.binding = binding
        self.io = self.session.io_binding()
        self._keep = []  # OrtValues reference the numpy memory: keep them alive with the binding
        for name, array in self.feeds.items():
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self._keep.append(value)
            self.io.bind_ortvalue_input(name, value)
        for name, array in zip(self.output_names, self.out, strict=True):
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self._keep.append(value)
            self.io.bind_ortvalue_output(name, value)
        self.last: list[np.ndarray] = self.out

    def __call__(self) -> None:
        """One run."""
        if self.binding:
            self.session.run_with_iobinding(self.io)
        else:
            self.last = self.session.run(None, self.feeds)

    def outputs(self) -> list[np.ndarray]:
        """The last run's outputs."""
        return self.out if self.binding else self.last


def ort_entry(
    name: str, what: str, model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], args: argparse.Namespace, **kw
) -> Entry:
    """An ``OrtCall`` as an entry (``kw``: binding, threads, opt_level); build errors are recorded, not raised."""
    binding = kw.pop("binding", True)
    info = kw.pop("info", {})
    try:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        call = OrtCall(data, feeds, session_options(args, **kw), binding=binding)
    except Exception as exc:
        return failed(name, what, exc, **info)
    return Entry(name, what, call, info=info, outputs=call.outputs)


def initializer_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer (the tables an artifact stores)."""
    return int(sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer))


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


# --------------------------------------------------------------------------------------------------------------------
# Graph surgery for the experiments (never shipped: each variant is checked against the shipped output).


def prune(model: onnx.ModelProto) -> onnx.ModelProto:
    """Drop nodes and initializers nothing downstream of the graph outputs uses."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    return model


def without_guards(model: onnx.ModelProto) -> onnx.ModelProto:
    """The fused RoPE graph with its range guard removed: RotaryEmbedding reads ``position_ids`` directly."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        if node.op_type == "RotaryEmbedding" and len(node.input) == 4:
            node.input[3] = "position_ids"
    return prune(model)


def without_boundary_guards(model: onnx.ModelProto) -> onnx.ModelProto:
    """The artifact without its boundary range guards (``export.guard``): every node reads the raw position inputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name.endswith("__checked"):
                node.input[i] = name.removesuffix("__checked")
    return prune(model)


def bypass(model: onnx.ModelProto, op_type: str) -> onnx.ModelProto:
    """Remove every ``op_type`` node, wiring its consumers to its first input (for ops that only copy or expand)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for node in [n for n in model.graph.node if n.op_type == op_type]:
        for other in model.graph.node:
            for i, name in enumerate(other.input):
                if name == node.output[0]:
                    other.input[i] = node.input[0]
        model.graph.node.remove(node)
    return prune(model)


def fp16_via_fp32(model32: onnx.ModelProto) -> onnx.ModelProto:
    """An fp32 model behind Casts: fp16 float inputs cast up, fp32 outputs cast back to fp16 (tables stay fp32)."""
    model = onnx.ModelProto.FromString(model32.SerializeToString())
    graph = model.graph
    casts_in, casts_out = [], []
    for value in graph.input:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = f"{value.name}_fp32"
            for node in graph.node:
                for i, name in enumerate(node.input):
                    if name == value.name:
                        node.input[i] = inner
            casts_in.append(helper.make_node("Cast", [value.name], [inner], to=TensorProto.FLOAT))
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    for value in graph.output:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            inner = f"{value.name}_fp32"
            for node in graph.node:
                for i, name in enumerate(node.output):
                    if name == value.name:
                        node.output[i] = inner
            casts_out.append(helper.make_node("Cast", [inner], [value.name], to=TensorProto.FLOAT16))
            value.type.tensor_type.elem_type = TensorProto.FLOAT16
    nodes = casts_in + list(graph.node) + casts_out
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def profile(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], args: argparse.Namespace) -> dict:
    """ORT profiler: per-call microseconds by operator type (median over calls after warm-up) and of the run.

    ``model_run_us`` is the whole ``run_with_iobinding``; ``kernels_us`` the sum of kernel times; the difference is
    ORT's own per-call work (binding, allocation, scheduling).
    """
    work = Path(tempfile.mkdtemp(prefix="ropeexport-profile-"))
    try:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        call = OrtCall(data, feeds, session_options(args, profile_prefix=str(work / "ort")))
        calls = max(5, args.repeats)
        for _ in range(args.warmup + calls):
            call()
        events = json.loads(Path(call.session.end_profiling()).read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = sorted((e["ts"], e["dur"]) for e in events if e.get("name") == "model_run")[-calls:]
    starts = [ts for ts, _ in runs]
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    nodes_per_run = defaultdict(set)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if 0 <= i < len(runs) and e["ts"] <= runs[i][0] + runs[i][1]:
            per_run[i][e["args"]["op_name"]] += e["dur"]
            nodes_per_run[i].add(e["name"])
    ops = sorted({op for r in per_run for op in r})
    by_op = {op: round(statistics.median(r.get(op, 0.0) for r in per_run), 2) for op in ops}
    kernels = statistics.median(sum(r.values()) for r in per_run)
    return {
        "calls": len(runs),
        "model_run_us": round(statistics.median(d for _, d in runs), 2),
        "kernels_us": round(kernels, 2),
        "nodes_executed": max((len(n) for n in nodes_per_run.values()), default=0),
        "by_op_us": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
    }


def profiles(models: dict[str, Any], feeds: dict[str, np.ndarray], args: argparse.Namespace) -> dict[str, Any]:
    """``profile`` of each model; a model the profiler cannot run records its error instead."""
    out = {}
    for name, model in models.items():
        try:
            out[name] = profile(model, feeds, args)
        except Exception as exc:
            out[name] = {"error": failed(name, "", exc).error}
    return out


# --------------------------------------------------------------------------------------------------------------------
# Scenarios.


def rope_spec(cfg: dict, dtype: str, graph: str) -> Any:
    """Llama-style fused or decomposed RoPE (half layout, default schedule)."""
    r = cfg["rope"]
    return spec_from_dict(
        {
            "num_heads": r["heads"],
            "num_kv_heads": r["kv_heads"],
            "head_dim": r["head_dim"],
            "max_positions": cfg["max_positions"],
            "theta": cfg["theta"],
            "dtype": dtype,
            "graph": graph,
        }
    )


def rope_feeds(cfg: dict, phase: str, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """query [b, H, s, d], key [b, KV, s, d], position_ids [b, s] for prefill (0..s-1) or decode (first + row)."""
    p, r = cfg[phase], cfg["rope"]
    b, s = p["batch"], p["seq"]
    q = rng.standard_normal((b, r["heads"], s, r["head_dim"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    k = rng.standard_normal((b, r["kv_heads"], s, r["head_dim"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    if phase == "prefill":
        pos = np.broadcast_to(np.arange(s, dtype=np.int64), (b, s))
    else:
        pos = (p["first"] + np.arange(b, dtype=np.int64))[:, None] + np.arange(s, dtype=np.int64)
    return {"query": q, "key": k, "position_ids": np.array(pos)}  # a writable copy: torch refuses read-only


def same_shapes(feeds: dict[str, np.ndarray], pairs: dict[str, str]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Output shapes equal to input shapes: {output: (shape, dtype)}."""
    return {out: (feeds[src].shape, feeds[src].dtype) for out, src in pairs.items()}


class Context:
    """What scenarios share: parsed args, shapes, the thread pool, and exported peer models (one per dtype)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cfg = TINY if args.tiny else FULL
        self.peer_models: dict[str, bytes | BaseException] = {}
        self.notes: dict[str, Any] = {}

    def peer_model(self, dtype: str, feeds: dict[str, np.ndarray]) -> bytes:
        """``torch.onnx.export`` of HFRotary in this dtype, dynamic batch and sequence (exported once per dtype)."""
        if dtype not in self.peer_models:
            cfg = self.cfg
            module = HFRotary(cfg["rope"]["head_dim"], cfg["max_positions"], cfg["theta"]).eval()
            args = tuple(torch.from_numpy(feeds[n]) for n in ("query", "key", "position_ids"))
            batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
            start = time.perf_counter()
            try:
                with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                    warnings.simplefilter("ignore")
                    program = torch.onnx.export(
                        module,
                        args,
                        dynamo=True,
                        verbose=False,
                        input_names=["query", "key", "position_ids"],
                        output_names=["query_out", "key_out"],
                        dynamic_shapes=({0: batch, 2: seq}, {0: batch, 2: seq}, {0: batch, 1: seq}),
                    )
                model = program.model_proto
                self.peer_models[dtype] = model.SerializeToString()
                self.notes[f"peer_export_{dtype}"] = {
                    "exporter": "torch.onnx.export(dynamo=True) (the default exporter of torch 2.9+)",
                    "opset": next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                    "nodes": [n.op_type for n in model.graph.node],
                    "initializer_bytes": initializer_bytes(model),
                    "export_s": round(time.perf_counter() - start, 2),
                }
            except Exception as exc:
                self.peer_models[dtype] = exc
        found = self.peer_models[dtype]
        if isinstance(found, BaseException):
            raise found
        return found


def torch_entries(ctx: Context, module: nn.Module, feeds: dict[str, np.ndarray], compile_too: bool) -> list[Entry]:
    """``eager`` (and ``torch_compile``) of ``module(*feeds)`` under inference_mode, outputs allocated per call."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()]
    holder: dict[str, Any] = {}

    def runner(fn: Callable) -> Callable[[], None]:
        def call() -> None:
            with torch.inference_mode():
                holder[fn] = fn(*tensors)

        return call

    def outs(fn: Callable) -> Callable[[], list[np.ndarray]]:
        def get() -> list[np.ndarray]:
            result = holder[fn]
            result = result if isinstance(result, (tuple, list)) else [result]
            return [t.float().numpy() for t in result]

        return get

    entries = [Entry("eager", f"PyTorch eager {type(module).__name__}", runner(module), outputs=outs(module))]
    if not compile_too:
        return entries
    what = f"torch.compile({type(module).__name__}) (inductor, dynamic=False)"
    if ctx.args.no_compile:
        entries.append(Entry("torch_compile", what, error="skipped: --no-compile"))
        return entries
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(module, dynamic=False)
            with torch.inference_mode():
                compiled(*tensors)  # compiles now, so the first timed call does not
    except Exception as exc:
        entries.append(failed("torch_compile", what, exc))
        return entries
    info = {"compile_s": round(time.perf_counter() - start, 2)}
    entries.append(Entry("torch_compile", what, runner(compiled), info=info, outputs=outs(compiled)))
    return entries


def sanity(entries: list[Entry], reference: str) -> None:
    """Record each entry's largest |output - reference output| after warm-up: a fast wrong answer is no answer."""
    ref = next((e for e in entries if e.name == reference and e.fn is not None and e.outputs), None)
    if ref is None:
        return
    expected = [np.asarray(a, np.float64) for a in ref.outputs()]
    for e in entries:
        if e is ref or e.fn is None or e.outputs is None or e.name in ROOFLINE or e.name == "ort_floor":
            continue  # rooflines and the floor move bytes; their outputs are not the op's
        try:
            got = [np.asarray(a, np.float64) for a in e.outputs()]
            diffs = []
            for g, x in zip(got, expected, strict=True):
                if g.shape != x.shape:
                    raise ValueError(f"shape {list(g.shape)} vs {list(x.shape)}")
                both_inf = np.isinf(g) & np.isinf(x) & (np.sign(g) == np.sign(x))
                with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity: masked out below
                    diffs.append(float(np.max(np.where(both_inf, 0.0, np.abs(g - x)), initial=0.0)))
            e.info[f"max_abs_vs_{reference}"] = max(diffs)
        except Exception as exc:  # a shape mismatch is worth seeing, not a crash
            e.info[f"max_abs_vs_{reference}"] = f"not comparable: {exc}"


def run_scenario(entries: list[Entry], reference: str | None, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, check against ``reference``, measure."""
    for e in entries:  # one call before the sanity check (warm-up proper happens in measure)
        if e.fn is not None:
            try:
                e.fn()
            except Exception as exc:
                e.error, e.fn = failed(e.name, e.what, exc).error, None
    if reference:
        sanity(entries, reference)
    return measure(entries, ROOFLINE, args)


def rope_scenario(ctx: Context, phase: str, dtype: str) -> dict[str, Any]:
    """Roofline, ORT floor, fused, decomposed, peer, eager, torch.compile on one RoPE shape."""
    args, cfg = ctx.args, ctx.cfg
    feeds = rope_feeds(cfg, phase, dtype, np.random.default_rng(0))
    outputs = same_shapes(feeds, {"query_out": "query", "key_out": "key"})
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    models: dict[str, onnx.ModelProto | bytes] = {}
    for graph in ("fused", "decomposed"):
        spec = rope_spec(cfg, dtype, graph)
        model = models[graph] = kind_for(spec).export(spec)
        what = {"fused": "opset-23 RotaryEmbedding + range guard", "decomposed": "opset-17 primitives"}[graph]
        info = {"initializer_bytes": initializer_bytes(model), "nodes": len(model.graph.node)}
        entries.append(ort_entry(graph, f"ropeexport {what} (ORT, IO binding)", model, feeds, args, info=info))
    peer_what = "torch.onnx.export(HFRotary) in ORT (IO binding)"
    try:
        models["peer"] = ctx.peer_model(dtype, feeds)
        entries.append(ort_entry("peer", peer_what, models["peer"], feeds, args))
    except Exception as exc:
        entries.append(failed("peer", peer_what, exc))
    module = HFRotary(cfg["rope"]["head_dim"], cfg["max_positions"], cfg["theta"]).eval()
    entries += torch_entries(ctx, module, feeds, compile_too=True)
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles(models, feeds, args)
    result["_meta"] = {
        "shapes": {k: list(v.shape) for k, v in feeds.items()},
        "positions": [int(feeds["position_ids"].min()), int(feeds["position_ids"].max())],
        "dtype": dtype,
    }
    return result


def alibi_spec(cfg: dict, dtype: str, graph: str, artifact: str, max_positions: int | None = None) -> Any:
    """Causal ALiBi with the scenario's heads."""
    a = cfg["alibi"]
    return spec_from_dict(
        {
            "encoding": "alibi",
            "artifact": artifact,
            "num_heads": a["heads"],
            "head_dim": a["head_dim"],
            "max_positions": max_positions or cfg["max_positions"],
            "dtype": dtype,
            "graph": graph,
        }
    )


def alibi_feeds(cfg: dict, artifact: str, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Positions 0..q-1 and 0..k-1 (plus query/key [b, H, len, d] for scores)."""
    a = cfg["alibi"]
    b = a["batch"]
    feeds = {}
    if artifact == "scores":
        for name, length in (("query", a["q"]), ("key", a["k"])):
            x = rng.standard_normal((b, a["heads"], length, a["head_dim"]), dtype=np.float32)
            feeds[name] = x.astype(NP_DTYPES[dtype])
    feeds["query_position_ids"] = np.array(np.broadcast_to(np.arange(a["q"], dtype=np.int64), (b, a["q"])))
    feeds["key_position_ids"] = np.array(np.broadcast_to(np.arange(a["k"], dtype=np.int64), (b, a["k"])))
    return feeds


def alibi_scenario(ctx: Context, artifact: str, dtype: str) -> dict[str, Any]:
    """Roofline (write the output; read q and k for scores), fused and decomposed artifacts, eager reference."""
    args, cfg = ctx.args, ctx.cfg
    a = cfg["alibi"]
    feeds = alibi_feeds(cfg, artifact, dtype, np.random.default_rng(0))
    out_name = {"bias": "attention_bias", "scores": "scores"}[artifact]
    outputs = {out_name: ((a["batch"], a["heads"], a["q"], a["k"]), np.dtype(NP_DTYPES[dtype]))}
    entries = roofline_entries(feeds, outputs, args)
    if artifact == "bias":
        entries.append(floor_entry(feeds, outputs, args))
    models = {}
    for graph in ("fused", "decomposed"):
        spec = alibi_spec(cfg, dtype, graph, artifact)
        model = models[graph] = kind_for(spec).export(spec)
        info = {
            "initializer_bytes": initializer_bytes(model),
            "initializers": {t.name: list(t.dims) for t in model.graph.initializer},
            "nodes": len(model.graph.node),
        }
        what = f"ropeexport alibi {artifact} ({graph}, opset {model.opset_import[0].version}; ORT, IO binding)"
        entries.append(ort_entry(graph, what, model, feeds, args, info=info))
    spec = alibi_spec(cfg, dtype, "fused", artifact)

    class Eager(nn.Module):
        def forward(self, *xs: torch.Tensor) -> torch.Tensor:
            bias = alibi_bias(spec, xs[-2], xs[-1])
            return bias if artifact == "bias" else scores_with_bias(xs[0], xs[1], bias)

    entries += torch_entries(ctx, Eager(), feeds, compile_too=False)
    entries[-1].what = "PyTorch eager, ropeexport's alibi_bias reference (float32, clamp, cast, mask)"
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles({"fused": models["fused"]}, feeds, args)
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()} | {out_name: list(outputs[out_name][0])}}
    return result


def sinusoidal_scenario(ctx: Context, dtype: str) -> dict[str, Any]:
    """y = x + PE[position_ids]: roofline (x -> y), ORT floor, fused and decomposed artifacts, eager reference."""
    args, cfg = ctx.args, ctx.cfg
    s = cfg["sinusoidal"]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((s["batch"], s["seq"], s["d_model"]), dtype=np.float32).astype(NP_DTYPES[dtype])
    pos = np.array(np.broadcast_to(np.arange(s["seq"], dtype=np.int64), (s["batch"], s["seq"])))
    feeds = {"x": x, "position_ids": pos}
    outputs = same_shapes(feeds, {"y": "x"})
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    spec = None
    models = {}
    for graph in ("fused", "decomposed"):
        spec = spec_from_dict(
            {
                "encoding": "sinusoidal",
                "artifact": "apply",
                "d_model": s["d_model"],
                "max_positions": cfg["max_positions"],
                "dtype": dtype,
                "graph": graph,
            }
        )
        model = models[graph] = kind_for(spec).export(spec)
        info = {"initializer_bytes": initializer_bytes(model), "nodes": len(model.graph.node)}
        what = f"ropeexport sinusoidal apply ({graph}; Gather + Add; ORT, IO binding)"
        entries.append(ort_entry(graph, what, model, feeds, args, info=info))
    module = SinusoidalEmbedding(spec).eval()

    class Eager(nn.Module):
        def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return module(x, position_ids=position_ids)

    entries += torch_entries(ctx, Eager(), feeds, compile_too=False)
    entries[-1].what = "PyTorch eager, ropeexport's SinusoidalEmbedding reference"
    result = run_scenario(entries, "fused", args)
    result["_profile"] = profiles({"fused": models["fused"]}, feeds, args)
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()}}
    return result


def rope_experiments(ctx: Context, phase: str, dtype: str) -> dict[str, Any]:
    """Variants of the fused artifact that isolate one cost each, timed against the roofline; ORT profiles."""
    args, cfg = ctx.args, ctx.cfg
    feeds = rope_feeds(cfg, phase, dtype, np.random.default_rng(0))
    outputs = same_shapes(feeds, {"query_out": "query", "key_out": "key"})
    spec = rope_spec(cfg, dtype, "fused")
    model = kind_for(spec).export(spec)
    bare = without_guards(model)
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    entries.append(ort_entry("fused", "shipped fused artifact (IO binding)", model, feeds, args))
    entries.append(ort_entry("fused_no_guard", "the same without the range-guard nodes", bare, feeds, args))
    what = "shipped artifact via session.run (ORT allocates outputs)"
    entries.append(ort_entry("fused_run", what, model, feeds, args, binding=False))
    if args.threads > 1:
        what = "shipped artifact, intra_op_num_threads=1"
        entries.append(ort_entry("fused_1_thread", what, model, feeds, args, threads=1))
        what = "no guard and one thread: the least ORT work per call"
        entries.append(ort_entry("fused_no_guard_1_thread", what, bare, feeds, args, threads=1))
    entries.append(
        ort_entry(
            "fused_no_opt",
            "shipped artifact, ORT_DISABLE_ALL",
            model,
            feeds,
            args,
            opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        )
    )
    if dtype == "fp16":
        model32 = kind_for(rope_spec(cfg, "fp32", "fused")).export(rope_spec(cfg, "fp32", "fused"))
        what = "fp16 in/out, Cast -> fp32 RotaryEmbedding (fp32 tables) -> Cast (not the shipped numerics)"
        entries.append(ort_entry("fp32_compute", what, fp16_via_fp32(model32), feeds, args))
        bare32 = fp16_via_fp32(without_guards(model32))
        entries.append(ort_entry("fp32_compute_no_guard", what + ", no guard", bare32, feeds, args))
    result = run_scenario(entries, "fused", args)
    floor = floor_model(feeds, outputs)
    result["_profile"] = {
        "fused": profile(model, feeds, args),
        "fused_no_guard": profile(bare, feeds, args),
        "ort_floor": profile(floor, floor_feeds(floor, feeds), args),
    }
    result["_meta"] = {"shapes": {k: list(v.shape) for k, v in feeds.items()}, "guard_nodes": guard_nodes(model)}
    return result


def guard_nodes(model: onnx.ModelProto) -> list[str]:
    """Op types of the fused graph's nodes other than RotaryEmbedding (the range guard)."""
    return [n.op_type for n in model.graph.node if n.op_type != "RotaryEmbedding"]


def alibi_experiments(ctx: Context, dtype: str) -> dict[str, Any]:
    """The shipped ALiBi bias against graphs with fewer full-size passes, each checked bit for bit; ORT profiles."""
    args, cfg = ctx.args, ctx.cfg
    a = cfg["alibi"]
    feeds = alibi_feeds(cfg, "bias", dtype, np.random.default_rng(0))
    outputs = {"attention_bias": ((a["batch"], a["heads"], a["q"], a["k"]), np.dtype(NP_DTYPES[dtype]))}
    spec = alibi_spec(cfg, dtype, "fused", "bias")
    model = kind_for(spec).export(spec)
    # The general path every additive-bias method takes (clamp, Cast, Expand, mask: four full-size passes); the ALiBi
    # bias artifact ships its single pass instead wherever the clamp cannot act.
    general = build_bias_graph(spec, alibi_bias_nodes)
    no_expand = bypass(general, "Expand")  # causal: the mask's Where broadcasts to [b, H, q, k] by itself
    entries = roofline_entries(feeds, outputs, args) + [floor_entry(feeds, outputs, args)]
    entries.append(ort_entry("fused", "shipped bias artifact", model, feeds, args))
    variants = {"fused": model}
    what = "the shipped artifact without its in-graph range guards (positions unchecked in plain ORT)"
    entries.append(ort_entry("fused_no_guard", what, without_boundary_guards(model), feeds, args))
    what = "the general bias graph (clamp, Cast, Expand, mask: what shipped before the single pass)"
    entries.append(ort_entry("general", what, general, feeds, args))
    variants["general"] = general
    what = "the general graph without its Expand (the Where broadcasts)"
    entries.append(ort_entry("no_expand", what, no_expand, feeds, args))
    variants["no_expand"] = no_expand
    result = run_scenario(entries, "fused", args)
    result["_profile"] = {name: profile(m, feeds, args) for name, m in variants.items()}
    result["_meta"] = {
        "shapes": {k: list(v.shape) for k, v in feeds.items()},
        "shipped_nodes": [n.op_type for n in model.graph.node],
    }
    return result


def run(ctx: Context, name: str) -> dict[str, Any]:
    """One scenario by name."""
    parts = name.split("-")
    if parts[0] == "rope":
        phase, dtype = parts[1], parts[2]
        return rope_experiments(ctx, phase, dtype) if parts[-1] == "experiments" else rope_scenario(ctx, phase, dtype)
    if parts[0] == "alibi":
        if parts[-1] == "experiments":
            return alibi_experiments(ctx, parts[2])
        return alibi_scenario(ctx, parts[1], parts[2])
    return sinusoidal_scenario(ctx, parts[2])


# --------------------------------------------------------------------------------------------------------------------
# Targets and findings.


def get(scenarios: dict, scenario: str, entry: str, key: str = "ratio") -> Any:
    """scenarios[scenario][entry][key], or None when the scenario or entry did not run."""
    return scenarios.get(scenario, {}).get(entry, {}).get(key)


def target(name: str, value: float | None, limit: float, better: str, detail: str, scenario: str) -> dict[str, Any]:
    """A target row: met when ``value`` is at most (``better="lower"``) or at least ``limit``."""
    if value is None:
        met = None
    else:
        met = value <= limit if better == "lower" else value >= limit
    row = {"target": name, "value": value, "limit": limit, "better": better, "met": met, "detail": detail}
    return row | {"scenario": scenario}


def targets(s: dict, raw: dict, alibi_sizes: dict) -> list[dict[str, Any]]:
    """The issue's targets, checked on this run's figures (never asserted anywhere)."""
    rows = [
        target(
            "fused RoPE prefill fp32 <= 1.15x copy",
            get(s, "rope-prefill-fp32", "fused"),
            1.15,
            "lower",
            f"{get(s, 'rope-prefill-fp32', 'fused', 'median_us')} us vs roofline {_median(s, 'rope-prefill-fp32')} us; "
            f"IQR over rounds {get(s, 'rope-prefill-fp32', 'fused', 'ratio_iqr')}",
            "rope-prefill-fp32",
        )
    ]
    for dtype in ("fp32", "fp16"):
        sc = f"rope-decode-{dtype}"
        rows.append(
            target(
                f"fused RoPE decode {dtype} <= 1.5x copy",
                get(s, sc, "fused"),
                1.5,
                "lower",
                f"{get(s, sc, 'fused', 'median_us')} us vs roofline {_median(s, sc)} us; "
                f"ORT floor (Identity graph) {get(s, sc, 'ort_floor', 'median_us')} us; "
                f"IQR over rounds {get(s, sc, 'fused', 'ratio_iqr')}",
                sc,
            )
        )
    for dtype in ("fp32", "fp16"):
        sc = f"rope-prefill-{dtype}"
        speedup = paired(raw[sc], "peer", "fused") if sc in raw else None
        rows.append(
            target(
                f"fused >= 6x faster than the torch.onnx.export peer, prefill {dtype}",
                speedup,
                6.0,
                "higher",
                f"peer {get(s, sc, 'peer', 'median_us')} us, fused {get(s, sc, 'fused', 'median_us')} us; "
                f"IQR over rounds {paired_iqr(raw[sc], 'peer', 'fused') if sc in raw else None}",
                sc,
            )
        )
    for sc in ("rope-prefill-fp32", "rope-prefill-fp16", "rope-decode-fp32", "rope-decode-fp16"):
        rel = paired(raw[sc], "decomposed", "peer") if sc in raw else None
        rows.append(
            target(
                f"decomposed no slower than the peer, {sc[5:]}",
                rel,
                1.0,
                "lower",
                f"decomposed {get(s, sc, 'decomposed', 'median_us')} us, peer {get(s, sc, 'peer', 'median_us')} us "
                "(value: decomposed / peer, median of rounds; IQR "
                f"{paired_iqr(raw[sc], 'decomposed', 'peer') if sc in raw else None})",
                sc,
            )
        )
    for dtype in ("fp32", "fp16"):
        sc = f"alibi-bias-{dtype}"
        rows.append(
            target(
                f"ALiBi bias {dtype} <= 1.5x writing its output",
                get(s, sc, "fused"),
                1.5,
                "lower",
                f"{get(s, sc, 'fused', 'median_us')} us vs write roofline {_median(s, sc)} us; "
                f"IQR over rounds {get(s, sc, 'fused', 'ratio_iqr')}",
                sc,
            )
        )
    sizes = alibi_sizes
    rows.append(
        {
            "target": "ALiBi artifact stores H slopes, not a table",
            "value": sizes.get("initializer_bytes"),
            "limit": None,
            "better": "flat",
            "met": sizes.get("slopes_only"),
            "detail": sizes.get("detail"),
            "scenario": None,
        }
    )
    return rows


def _median(s: dict, scenario: str) -> float | None:
    """The roofline's absolute median (the faster copy's median over all calls)."""
    values = [get(s, scenario, n, "median_us") for n in ROOFLINE]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def alibi_storage(cfg: dict) -> dict[str, Any]:
    """ALiBi bias initializers at two max_positions: the artifact must hold H float32 slopes and nothing that grows."""
    sizes = {}
    slopes = {}
    for p in (cfg["max_positions"], 32 * cfg["max_positions"]):
        spec = alibi_spec(cfg, "fp32", "fused", "bias", p)
        model = kind_for(spec).export(spec)
        sizes[p] = initializer_bytes(model)
        slopes[p] = [list(t.dims) for t in model.graph.initializer if t.name == "neg_slopes"]
    heads = cfg["alibi"]["heads"]
    first, last = sizes.values()
    ok = first == last and all(s == [[1, heads, 1, 1]] for s in slopes.values())
    detail = (
        f"initializer bytes {sizes} by max_positions; neg_slopes {slopes[cfg['max_positions']]} "
        f"= {heads} float32 slopes ({4 * heads} bytes); the rest are axes/constants"
    )
    return {"initializer_bytes": first, "by_max_positions": sizes, "slopes_only": ok, "detail": detail}


def f(x: Any, digits: int = 2) -> str:
    """A figure for prose: rounded, or "n/a" when it was not measured."""
    if isinstance(x, (int, float)) and math.isfinite(x):
        return f"{x:.{digits}f}"
    return "n/a"


def ops(profile: dict) -> str:
    """``{op: us}`` of a profile as "Op 12 us, Op 3 us"."""
    return ", ".join(f"{op} {f(us, 0)} us" for op, us in profile.get("by_op_us", {}).items()) or "n/a"


def findings(s: dict, raw: dict, prof: dict) -> list[str]:
    """What limits each figure, in words with this run's numbers (a part is left out when its scenario did not run)."""
    out = []

    def pair(scenario: str, a: str, b: str) -> float | None:
        return paired(raw[scenario], a, b) if scenario in raw else None

    ex = "rope-prefill-fp32-experiments"
    if ex in s:
        p = prof.get(ex, {}).get("fused", {})
        rotary = p.get("by_op_us", {}).get("RotaryEmbedding")
        guard = sum(v for k, v in p.get("by_op_us", {}).items() if k != "RotaryEmbedding")
        run_us = p.get("model_run_us")
        out.append(
            f"RoPE prefill fp32, fused {f(get(s, ex, 'fused'))}x the numpy copy; ORT's own copy of the same bytes "
            f"(Identity graph) {f(get(s, ex, 'ort_floor'))}x, so fused / ORT copy = "
            f"{f(pair(ex, 'fused', 'ort_floor'))}. Profiler, per call: RotaryEmbedding {f(rotary, 0)} us of a "
            f"{f(run_us, 0)} us run; the range guard's {len(p.get('by_op_us', {})) - 1} other op types "
            f"{f(guard, 0)} us ({f(100 * guard / run_us if run_us else None, 1)}%). Without the guard "
            f"{f(get(s, ex, 'fused_no_guard'))}x; one thread {f(get(s, ex, 'fused_1_thread'))}x; session.run "
            f"instead of IO binding {f(get(s, ex, 'fused_run'))}x; ORT_DISABLE_ALL {f(get(s, ex, 'fused_no_opt'))}x "
            "(one fused node: nothing for the optimizer to do). What is left is ORT's RotaryEmbedding kernel "
            "(MLAS AVX2 row kernel under TryParallelFor) against a memcpy."
        )
    ex = "rope-decode-fp32-experiments"
    if ex in s:
        p = prof.get(ex, {})
        fused, bare, floor = p.get("fused", {}), p.get("fused_no_guard", {}), p.get("ort_floor", {})
        out.append(
            f"RoPE decode fp32: fused {f(get(s, ex, 'fused', 'median_us'), 1)} us per call, "
            f"{f(get(s, ex, 'fused'))}x a {f(_median(s, ex), 1)} us numpy copy of the same 320 KiB; ORT's Identity "
            f"graph {f(get(s, ex, 'ort_floor', 'median_us'), 1)} us. Without the guard "
            f"{f(get(s, ex, 'fused_no_guard', 'median_us'), 1)} us, one thread "
            f"{f(get(s, ex, 'fused_1_thread', 'median_us'), 1)} us, both "
            f"{f(get(s, ex, 'fused_no_guard_1_thread', 'median_us'), 1)} us "
            f"({f(get(s, ex, 'fused_no_guard_1_thread'))}x). Profiler (which adds its own cost per node): "
            f"{fused.get('nodes_executed')} nodes, run {f(fused.get('model_run_us'), 0)} us: {ops(fused)}; without "
            f"guard {f(bare.get('model_run_us'), 0)} us; Identity {f(floor.get('model_run_us'), 0)} us. At this size "
            "the limit is per-node dispatch (with the guard's 5 nodes on a [16, 1] int64 tensor a call takes "
            f"{f(pair(ex, 'fused', 'fused_no_guard'))}x as long as without them) and handing rows to the second "
            f"intra-op thread (spinning is off; two threads take {f(pair(ex, 'fused', 'fused_1_thread'))}x as long "
            "as one), not memory."
        )
    ex = "rope-prefill-fp16-experiments"
    if ex in s:
        p = prof.get(ex, {}).get("fused", {})
        out.append(
            f"RoPE prefill fp16: fused {f(get(s, ex, 'fused'))}x the copy (profiler: {ops(p)}); fp16 moves half "
            f"the bytes of fp32 but ORT's fp16 RotaryEmbedding kernel does not run in half the time (fused fp16 / "
            f"ORT copy {f(pair(ex, 'fused', 'ort_floor'))}). Casting to fp32 around an fp32 RotaryEmbedding is no "
            f"cure: {f(get(s, ex, 'fp32_compute'))}x (ORT's Cast passes cost more than the fp16 kernel saves). "
            "The tables are not the cost: half width in fp16, 4096 x 64 x 2 B = 512 KiB each, read once per row."
        )
    for sc in ("rope-prefill-fp32", "rope-prefill-fp16"):
        if sc in s:
            peer = prof.get(sc, {}).get("peer", {})
            ratio = get(s, sc, "torch_compile")
            compiled = f"{f(ratio)}x" if ratio else get(s, sc, "torch_compile", "error")
            out.append(
                f"{sc}: peer (torch.onnx.export) {f(get(s, sc, 'peer'))}x the roofline, fused "
                f"{f(get(s, sc, 'fused'))}x: {f(pair(sc, 'peer', 'fused'))}x faster than the peer; a kernel "
                f"running at the copy roofline itself would be {f(get(s, sc, 'peer'))}x faster. Decomposed "
                f"{f(get(s, sc, 'decomposed'))}x (decomposed / peer {f(pair(sc, 'decomposed', 'peer'))}). The peer "
                f"graph runs {peer.get('nodes_executed')} nodes per call ({ops(peer)}); rotate_half "
                "(Slice, Neg, Concat) and q * cos + rot * sin each write a full-size tensor, which is what a fused "
                f"kernel avoids. Eager {f(get(s, sc, 'eager'))}x, torch.compile {compiled}."
            )
    for sc in ("rope-decode-fp32", "rope-decode-fp16"):
        if sc in s:
            dec, peer = prof.get(sc, {}).get("decomposed", {}), prof.get(sc, {}).get("peer", {})
            out.append(
                f"{sc}: decomposed {f(get(s, sc, 'decomposed', 'median_us'), 1)} us, peer "
                f"{f(get(s, sc, 'peer', 'median_us'), 1)} us (decomposed / peer "
                f"{f(pair(sc, 'decomposed', 'peer'))}); at decode both are node-count bound: decomposed runs "
                f"{dec.get('nodes_executed')} nodes ({ops(dec)}), the peer {peer.get('nodes_executed')} "
                f"({ops(peer)}). The decomposed graph's extra nodes are the range guard (5) and the Split / Concat "
                "form of the rotation."
            )
    for dtype in ("fp32", "fp16"):
        ex = f"alibi-bias-{dtype}-experiments"
        if ex in s:
            p = prof.get(ex, {})
            cast = "" if dtype == "fp32" else ", then one Cast rounds it to fp16"
            text = (
                f"ALiBi bias {dtype}: the shipped single pass is {f(get(s, ex, 'fused'))}x the write roofline "
                f"(profiler {ops(p.get('fused', {}))}): the mask goes on the small [b, 1, q, k] distance (+inf) "
                f"and one broadcasting float32 Mul by the negated slopes writes [b, H, q, k]{cast}. The general "
                f"graph every bias method takes (clamp, Cast, Expand, mask) is {f(get(s, ex, 'general'))}x "
                f"({ops(p.get('general', {}))}); the single pass is {f(pair(ex, 'general', 'fused'))}x faster in "
                "the same rounds and bit for bit the same (tests/encodings/test_alibi.py). It applies where the "
                "clamp to the dtype's finite range cannot act (max slope x (max_positions - 1) within range: fp16 "
                "up to about 78k positions for the steepest slope 0.84); what remains is ORT's broadcasting Mul "
                + ("against numpy's fill." if dtype == "fp32" else "and the float32 -> fp16 Cast against a fill.")
            )
            out.append(text)
    for dtype in ("fp32", "fp16"):
        sc = f"sinusoidal-apply-{dtype}"
        if sc in s:
            out.append(
                f"{sc}: fused {f(get(s, sc, 'fused'))}x the copy of x -> y; profiler "
                f"{ops(prof.get(sc, {}).get('fused', {}))}: the Gather writes PE rows [b, s, d_model] (a full-size "
                "intermediate) before the Add reads it again"
                + (
                    "; the Casts are ORT's own, inserted around the Add because its CPU provider has no fp16 Add."
                    if dtype == "fp16"
                    else "."
                )
            )
    return out


# --------------------------------------------------------------------------------------------------------------------
# Output.


def table(scenarios: dict, meta: dict) -> str:
    """Markdown: one row per scenario entry; the scenario cell says which rounds the figures use."""
    lines = [
        "| scenario (rounds used) | entry | median us | x roofline (median of rounds) | IQR over rounds | note |",
        "|---|---|---:|---:|---|---|",
    ]
    for name, entries in scenarios.items():
        basis = meta.get(name, {}).get("basis") or {}
        label = f"{name} ({basis.get('used')}/{basis.get('of')} {basis.get('rounds')})" if basis else name
        for entry, item in entries.items():
            if entry.startswith("_"):
                continue
            if "error" in item:
                lines.append(f"| {label} | {entry} | - | - | - | {item['error']} |")
                continue
            lo, hi = item.get("ratio_iqr", [float("nan"), float("nan")])
            note = ""
            for key in ("max_abs_vs_fused", "compile_s", "initializer_bytes"):
                if key in item:
                    note += f"{key} {item[key]}; "
            lines.append(
                f"| {label} | {entry} | {item['median_us']:.1f} | {item.get('ratio', float('nan')):.3f} | "
                f"{lo:.3f}-{hi:.3f} | {note.rstrip('; ')} |"
            )
    return "\n".join(lines)


def targets_table(rows: list[dict]) -> str:
    """Markdown: target, value, met."""
    lines = ["| target | value | met | rounds | detail |", "|---|---:|---|---|---|"]
    for r in rows:
        met = {True: "met", False: "NOT met", None: "not measured"}[r["met"]]
        b = r.get("basis") or {}
        rounds = f"{b['used']}/{b['of']} {b['rounds']}" if b else "-"
        lines.append(f"| {r['target']} | {r['value']} | {met} | {rounds} | {r['detail']} |")
    return "\n".join(lines)


def config(args: argparse.Namespace) -> dict[str, Any]:
    """Everything a reader needs to reproduce or discount the figures."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "onnxruntime": ort.__version__,
        "providers": ["CPUExecutionProvider"],
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": cpu,
        "threads": {
            "ort_intra_op_num_threads": args.threads,
            "ort_inter_op_num_threads": 1,
            "ort_execution_mode": "ORT_SEQUENTIAL",
            "torch_num_threads": torch.get_num_threads(),
            "roofline_copy_mt_threads": args.threads,
        },
        "allow_spinning": {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"},
        "graph_optimization_level": "ORT_ENABLE_ALL (experiments: ORT_DISABLE_ALL)",
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "wait_quiet_s": args.wait_quiet,
        "repeats": args.repeats,
        "min_block_ms": args.min_block_s * 1e3,
        "rounds": args.rounds,
        "quiet_round": f"other processes under {QUIET:.0%} of all CPU time; figures use quiet rounds when >= "
        f"{MIN_QUIET}, else every round (per scenario: scenario_meta[...].basis)",
        "warmup": args.warmup,
        "tiny": args.tiny,
        "shapes": TINY if args.tiny else FULL,
    }


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


def cpu_busy(window_s: float = 2.0) -> float | None:
    """Fraction of all CPUs busy over ``window_s`` while this process sleeps: other jobs' load (None off Linux).

    The load average would be a poor signal here: it lags by a minute and counts this benchmark's own threads.
    """

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle

    try:
        total0, idle0 = sample()
        time.sleep(window_s)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_quiet(limit_s: float) -> dict[str, Any]:
    """Wait until other jobs use under a quarter of the CPUs, or ``limit_s`` passes; what was seen."""
    start = time.perf_counter()
    busy = cpu_busy() if limit_s > 0 else None
    while busy is not None and busy >= 0.25 and time.perf_counter() - start < limit_s:
        busy = cpu_busy()
    seen = None if busy is None else round(busy, 2)
    return {"waited_s": round(time.perf_counter() - start, 1), "others_cpu_busy": seen}


def main(argv: list[str] | None = None) -> int:
    """Run the selected scenarios, print the tables, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench.json", help="JSON file to write (default bench.json)")
    parser.add_argument("--repeats", type=int, default=None, help="calls per timed block (default 5; tiny 2)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 21; tiny 3)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls per entry (default 3; tiny 1)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="ORT and torch threads")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: every code path in seconds")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=SCENARIOS, help="scenarios to run")
    parser.add_argument("--min-block-ms", type=float, default=None, help="least time per block (default 20; tiny 0)")
    parser.add_argument("--no-compile", action="store_true", help="record torch.compile as skipped (it takes ~20 s)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="S",
        help="before each scenario, wait up to S seconds until other jobs use under 25%% of the CPUs",
    )
    args = parser.parse_args(argv)
    # Short blocks, many rounds: an entry and the roofline it is divided by run close together in time.
    args.repeats = args.repeats or (2 if args.tiny else 5)
    args.rounds = args.rounds or (3 if args.tiny else 21)
    args.warmup = args.warmup or (1 if args.tiny else 3)
    args.min_block_s = (args.min_block_ms if args.min_block_ms is not None else (0 if args.tiny else 20)) / 1e3
    torch.set_num_threads(args.threads)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed" on every export
    args.pool = ThreadPoolExecutor(args.threads) if args.threads > 1 else None
    ctx = Context(args)
    load_before = os.getloadavg()
    started = time.perf_counter()
    scenarios: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    prof: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for name in args.only or SCENARIOS:
        waited = wait_quiet(args.wait_quiet)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        result = run(ctx, name)
        raw[name] = result
        prof[name] = result.pop("_profile", {})
        meta[name] = result.pop("_meta", {}) | {
            "basis": result.pop("_basis", None),
            "others_cpu_by_round": result.pop("_others_cpu_by_round", None),
            "seconds": round(time.perf_counter() - t0, 1),
            "load_1min": {"before": round(load, 2), "after": round(os.getloadavg()[0], 2)},
            "quiet_wait": waited,
        }
        scenarios[name] = {k: v for k, v in result.items() if k != "_rounds"}
        print(f"{name}: done in {meta[name]['seconds']} s", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    sizes = alibi_storage(ctx.cfg)
    rows = targets(scenarios, raw, sizes)
    for row in rows:  # which rounds each figure rests on: quiet ones, or all when too few were quiet
        row["basis"] = meta.get(row["scenario"], {}).get("basis")
    report = {
        "tool": "tools/bench.py",
        "command": "python tools/bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": config(args),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load_after]},
        "elapsed_s": round(time.perf_counter() - started, 1),
        "roofline": ROOFLINE_DOC,
        "scenarios": scenarios,
        "scenario_meta": meta,
        "profiles": {k: v for k, v in prof.items() if v},
        "peer": ctx.notes,
        "alibi_storage": sizes,
        "targets": rows,
        "findings": findings(scenarios, raw, prof),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(clean(report), indent=2, allow_nan=False) + "\n")
    print(table(scenarios, meta))
    print()
    print(targets_table(rows))
    print()
    for line in report["findings"]:
        print(f"- {line}")
    if args.pool:
        args.pool.shutdown()
    return 0


def clean(value: Any) -> Any:
    """JSON-ready: numpy scalars as Python numbers, a non-finite float as null, tuples as lists, keys as strings."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
