"""onnx.reference (the ONNX spec's Python evaluator) as a runner.

Slow, but it implements every op and dtype of the spec, bfloat16 included, which ONNX Runtime's CPU kernels lack.
It is an implementation independent of ONNX Runtime, so its agreement is evidence about the graph itself.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from ropeexport.errors import RuntimeUnavailable
from ropeexport.runtimes.base import Runner


class OnnxReferenceRunner(Runner):
    """Runs a model with ``onnx.reference.ReferenceEvaluator``."""

    name = "onnx-reference"

    def __init__(self, model_path: str | Path) -> None:
        super().__init__(model_path)
        from ropeexport.trt.plugin_op import PluginReference

        # The plugin op of our own domain, so plugin graphs verify here too.
        try:
            self.evaluator = ReferenceEvaluator(onnx.load(str(self.model_path)), new_ops=[PluginReference.op()])
        except NotImplementedError as exc:  # an operator it has no kernel for (com.microsoft's, for one)
            raise RuntimeUnavailable(f"onnx.reference {onnx.__version__} cannot run the model: {exc}") from None
        self.outputs = list(self.evaluator.output_names)

    def describe(self) -> str:
        """For example ``onnx.reference 1.23.2``."""
        return f"onnx.reference {onnx.__version__}"

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.outputs, self.evaluator.run(None, feeds), strict=True))
