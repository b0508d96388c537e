"""The serving benchmark behind ``tools/bench_serving.py`` (its docstring says what is measured), one stage a module.

- ``shapes``: the checkpoints (a Llama-3.1 config shrunk: ``small``, ``100m``, ``tiny``) and the run's sizes;
- ``checkpoints``: a seeded random-weight checkpoint with a tokenizer, and every model built from it;
- ``engines``: one greedy-generation interface over DecoderSession, onnxruntime-genai, ORT and transformers;
- ``limits``: the bytes a decode step must read, copied (numpy) and read (an ORT MatMul) in the same rounds;
- ``workers``: what runs in its own process (export, timing rounds, accuracy, peak memory, the float64 truth);
- ``report``: the Markdown tables and the targets' verdicts;
- ``cli``: flags, the per-checkpoint pipeline, the JSON report.
"""

import os

# PyTorch's OpenMP threads spin after each parallel region by default: they would steal the cores of the entry that
# runs next. Set before any module of the package loads torch (and with it libgomp), as tools/bench/ does.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
