"""Planted block mistakes shared by the RoPE and bias-family block tests, and which probes see a planted graph."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from ropeexport.block.probes import block_feeds, block_tolerance

OUTPUTS = ("output", "present_key", "present_value")


def top_left_mask(g: Any, window: int = 0, shared: bool = False, chunk: int = 0) -> str:
    """Causal from the query's own index (TensorRT's is_causal), ignoring the cache offset (and the window)."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    s = g.op("Squeeze", [g.op("Shape", ["hidden"], start=1, end=2), g.const("bug_s", i64(0))])
    t = g.op("Squeeze", [g.op("Shape", ["attention_mask"], start=1, end=2), g.const("bug_t", i64(0))])
    zero, one = g.const("bug_zero", np.array(0, np.int64)), g.const("bug_one", np.array(1, np.int64))
    keys = g.op("Unsqueeze", [g.op("Range", [zero, t, one]), g.const("bug_k", i64(0))])
    queries = g.op("Unsqueeze", [g.op("Range", [zero, s, one]), g.const("bug_q", i64(1))])
    real = g.op("Unsqueeze", [g.op("Cast", ["attention_mask"], to=TensorProto.BOOL), g.const("bug_axes", i64(1, 2))])
    return g.op("And", [g.op("LessOrEqual", [keys, queries]), real])


def causal_only(g: Any, mask: Any, window: int = 0, shared: bool = False, chunk: int = 0) -> str:
    """The causal rule alone, attention_mask ignored: ``mask(g)``'s And, its causal side kept (the first input).
    (``chunk``: the mask's signature since Llama 4's chunks; these blocks have none.)
    """  # noqa: D205
    visible = mask(g, window, shared=shared, chunk=chunk)
    return next(n for n in g.nodes if visible in n.output).input[0]


def probes_that_see(spec: Any, kind: Any, model: onnx.ModelProto) -> set[str]:
    """The probes whose call, run on ``model``, differs from the float64 block beyond the block's tolerance."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    tol, seen = block_tolerance(spec), set()
    for probe in kind.probes(spec)[0]:
        feeds = block_feeds(spec, probe, np.random.default_rng(0))
        got = dict(zip(OUTPUTS, session.run(None, feeds), strict=True))
        want = kind.oracle(spec, feeds)
        if any(np.any(np.abs(got[o] - want[o]) > tol.atol + tol.rtol * np.abs(want[o])) for o in want):
            seen.add(probe.name)
    return seen
