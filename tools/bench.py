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
as a server runs them), ``peer`` (``torch.onnx.export`` of ``HFRotary`` in tools/bench/peers.py, same session
options and binding), ``eager`` and ``torch_compile`` (``HFRotary`` in PyTorch; ropeexport's eager reference
recomputes float64 angles per call and is a correctness oracle, not a serving path).

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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The code lives in the package tools/bench/, one section a module (its __init__ lists them); importing it sets
# OMP_WAIT_POLICY=PASSIVE before torch loads.
from bench.cli import main as run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """The benchmark: ``bench.cli.main`` (scenarios, tables, JSON) with this module's docstring as ``--help``."""
    return run(argv, description=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
