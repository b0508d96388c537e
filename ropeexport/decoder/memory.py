"""The memory a decoder build holds at its peak, estimated from the spec before anything is allocated.

``estimate(spec, seeded, eager)`` is the figure; ``available()`` what this machine lends; ``check_memory`` refuses a
build whose estimate does not fit, naming both figures and how to shrink it. A build streams its weights (a
checkpoint's are read one tensor at a time, written to external data and let go; the float64 truth holds one layer),
so what scales with the whole model is only what the runtimes hold (bytes a parameter, ``per_parameter``):

- the weights as built: seeded draws in float64 (8); a checkpoint's, none (read as used);
- ONNX Runtime's session, the weights in the dtype (4 or 2), for fp16 plus the float32 copies its CPU kernels run
  on (4); an int4 projection (``--weight-format int4``: ``linear.is_weight``) half a byte and its block's scale
  (and zero point), once (``INT4_COPIES``: MatMulNBits' CPU kernel prepacks the initializer and lets it go); an
  embedding gathered from its int4 head (``DecoderSpec.tied_embedding_int4``) the same, not its dtype's bytes (ORT
  folds the gather's Reshape of the head's bytes into a table of its own: one more packed copy);
- with the transformers reference (``eager``): its model in the dtype (4 or 2; fp16 4 more: torch widens on the
  CPU; int4 projections dequantized into it, the same), and for seeded weights the float32 state dict it is loaded
  from and its copy in the dtype, while loading (4 + 4 or 2);

plus the runtime's logits of every call, float32, held from the scenarios to the judging, and an embedding gathered
from its int4 head as the truth reads it back from the model (``decoder.held.HeldWeights``: the table's packed
tensors kept once read, ``int4_bytes`` a value; Gemma 4 31B's widths on 2 layers, a 262144 x 5376 tied head, verified
at 9.35 GiB, estimated at 9.27 without them) (``running``). With ops after the head (a logit scale, a final soft
cap) ONNX Runtime also holds one more [slots, vocab] float32 buffer of the widest call in its arena (an op's input
beside its output; ``HEAD_BUFFERS``, ``workspace``: measured, ``tests/decoder/test_memory.py``). Gemma 4 31B's 2
layers: its scenarios' phase measured 6.84 GiB, estimated 4.57 without it, 5.74 with its 1048-slot call's buffer:
still under, by about a GiB not explained here. ONNX Runtime's
session is let go once every scenario has run (``verify_decoder``'s ``release``: ``session`` of the bytes a parameter),
before the float64 passes, which hold (``resident``) one layer's float64 weights (its attention's, then one dense
MLP projection at a time: ``decoder.phases``, each beside its norms) and one slice of the output head
(``oracle.HEAD_SLICE_BYTES``, with its float32 read), and (``activations``) one pass's float64 logits of every slot
(an int4 decoder's unquantized pass runs first and keeps only each call's figures: its logits are gone before the
truth's pass), transformers' of one call, one layer's widest activations of one run of calls (its attention's
[b, heads, s, s] float64 scores ``SCORE_COPIES`` times: the scores, their masked copy, the shifted exponent and its
normalised weights; quadratic in the run, 1.05 GiB for Gemma 4's 1048-slot one, not counted before) and the truth's
hidden states of every run (``oracle.chained_float64``: the calls of a scenario that extend one another are one run
when every layer's positions are static; a length-dependent schedule's are counted as recomputed call by call, a
bound: before, every decoder's were, 24853 token-rows for Gemma 4's five scenarios against the 1261 of their runs),
beside the blocks a comparison widens (``verify.COMPARE_BYTES``). The verification's peak is the
larger of the two phases, times ``MARGIN`` (what the allocator keeps of freed buffers), plus ``BASE`` (the interpreter
with torch, transformers and onnxruntime imported). The export's peak (``export``: the weights as built and the
largest tensor in flight, read as bf16 and float32 and made contiguous, ``EXPORT_BYTES`` an element; an int4 head one
slice of its columns, ``decoder.export.head_weight``, beside its packed bytes twice while the slices are joined) comes
first and is gone before the verification's; the larger of the two is the estimate.

Measured (peak RSS of the process tree, the estimate as the code gives it now beside it; ``tools/figures/sizes.md``),
bf16 checkpoints, fp32: Llama-3.2-1B verified without transformers 5.93 GiB (6.07, x1.02), with it 11.81 GiB (11.36,
x0.96: under); its 2-layer shape 2.79 GiB (3.96, x1.42) and 4.30 GiB (4.07, x0.95: under). The export alone:
Llama-3.1-8B in fp16 7.02 GiB (7.34), Llama-3.2-1B 1.58 GiB (3.96). int4 weights, verified without transformers:
Llama-3.1-8B 7.98 GiB (8.05, x1.01). Gemma 4 31B's widths on 2 layers (a 262144 x 5376 tied head), int4 gqa: the
export 4.41 GiB alone, 4.53 in the verified run (3.96 with BASE: under), ONNX Runtime's scenarios 6.84 (5.74: under),
the float64 passes 9.35 (10.3, x1.10). Qwen3-VL-4B int4 gqa, ``ropeexport verify``: 4.91 GiB (3.73: under, its phase
not measured). Where the estimate is under, what is missed was not found (the figures were measured once, at load).
``tests/decoder/test_memory.py`` measures a small seeded build against it.

``ROPEEXPORT_MEMORY_LIMIT`` (bytes, or a size such as ``8G``: binary units) replaces what ``available()`` finds:
physical memory, the cgroup's memory limit and ``ulimit -v``, whichever is smallest.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ropeexport.components.linear import DEFAULT_BLOCK_SIZE, is_weight
from ropeexport.decoder.export import HEAD_SLICE_BYTES as EXPORT_HEAD_SLICE_BYTES
from ropeexport.decoder.phases import MLP_NAMES
from ropeexport.decoder.scenarios import regime_kind, scenarios
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.verify import COMPARE_BYTES
from ropeexport.decoder.weights import BLOCK_NAMES, expected
from ropeexport.errors import SpecError

ENV = "ROPEEXPORT_MEMORY_LIMIT"
MiB, GiB = 2**20, 2**30
BASE = 600 * MiB  # measured 502 MiB: a 13k-parameter decoder's whole build, transformers reference included
MARGIN = 1.15
FP16_WIDENED = 4  # a float32 copy of each fp16 weight: ONNX Runtime's CPU kernels, torch's CPU matmuls
DTYPE_BYTES = {"fp32": 4, "fp16": 2}
RUNTIME_LOGIT_BYTES = 4  # the runtime's logits as returned (float32; fp16 decoders' are 2: bounded by 4)
EXPORT_BYTES = 12  # an element in flight: bf16 read (2), float32 (4), rounded and contiguous copies (2-4 each), a mask
# MatMulNBits' weight as ONNX Runtime holds it: its CPU kernel prepacks the initializer and lets the original go (ORT
# 1.31). Measured: Llama-3.1-8B int4 verified peaks at 7.98 GiB; the estimate with one copy is 11.6 GiB, with two
# (the packed initializer kept beside its prepacked copy, as assumed before) 16.7.
INT4_COPIES = 1
HEAD_SLICE_BYTES = 256 * MiB  # decoder.oracle's slice of the output head in float64 (+ half as much read in float32)
# ONNX Runtime's [slots, vocab] float32 buffers of the widest call beyond the logits it returns (those are the call's
# part of ``running``), with ops after the head or not. Measured on one 1024 x 65536 call (fused fp32 and gqa int4),
# its peak above the logits returned: 0.08 and 0.13 of a buffer without a cap, 1.12 and 1.16 with one
HEAD_BUFFERS = {False: 0, True: 1}
SCORE_COPIES = 4  # [b, heads, s, t] float64 arrays alive at once in ``attention64``'s softmax (module doc)


@dataclass(frozen=True)
class MemoryEstimate:
    """A build's peak (module doc): the verification's, the larger of its scenarios (``parameters`` x
    ``per_parameter`` + ``running``) and its float64 passes (``parameters`` x (``per_parameter`` - ``session``) +
    ``running`` + ``resident`` + ``activations``), or the export's ``export`` if larger, times MARGIN, plus BASE;
    the scenarios' phase also holds ONNX Runtime's ``workspace``.
    """  # noqa: D205

    parameters: int
    per_parameter: float
    activations: int
    resident: int = 0
    export: int = 0
    session: float = 0.0  # of ``per_parameter``: ONNX Runtime's, let go before the float64 passes
    running: int = 0  # the runtime's logits of every call (an int4 table's packed bytes), held through both
    workspace: int = 0  # ONNX Runtime's own logits buffers while the widest call runs (module doc)

    @property
    def phases(self) -> dict[str, int]:
        """Each phase's estimate in bytes (times MARGIN, plus BASE): ``export``, ``scenarios`` (ONNX Runtime's
        session running them), ``passes`` (the float64 passes and the judging).
        """  # noqa: D205
        scenarios = math.ceil(self.parameters * self.per_parameter) + self.running + self.workspace
        passes = (math.ceil(self.parameters * (self.per_parameter - self.session)) + self.running + self.resident
                  + self.activations)  # fmt: skip
        return {k: BASE + math.ceil(MARGIN * v) for k, v in
                (("export", self.export), ("scenarios", scenarios), ("passes", passes))}  # fmt: skip

    @property
    def total(self) -> int:
        """The estimate in bytes: the largest phase's."""
        return max(self.phases.values())

    def describe(self) -> str:
        """``about 7.2 GiB (1.24e+09 parameters x 4 bytes: ..., plus 848 MiB for the float64 truth's one layer)``."""
        return (f"about {size(self.total)} ({self.parameters:.3g} parameters x {self.per_parameter:.3g} bytes: the "
                f"weights as built and the runtimes' copies, plus {size(self.resident)} for the float64 truth's one "
                "layer)")  # fmt: skip


def per_parameter(dtype: str, seeded: bool, eager: bool = True) -> int:
    """Bytes a parameter at the build's peak (module doc)."""
    dtype_bytes = DTYPE_BYTES[dtype]
    widened = FP16_WIDENED if dtype == "fp16" else 0
    held = 8 if seeded else 0
    ort = dtype_bytes + widened
    reference = (dtype_bytes + widened + (4 + dtype_bytes if seeded else 0)) if eager else 0
    return held + ort + reference


def int4_bytes(spec: DecoderSpec) -> float:
    """Bytes ONNX Runtime holds for one int4 weight (``INT4_COPIES`` x (half a byte + the block's scale in the dtype
    and, asymmetric, its half-byte zero point, shared by ``block_size`` weights)).
    """  # noqa: D205
    block = spec.storage.block_size or DEFAULT_BLOCK_SIZE
    per_block = DTYPE_BYTES[spec.dtype] + (0 if spec.storage.symmetric else 0.5)
    return INT4_COPIES * (0.5 + per_block / block)


def _session(spec: DecoderSpec, shapes: dict[str, tuple[int, ...]]) -> float:
    """Bytes a parameter ONNX Runtime's session holds, averaged over the model (``_per_parameter``'s ``ort`` part)."""
    whole = DTYPE_BYTES[spec.dtype] + (FP16_WIDENED if spec.dtype == "fp16" else 0)
    if spec.storage.format != "int4":
        return whole
    count = sum(math.prod(shape) for shape in shapes.values())
    quantized = sum(math.prod(shape) for name, shape in shapes.items() if is_weight(name)
                    or (name == "embed" and spec.storage.tied_embedding_int4))  # fmt: skip
    return whole - (whole - int4_bytes(spec)) * quantized / count


def _packed(spec: DecoderSpec, shapes: dict[str, tuple[int, ...]]) -> float:
    """Bytes of an embedding gathered from its int4 head as the truth keeps it (its packed table; 0 without one)."""
    if spec.storage.format != "int4" or not spec.storage.tied_embedding_int4:
        return 0.0
    return math.prod(shapes["embed"]) * int4_bytes(spec) / INT4_COPIES


def _per_parameter(spec: DecoderSpec, shapes: dict[str, tuple[int, ...]], seeded: bool, eager: bool) -> float:
    """Bytes a parameter at the build's peak, averaged over the model (``per_parameter``; int4 projections, and an
    embedding gathered from the int4 head, hold ``int4_bytes`` in ONNX Runtime in place of the dtype's bytes).
    """  # noqa: D205
    whole = per_parameter(spec.dtype, seeded, eager)
    if spec.storage.format != "int4":
        return whole
    count = sum(math.prod(shape) for shape in shapes.values())
    quantized = sum(math.prod(shape) for name, shape in shapes.items() if is_weight(name)
                    or (name == "embed" and spec.storage.tied_embedding_int4))  # gathered from int4: no dtype copy
    ort = DTYPE_BYTES[spec.dtype] + (FP16_WIDENED if spec.dtype == "fp16" else 0)
    return whole - (ort - int4_bytes(spec)) * quantized / count


def _phase(shapes: dict[str, tuple[int, ...]], i: int) -> int:
    """Layer i's float64 weights held at once by the truth's pass (``decoder.phases``): the attention's, then one
    dense MLP projection at a time once the attention's are gone, each beside the layer's other weights (its norms).
    """  # noqa: D205
    prefix = f"layers.{i}."
    sizes = {k[len(prefix) :]: math.prod(v) for k, v in shapes.items() if k.startswith(prefix)}
    attention = sum(n for k, n in sizes.items() if k in BLOCK_NAMES)
    mlp = [n for k, n in sizes.items() if k in MLP_NAMES]
    return sum(sizes.values()) - sum(mlp) - attention + max(attention, max(mlp, default=0))


def estimate(spec: DecoderSpec, seeded: bool, eager: bool = True) -> MemoryEstimate:
    """The peak memory of building ``spec`` (seeded weights, or a checkpoint's; ``eager``: with the transformers
    reference); nothing is allocated.
    """  # noqa: D205
    shapes = expected(spec)
    count = sum(math.prod(shape) for shape in shapes.values())
    # an int4 head is read and packed a slice of columns at a time (``export.head_weight``), and so is the embedding
    # gathered from it: its in-flight part is one slice, not the vocabulary (Gemma 4's 262144 x 5376: 1.4e9 values)
    sliced = {"lm_head", "embed"} if spec.storage.tied_embedding_int4 else {"lm_head"}
    part = EXPORT_HEAD_SLICE_BYTES // 4
    largest = max(min(math.prod(shape), part) if spec.storage.format == "int4" and name in sliced else
                  math.prod(shape) for name, shape in shapes.items())  # fmt: skip
    layer = max((_phase(shapes, i) for i in range(spec.num_layers)), default=0)
    head = min(HEAD_SLICE_BYTES, 8 * spec.hidden_size * spec.vocab_size)
    resident = 8 * layer + head + head // 2
    export = (8 * count if seeded else 0) + EXPORT_BYTES * largest
    if spec.storage.format == "int4":  # the head's packed slices and their join (``linear.joined_columns``)
        export += int(2 * spec.vocab_size * spec.hidden_size * int4_bytes(spec) / INT4_COPIES)
    runs = scenarios(spec)
    # Every scenario's slots are judged together (``verify.verify_decoder``: one float64 pass for all, an int4
    # decoder's unquantized pass let go before the truth's): one pass's logits in float64, transformers' of one call,
    # the truth's hidden states of every call (a call recomputed whole at most); one layer's widest activations of one
    # call at a time (the MLP's, the hidden states; a mixture's portable graph computes every expert for every token:
    # E times the MLP's, and E outputs); the runtime's logits of every call, float32, held meanwhile.
    rows = [len(s.prompts) * (max(s.prompts) + s.steps) for s in runs]  # each scenario's token-rows
    slots, widest = sum(rows), max(rows)
    # a scenario's calls are one run when they extend one another under the same tables (every layer's positions
    # static), else each recomputed from its start at most
    static = all(regime_kind(p) == "static" for p in spec.position_specs())
    states = slots if static else sum(n * (s.steps + 1) for n, s in zip(rows, runs, strict=True))
    inner = 0
    for each in spec.layers:  # the widest layer's feed-forward
        ffn = each.ffn
        inner = max(inner, ffn.experts * (3 * ffn.inner + spec.hidden_size) if ffn.kind == "moe" else 3 * ffn.inner)
    heads = max(each.attention.num_heads for each in spec.layers)
    scores = max(len(s.prompts) * (max(s.prompts) + s.steps) ** 2 for s in runs) * heads  # a run's [b, H, s, s]
    activations = 8 * ((slots + (widest if eager else 0)) * spec.vocab_size + widest * (inner + 8 * spec.hidden_size)
                       + states * spec.hidden_size + SCORE_COPIES * scores) + 4 * min(COMPARE_BYTES,
                       8 * widest * spec.vocab_size)  # fmt: skip
    running = RUNTIME_LOGIT_BYTES * slots * spec.vocab_size + math.ceil(_packed(spec, shapes))
    workspace = 4 * HEAD_BUFFERS[bool(spec.logit_scale or spec.final_softcap)] * widest * spec.vocab_size
    return MemoryEstimate(count, _per_parameter(spec, shapes, seeded, eager), activations, resident, export,
                          _session(spec, shapes), running, workspace)  # fmt: skip


def size(count: int) -> str:
    """Bytes in binary units: ``1.5 GiB``, ``640 MiB``."""
    for unit, scale in (("TiB", 2**40), ("GiB", GiB)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count / MiB:.0f} MiB"


def parse_size(text: str) -> int:
    """``8G``, ``512MiB``, ``8589934592`` -> bytes (binary units); SpecError naming ``ROPEEXPORT_MEMORY_LIMIT``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE | re.ASCII)
    if match is None or float(match[1]) <= 0:
        raise SpecError(ENV, f"must be a size such as 8G, 512M or a count of bytes, got {text!r}")
    return int(float(match[1]) * 1024 ** " KMGT".index(match[2].upper() or " "))


def _cgroup_limit() -> int | None:
    """The cgroup's memory limit in bytes (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None when unlimited."""
    candidates = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        with open("/proc/self/cgroup") as f:  # v2: "0::/path", the process's own cgroup below the mount
            own = next((line.strip()[3:] for line in f if line.startswith("0::")), "")
        if own not in ("", "/"):
            candidates.insert(0, f"/sys/fs/cgroup{own}/memory.max")
    except OSError:
        pass
    for path in candidates:
        try:
            with open(path) as f:
                text = f.read(64).strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # v1 writes a huge number for "no limit", v2 writes "max"
            return int(text)
        if text == "max":
            return None
    return None


def available() -> tuple[int | None, str]:
    """(bytes a build may use, where the figure comes from); (None, "") when nothing can be found."""
    text = os.environ.get(ENV, "")
    if text.strip():
        return parse_size(text), f"{ENV}={text.strip()}"
    found: list[tuple[int, str]] = []
    try:
        found.append((os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "physical memory"))
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        pass
    limit = _cgroup_limit()
    if limit is not None:
        found.append((limit, "the cgroup's memory limit"))
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found.append((soft, "ulimit -v"))
    except (ImportError, OSError, ValueError):
        pass
    return min(found) if found else (None, "")


def check_memory(spec: DecoderSpec, seeded: bool, field: str, eager: bool = True) -> MemoryEstimate:
    """The estimate, after checking it fits ``available()``; else SpecError naming ``field`` (where the config came
    from: `hf_config`, `preset` or `checkpoint`) with both figures and how to shrink the build.
    """  # noqa: D205
    need = estimate(spec, seeded, eager)
    have, where = available()
    if have is not None and need.total > have:
        if seeded:
            remedy = "shrink it with `num_layers`, `hidden_size` or `vocab_size` (a tiny model of the same config)"
        elif eager:
            remedy = ("a checkpoint is built at its own size: leave out the transformers reference (--no-eager, "
                      "eager=False) or build it on a machine with more memory")  # fmt: skip
        else:
            remedy = "a checkpoint is built at its own size: build it on a machine with more memory"
        where = where if where.startswith(ENV) else f"{where}; {ENV} overrides it"
        raise SpecError(field, f"building this decoder needs {need.describe()}, more than the {size(have)} here "
                        f"({where}); {remedy}")  # fmt: skip
    return need
