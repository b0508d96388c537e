"""Serving speed and accuracy of ropeexport's decoder against the paths people serve today (issue 15).

    python tools/bench_serving.py --out /tmp/serving                 # small and ~100M checkpoints (~25 minutes)
    python tools/bench_serving.py --quick --out /tmp/serving-quick   # tiny checkpoint, every code path (the test)
    python tools/bench_serving.py --shapes small --work /tmp/w --out /tmp/serving   # one checkpoint, models kept

Checkpoints: models/llama-3.1-8b.toml's config (llama3 RoPE scaling, 131072 positions) shrunk, random weights
matrices normal(0, 0.1) and norm weights 1 + normal(0, 0.1) (attention scores of order one, so a position error
shows), seeded, with a WordLevel tokenizer, all made here (``small``: 4 layers, hidden 512, 8/2 heads,
45M parameters; ``100m``: 12 layers, hidden 768, 12/4 heads, 125M). ONNX Runtime CPU, fp32, 2 threads everywhere.

Entries: ``ours-fused`` / ``ours-gqa`` (``ropeexport.build_decoder`` served by ``DecoderSession``), ``og-builder``
(``onnxruntime_genai.models.builder -p fp32 -e cpu`` served by onnxruntime-genai), ``ours-fused@genai`` (our
folder served by onnxruntime-genai: the same engine), ``torch-dynamo`` (``torch.onnx.export(dynamo=True)`` with
its cache, ORT with IO binding), ``transformers`` (eager PyTorch, DynamicCache); int4, like for like:
``og-builder-int4`` (the builder's ``-p int4 -e cpu`` at its defaults: MatMulNBits block 32, symmetric, accuracy
level 4, lm_head included), ``ours-int4-fused`` / ``ours-int4-gqa`` (``build_decoder`` with those same settings) and
``ours-int4-a0-gqa`` (ours at its own defaults: accuracy level 0). tools/serving/engines.py has each,
tools/serving/checkpoints.py what the builder's int4 defaults are and where they were read.
Every ORT entry lets its idle threads spin (ORT's and onnxruntime-genai's default, ``DecoderSession``'s too); the
experiments ``ours-fused-nospin`` / ``ours-gqa-nospin`` show what sleeping threads cost.

Figures: prefill tokens/s at 512 and 2048 tokens; decode ms/token (median of 16 steps) after prompts of 128 and 2048
tokens; peak RSS; logits error against the float64 recompute (``ropeexport.decoder.oracle``) at the last 16
positions of a 4096-token prompt (positions 0..4095) and of a 16-token prompt ending at position 100000, computed
through each entry's cache (prefill, then single-token steps fed the prompt); decode time over the time to copy the
bytes a decode step must read (tools/serving/limits.py; fp32 entries only). onnxruntime-genai derives positions
from the sequence length, so its 100k figure is not a logits error: the builder's stored cos/sin rows at 100000
against float64. int4 entries, two figures never mixed: the logits error against the float64 recompute with the
dequantized weights the models hold (positional fidelity; the builder holds the same values), and the quantization
cost against the float64 recompute of the unquantized checkpoint (reported, not judged).

Timing: the entries share one process (never one that exported) and run in alternating rounds (A B C .. C B A),
with the limits timed in the same rounds; figures are medians over the quiet rounds (tools/bench/timing.py's rule)
and every ratio is a median of per-round ratios, with quartiles (ours against the builder's model of the same
weights: og-builder for fp32, og-builder-int4 for int4). Peak memory: each entry alone in a fresh process. ORT's
profiler runs on ropeexport's sessions and the builder's (op types, nodes run per decode step). The load average
before and after is recorded: the machine may be shared. Writes ``serving.json`` (every number, versions, CPU, the
command) and ``serving.md`` under ``--out`` (``--name`` changes the stem).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from serving.cli import main as run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """The benchmark: ``serving.cli.main`` with this module's docstring as ``--help``."""
    return run(argv, description=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
