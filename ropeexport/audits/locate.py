"""Where a model's hidden states first depart from the proof's truth: the residual stream compared stage by stage.

When the original and the grafted model miss the float64 decoder by the same amount, the difference lies outside the
positional encoding (``proof_verdict.outside``); this says where the model first differs. One call of the proof (the
first the model failed; 8 tokens) is run on a copy of the model's graph that gives as outputs every floating-point
value a node of the main graph computes from the call's inputs (the copy holds no weights: it reads the model's own data
file, beside which it is written for that one session and removed), and recomputed in float64 with the residual
stream traced (``Truth.stages``: ``oracle.decoders_float64``'s ``trace`` for ropeexport's decoder, hooks on
transformers' float64 model for the transformers truth; after the embedding, after each layer's attention (a hybrid
layer's token mixer) and after its MLP; a layer's whole block where the two cannot be told apart). A stage is found
in the model when one of its values of the stage's size ([1, n, hidden] in any layout) is within the dtype's
tolerance of it (``decoder verify``'s, even for a quantized model: int8 activations show as a departure, of their
size), relative to the stage's largest value.

The answer: the last stage found and the stage after it, where the difference first shows ("layer 1's MLP"), with
the nearest value's distance from it; the first stage itself when none is found ("already at the embedding"). A
model that computes no value for a stage (a fused norm that keeps the sum inside) cannot be seen there: a stage not
found after the last found one may then only hide a later one. None when the model computes no value of the stages'
size, or when its graph cannot be run so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.report.words import error


def _computed(graph: Any) -> list[str]:
    """Every value a node of ``graph`` (an ``onnx.GraphProto``) computes from the graph's inputs, in node order:
    what depends on weights alone (a dequantized weight, a constant folded at run time) is left out.
    """  # noqa: D205
    live = {i.name for i in graph.input}
    out: list[str] = []
    for node in graph.node:
        if any(name in live for name in node.input) or any(a.HasField("g") or a.graphs for a in node.attribute):
            for name in node.output:
                if name:
                    live.add(name)
                    out.append(name)
    return out


def model_values(path: Path, feeds: Callable[[Any], dict[str, np.ndarray]]) -> dict[str, np.ndarray] | str:
    """{name: value} of every floating-point value the model at ``path`` computes on a call (``feeds(session)``: its
    inputs) (module doc), or why ONNX Runtime would not run the copy.
    """  # noqa: D205
    import onnx
    import onnxruntime as ort

    from ropeexport.audits.model import ort_reason, quiet

    proto = onnx.load(str(path), load_external_data=False)
    declared = {o.name for o in proto.graph.output}
    names = [n for n in _computed(proto.graph) if n not in declared]
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)  # ORT infers their types
    copy = path.with_name(f".{path.stem}.locate-{os.getpid()}.onnx")  # beside the data file it reads
    try:
        onnx.save_model(proto, str(copy))
        del proto
        session = ort.InferenceSession(str(copy), quiet()[0], providers=["CPUExecutionProvider"])
        wanted = [o.name for o in session.get_outputs() if o.type in ("tensor(float)", "tensor(float16)")]
        got = session.run(wanted, feeds(session), quiet()[1])
    except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
        return ort_reason(exc)
    finally:
        copy.unlink(missing_ok=True)
    return dict(zip(wanted, got, strict=True))


def first_difference(values: dict[str, np.ndarray], stages: list[tuple[Any, np.ndarray]], tolerance: float,
                     who: str = "the model",
                     against: str = "the float64 recompute") -> dict[str, Any] | None:  # fmt: skip
    """Where the model's ``values`` first depart from the float64 ``stages`` ((``oracle.Stage``, h [1, n, hidden]),
    in order), judged at ``tolerance`` of each stage's largest value (module doc), said of ``who`` against ``against``
    (the words of what traced the stages); None when no value has the stages' size.
    """  # noqa: D205
    size = stages[0][1].size
    candidates = [np.asarray(v, np.float64).reshape(-1) for v in values.values() if v.size == size]
    if not candidates:
        return None
    held = np.stack(candidates)  # [m, n x hidden]
    found = []
    for _, h in stages:
        truth = h.reshape(-1)
        scale = float(np.max(np.abs(truth))) or 1.0
        found.append(float(np.min(np.max(np.abs(held - truth), axis=1))) / scale)
    seen = [i for i, rel in enumerate(found) if rel <= tolerance]
    if not seen:  # the first stage already: its nearest value is the figure
        first = stages[0][0]
        return {"agrees_through": None, "first_differs": first.words(), "layer": first.layer, "part": first.part,
                "relative": found[0],
                "text": f"{who}'s hidden states depart from {against} already at {first.words()} "
                f"({error(found[0])} of the residual stream's scale there)"}  # fmt: skip
    last = seen[-1]
    agree = stages[last][0].words()
    if last == len(stages) - 1:
        return {"agrees_through": agree, "first_differs": "the final norm or the output head",
                "text": f"{who}'s hidden states agree with {against} through {agree}: the difference "
                "first shows after the last layer (the final norm or the output head)"}  # fmt: skip
    stage, rel = stages[last + 1][0], found[last + 1]
    return {"agrees_through": agree, "first_differs": stage.words(), "layer": stage.layer, "part": stage.part,
            "relative": rel,
            "text": f"{who}'s hidden states agree with {against} through {agree} and first depart from "
            f"it in {stage.words()} ({error(rel)} of the residual stream's scale there)"}  # fmt: skip
