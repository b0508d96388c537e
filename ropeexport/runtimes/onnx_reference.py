"""onnx.reference (the ONNX spec's Python evaluator) as a runner.

Slow, but it implements every op and dtype of the spec, bfloat16 included, which ONNX Runtime's CPU kernels lack.
It is an implementation independent of ONNX Runtime, so its agreement is evidence about the graph itself.

It has no kernels outside the spec: a model that uses ONNX Runtime's contrib ops (``com.microsoft``
GroupQueryAttention, MatMulNBits, SkipSimplifiedLayerNormalization, ...) cannot run here, and the runner says so
before anything runs, naming every such op (``RuntimeUnavailable``); so does an op of the spec's default domain the
installed onnx has no implementation of, and a call that reaches an op variant it does not implement.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from ropeexport.errors import RuntimeUnavailable
from ropeexport.runtimes.base import Runner

# Domains onnx.reference carries kernels for besides the default one (onnx.reference.ReferenceEvaluator._load_impl).
OWN_DOMAINS = ("ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "experimental")


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of the subgraphs its nodes hold (If / Loop / Scan bodies), at any depth."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _nodes(sub)


def unsupported_ops(model: onnx.ModelProto, new_ops: list[type]) -> list[str]:
    """The ops ``model`` uses (its graph, subgraphs and local functions) that onnx.reference has no kernel for:
    ``domain.op_type`` for another domain's (``com.microsoft.GroupQueryAttention``), ``op_type (opset N)`` for the
    default domain's; sorted, each once. ``new_ops``: the OpRun classes handed to the evaluator (they count as kernels).
    """  # noqa: D205
    from onnx.reference.op_run import RuntimeContextError
    from onnx.reference.ops import load_op

    opsets = {o.domain or "": o.version for o in model.opset_import}
    handed = {(getattr(op, "op_domain", ""), op.__name__) for op in new_ops}  # an OpRun class: its domain and op
    known = {(f.domain, f.name) for f in model.functions} | handed
    nodes = list(_nodes(model.graph)) + [n for f in model.functions for n in _nodes(onnx.GraphProto(node=f.node))]
    missing: set[str] = set()
    for given, op_type in sorted({(n.domain, n.op_type) for n in nodes} - known):  # each op once, not each node
        domain = "" if given == "ai.onnx" else given
        if domain in OWN_DOMAINS:
            continue
        if domain:
            missing.add(f"{domain}.{op_type}")
            continue
        version = opsets.get("", opsets.get("ai.onnx"))
        try:
            load_op("", op_type, version, evaluator_cls=ReferenceEvaluator)
        except RuntimeContextError:  # implemented by a function of the node's own inputs: built when loaded
            continue
        except NotImplementedError:
            missing.add(f"{op_type} (opset {version})")
    return sorted(missing)


class OnnxReferenceRunner(Runner):
    """Runs a model with ``onnx.reference.ReferenceEvaluator`` (module doc)."""

    name = "onnx-reference"

    def __init__(self, model_path: str | Path) -> None:
        super().__init__(model_path)
        from ropeexport.trt.plugin_op import PluginReference

        model = onnx.load(str(self.model_path))
        new_ops = [PluginReference.op()]  # the plugin op of our own domain, so plugin graphs verify here too
        missing = unsupported_ops(model, new_ops)
        if missing:
            raise RuntimeUnavailable(f"onnx.reference {onnx.__version__} has no kernel for {', '.join(missing)} "
                                     "(ops the model uses)")  # fmt: skip
        try:
            self.evaluator = ReferenceEvaluator(model, new_ops=new_ops)
        except NotImplementedError as exc:  # what the scan above could not see
            raise RuntimeUnavailable(f"onnx.reference {onnx.__version__} cannot run the model: {exc}") from None
        self.outputs = list(self.evaluator.output_names)

    def describe(self) -> str:
        """For example ``onnx.reference 1.23.2``."""
        return f"onnx.reference {onnx.__version__}"

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self.outputs, self.evaluator.run(None, feeds), strict=True))
        except NotImplementedError as exc:  # an op variant (an attribute, a dtype) its kernel does not implement
            first = (str(exc).splitlines() or [""])[0]
            raise RuntimeUnavailable(f"onnx.reference {onnx.__version__} cannot run the model: {first}") from None
