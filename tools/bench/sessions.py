"""ONNX Runtime entries: every compared session shares one set of options and runs with IO binding.

The runner itself is the library's ``ropeexport.runtimes.iobinding.IoBindingRunner`` (feeds bound without a copy,
outputs preallocated, ``run_with_iobinding`` per call), as a server runs an artifact. Only the ``fused_run``
experiment calls ``session.run`` instead, letting ORT allocate the outputs each call.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from ropeexport.runtimes.iobinding import IoBindingRunner
from ropeexport.runtimes.iobinding import session_options as runner_options

from .timing import Entry, failed


def session_options(args: argparse.Namespace, **changes: Any) -> ort.SessionOptions:
    """The options every compared session shares; ``changes``: threads, opt_level, profile_prefix.

    Those of ``IoBindingRunner`` (``--threads`` intra-op threads, one inter-op thread, sequential, no spinning):
    spinning threads would keep a core busy after the call and slow whichever entry runs next.
    """
    return runner_options(
        changes.get("threads", args.threads),
        optimization=changes.get("opt_level", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        profile_prefix=changes.get("profile_prefix"),
    )


def bound_runner(model: bytes, feeds: dict[str, np.ndarray], so: ort.SessionOptions) -> IoBindingRunner:
    """An ``IoBindingRunner`` on ``model`` bound to ``feeds`` (one plain run shapes its outputs and warms it up).

    The feeds are not checked against the model: the floor graph declares no input shapes, and every entry's output
    is compared with the shipped artifact's instead (``timing.sanity``).
    """
    runner = IoBindingRunner(model, so, check=False)
    # Exporters may rename inputs: match by position when the names differ.
    if set(runner.input_names) != set(feeds):
        feeds = dict(zip(runner.input_names, feeds.values(), strict=True))
    runner.bind(feeds)
    return runner


def ort_entry(
    name: str, what: str, model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], args: argparse.Namespace, **kw
) -> Entry:
    """A bound runner as an entry (``kw``: binding, threads, opt_level); build errors are recorded, not raised.

    ``binding=False`` times ``session.run(None, feeds)`` on the same session instead of ``run_with_iobinding``.
    """
    binding = kw.pop("binding", True)
    info = kw.pop("info", {})
    try:
        data = model if isinstance(model, bytes) else model.SerializeToString()
        runner = bound_runner(data, feeds, session_options(args, **kw))
    except Exception as exc:
        return failed(name, what, exc, **info)
    if binding:
        return Entry(name, what, runner.run, info=info, outputs=lambda: list(runner.outputs.values()))
    last = [list(runner.outputs.values())]

    def plain_run() -> None:
        last[0] = runner.session.run(None, runner.feeds)

    return Entry(name, what, plain_run, info=info, outputs=lambda: last[0])


def initializer_bytes(model: onnx.ModelProto) -> int:
    """Bytes of every initializer (the tables an artifact stores)."""
    return int(sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer))
