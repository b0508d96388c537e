"""ONNX Runtime with IO binding: feeds bound once without a copy, outputs written into arrays allocated once.

The way a server runs an artifact on the CPU: ``session.run`` allocates fresh outputs on every call, while
``run_with_iobinding`` writes into buffers the caller owns (a KV cache, a preallocated activation), which on small
calls is most of the difference (``tools/bench.py``, ``fused_run`` experiments). The benchmark times its ONNX Runtime
entries through this class, and serving code can reuse it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from ropeexport.runtimes.base import FeedChecker, Runner
from ropeexport.runtimes.ort import CPU, load_onnxruntime, open_session

if TYPE_CHECKING:
    import onnxruntime

PROVIDERS = [CPU]  # outputs are numpy arrays in host memory: a GPU would need device buffers


def session_options(
    threads: int | None = None,
    *,
    optimization: onnxruntime.GraphOptimizationLevel | None = None,
    profile_prefix: str | None = None,
    spinning: bool = False,
) -> onnxruntime.SessionOptions:
    """Session options for timed or served calls: threads fixed, no spinning, ORT_SEQUENTIAL.

    - ``intra_op_num_threads`` = ``threads`` (None: ORT's default, one per physical core). Decode-sized calls are
      often faster on one thread: handing rows to a second thread costs more than it saves (docs/status/speed.md).
    - ``inter_op_num_threads`` = 1 and ``ORT_SEQUENTIAL``: an artifact is one chain of nodes, with no independent
      branches for a second pool to run.
    - ``session.intra_op.allow_spinning`` and ``session.inter_op.allow_spinning`` = ``"0"`` unless ``spinning``: by
      default idle ORT threads busy-wait after each call, keeping cores busy that the caller's next work (another
      session, PyTorch, a timing baseline) needs. A server loop that owns its cores wants them spinning
      (``decoder.serve``): the next call starts without waking them.
    - ``graph_optimization_level`` = ``optimization`` (None: ``ORT_ENABLE_ALL``, ORT's own default).
    - ``log_severity_level`` = 3: errors only; a failure still reaches the caller as an exception.
    - ``profile_prefix``: turns on ORT's profiler, writing ``<prefix>_<date>.json`` at ``session.end_profiling()``.
    """
    ort = load_onnxruntime()
    options = ort.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimization is None else optimization
    )
    spin = "1" if spinning else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    options.log_severity_level = 3
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


class IoBindingRunner(Runner):
    """An ONNX Runtime CPU session bound to its inputs and to preallocated outputs; ``run()`` is one call.

    Shapes are whatever the model declares (a RoPE artifact: query [b, heads, s, d], key [b, kv_heads, s, d],
    position_ids int64 [b, s] -> query_out, key_out of the query and key shapes). ``bind(feeds)`` checks the feeds
    (names, dtypes, ranks, dims, positions in [0, max_positions) as ``FeedChecker`` does for every runner), wraps each
    input as an ``OrtValue`` over the caller's own memory (no copy; a non-contiguous array is made contiguous once),
    and binds every output to a numpy array allocated here: ``outputs`` maps output names to those arrays. The output
    arrays are allocated when the input shapes change, shaped by one plain ``session.run`` on the feeds (which also
    warms the session up); a later ``bind`` with the same input shapes writes into the same arrays.

    ``run()`` is ``run_with_iobinding``: no check, no allocation; it returns ``outputs``, overwritten by every call.
    Writing new values in place into the bound input arrays (``feeds``: the caller's arrays, or their contiguous
    copies) and calling ``run()`` again is the cheapest loop, but those values are not checked: the artifact's
    in-graph guard is then what refuses a position past the table. ``infer(feeds)`` (every runner's interface)
    checks, binds, runs and returns copies; the first call with new input shapes runs the model twice.

    Session options: ``options``, or ``session_options(threads)`` (thread counts, no spinning, sequential execution;
    see there for why). CPU only. ``check=False`` skips ``FeedChecker``, for graphs that declare no input shapes.
    """

    name = "ort-iobinding"

    def __init__(
        self,
        model: str | Path | bytes,
        options: onnxruntime.SessionOptions | None = None,
        *,
        threads: int | None = None,
        check: bool = True,
    ) -> None:
        ort = load_onnxruntime()
        self.ort = ort
        if isinstance(model, bytes):
            self.model_path = None
            self.checker = FeedChecker(onnx.load_from_string(model)) if check else None
            source: str | bytes = model
        else:
            self.model_path = Path(model)
            self.checker = FeedChecker(onnx.load(str(model), load_external_data=False)) if check else None
            source = str(model)
        options = options if options is not None else session_options(threads)
        self.session = open_session(source, options, PROVIDERS)
        self.version = ort.__version__
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.feeds: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self._shapes: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None
        self._binding: Any = None
        self._values: list[Any] = []  # the OrtValues point into numpy memory: kept alive as long as the binding

    def describe(self) -> str:
        """For example ``onnxruntime 1.31.1 CPUExecutionProvider, IO binding``."""
        return f"onnxruntime {self.version} {PROVIDERS[0]}, IO binding"

    def bind(self, feeds: dict[str, np.ndarray]) -> None:
        """The feeds, checked and bound, with the preallocated outputs bound beside them (new ones for new shapes)."""
        if self.checker is not None:
            self.checker.check(feeds)
        self._bind(feeds)

    def _bind(self, feeds: dict[str, np.ndarray]) -> None:
        ort = self.ort
        inputs = {name: np.ascontiguousarray(array) for name, array in feeds.items()}
        shapes = {name: (array.shape, array.dtype) for name, array in inputs.items()}
        if shapes != self._shapes:
            first = self.session.run(self.output_names, inputs)
            self.outputs = {name: np.empty_like(a) for name, a in zip(self.output_names, first, strict=True)}
            self._shapes = shapes
        binding = self.session.io_binding()
        values = []
        for name, array in inputs.items():
            value = ort.OrtValue.ortvalue_from_numpy(array)
            values.append(value)
            binding.bind_ortvalue_input(name, value)
        for name, array in self.outputs.items():
            value = ort.OrtValue.ortvalue_from_numpy(array)
            values.append(value)
            binding.bind_ortvalue_output(name, value)
        self.feeds, self._binding, self._values = inputs, binding, values

    def run(self) -> dict[str, np.ndarray]:
        """One ``run_with_iobinding`` on the bound feeds; ``outputs``, overwritten in place."""
        if self._binding is None:
            raise RuntimeError("IoBindingRunner.run() before bind(feeds)")
        self.session.run_with_iobinding(self._binding)
        return self.outputs

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        # infer() has checked the feeds. Copies: the caller may keep them across calls, which overwrite ``outputs``.
        self._bind(feeds)
        return {name: array.copy() for name, array in self.run().items()}

    def close(self) -> None:
        """Drop the binding and the references it holds to the feeds and outputs."""
        self._binding, self._values, self.feeds = None, [], {}
