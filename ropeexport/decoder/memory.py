"""The memory a decoder build holds at its peak, estimated from the spec before anything is allocated.

``estimate(spec, seeded)`` is the figure; ``available()`` what this machine lends; ``check_memory`` refuses a build
whose estimate does not fit, naming both figures and how to shrink it. The peak is the verification: every weight is
held at once several times over (bytes a parameter, ``PER_PARAMETER``):

- the weights the build holds: seeded draws in float64 (8) or a checkpoint's tensors in float32 (4);
- the float64 oracle's copy of them, rounded to the dtype (8);
- four copies in the dtype (4 x 4 or 4 x 2): ONNX Runtime's session, and transformers' eager model, the copy a
  scenario runs and the next copy while it is made;
- fp16 only, 14 more (measured): the CPU runs fp16 matmuls on float32 copies (ONNX Runtime packs float32 weights,
  torch widens them);

plus each call's activations (``rows`` x ``tokens`` x vocab logits in float64, three times: the oracle's, the
runtime's widened and transformers'), all of it times ``MARGIN`` (what the allocator keeps of the buffers freed
before the peak: the export's rounded copies), plus ``BASE`` (the interpreter with torch, transformers and
onnxruntime imported).

Measured (peak RSS by ``/usr/bin/time``, estimate beside it; llama, seeded unless said, transformers reference on):
26.3M parameters in 8 layers, vocab 1000: fp32 1315 MiB (estimate 1546, x1.18), fp16 1449 MiB (1720, x1.19); 27.2M
parameters, most in a 50000-word vocabulary: fp32 1422 MiB (1862, x1.31), fp16 1542 MiB (2041, x1.32), from a
checkpoint fp32 1318 MiB (1743, x1.32); 13k parameters: 502 MiB (602, x1.20). Past the imports the estimate is 11 to
13 % above a layer-heavy build's (a real model's shape). ``tests/decoder/test_memory.py`` measures a small build
against it.

``ROPEEXPORT_MEMORY_LIMIT`` (bytes, or a size such as ``8G``: binary units) replaces what ``available()`` finds:
physical memory, the cgroup's memory limit and ``ulimit -v``, whichever is smallest.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from ropeexport.decoder.checkpoint import expected
from ropeexport.decoder.scenarios import scenarios
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import SpecError

ENV = "ROPEEXPORT_MEMORY_LIMIT"
MiB, GiB = 2**20, 2**30
BASE = 600 * MiB  # measured 502 MiB: a 13k-parameter decoder's whole build, transformers reference included
MARGIN = 1.15
FP16_EXTRA = 14
DTYPE_BYTES = {"fp32": 4, "fp16": 2}
LOGIT_COPIES = 3


@dataclass(frozen=True)
class MemoryEstimate:
    """A build's peak (module doc): ``parameters`` x ``per_parameter`` + ``activations``, times MARGIN, plus BASE."""

    parameters: int
    per_parameter: int
    activations: int

    @property
    def total(self) -> int:
        """The estimate in bytes."""
        return BASE + math.ceil(MARGIN * (self.parameters * self.per_parameter + self.activations))

    def describe(self) -> str:
        """``about 361 GiB (8.03e+09 parameters x 32 bytes, the weights held four to six times over)``."""
        return (f"about {size(self.total)} ({self.parameters:.3g} parameters x {self.per_parameter} bytes: the weights "
                "as built, the float64 oracle's copy, ONNX Runtime's and transformers' copies)")  # fmt: skip


def per_parameter(dtype: str, seeded: bool) -> int:
    """Bytes a parameter at the build's peak (module doc)."""
    held = 8 if seeded else 4
    return held + 8 + 4 * DTYPE_BYTES[dtype] + (FP16_EXTRA if dtype == "fp16" else 0)


def estimate(spec: DecoderSpec, seeded: bool) -> MemoryEstimate:
    """The peak memory of building ``spec`` (seeded weights, or a checkpoint's); nothing is allocated."""
    count = sum(math.prod(shape) for shape in expected(spec).values())
    runs = scenarios(spec)
    rows = max(len(s.prompts) for s in runs)
    tokens = max(max(s.prompts) + s.steps for s in runs)
    # Per call: the logits three times in float64, and one layer's widest activations (the MLP's, the hidden states;
    # a mixture's portable graph computes every expert for every token: E times the MLP's, and E outputs).
    inner = 3 * spec.intermediate_size
    if spec.num_experts:
        inner = spec.num_experts * (inner + spec.hidden_size)
    width = LOGIT_COPIES * spec.vocab_size + inner + 8 * spec.hidden_size
    activations = 8 * rows * tokens * width
    return MemoryEstimate(count, per_parameter(spec.dtype, seeded), activations)


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


def check_memory(spec: DecoderSpec, seeded: bool, field: str) -> MemoryEstimate:
    """The estimate, after checking it fits ``available()``; else SpecError naming ``field`` (where the config came
    from: `hf_config`, `preset` or `checkpoint`) with both figures and how to shrink the build.
    """  # noqa: D205
    need = estimate(spec, seeded)
    have, where = available()
    if have is not None and need.total > have:
        if seeded:
            remedy = "shrink it with `num_layers`, `hidden_size` or `vocab_size` (a tiny model of the same config)"
        else:
            remedy = "a checkpoint is built at its own size: build it on a machine with more memory"
        where = where if where.startswith(ENV) else f"{where}; {ENV} overrides it"
        raise SpecError(field, f"building this decoder needs {need.describe()}, more than the {size(have)} here "
                        f"({where}); {remedy}")  # fmt: skip
    return need
