"""The speed benchmark behind ``tools/bench.py`` (its docstring says what is measured and how), one section a module.

- ``context``: the dtypes and shapes timed (``FULL``, ``TINY``), the scenario names, the run's shared ``Context``;
- ``timing``: entries, alternating rounds, ratios to the per-round roofline, quiet-round bookkeeping, sanity checks;
- ``roofline``: the numpy copy roofline and ORT's floor (an Identity / ConstantOfShape graph of the same bytes);
- ``sessions``: ONNX Runtime entries (``ropeexport.runtimes.iobinding.IoBindingRunner``, shared session options);
- ``profiles``: ORT's profiler, per operator type;
- ``surgery``: graph variants for the experiments (guards removed, Expand bypassed, fp16 computed in fp32);
- ``peers``: ``HFRotary`` exported with ``torch.onnx.export``, eager PyTorch and ``torch.compile``;
- ``rope``, ``alibi``, ``sinusoidal``: the scenarios and their experiments;
- ``targets``: the targets and findings, in words, from a run's figures;
- ``report``: the printed tables, the ``config`` block, JSON-ready values;
- ``cli``: flags, the scenario loop, the JSON report.
"""

import os

# PyTorch's OpenMP threads spin after each parallel region by default: they would steal the cores of whichever entry
# runs next (ORT, the roofline). Set here, before any module of the package loads torch (and with it libgomp).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
