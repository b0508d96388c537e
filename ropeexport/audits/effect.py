"""What a finding does to the model as its users run it: the logits with the finding's sites as they are against the
logits with just those sites repaired (``fix.repair``), each model run with its own cache filled by its own prefill to
the far end of its context (``audits.runs``: every switch and window edge scored on the way, several draws at the
end). The reported effect is the worst window: max |logits_original - logits_fixed| there, over max
|logits_original| there (the logit scale), its place and the logits' element type (``advice`` turns it into a
severity); every place's figure is kept (``places``). A model that cannot be run so, or a finding whose repair graft
does not make, says why instead (``not_measured``); the finding stays. A plan that stops short of the far end (a
cache past ``prove.CACHE_GIB``, a model without a cache of its own longer than ``runs.LONGEST``) says so (``short``,
``up_to``): what it measured is a lower bound, never called harmless (``advice.severity``).

The original model is run once per audit (``Measure``: its windows kept), each finding's repaired model once; the
repaired one is written beside them with its weights copied block by block (``model.write_model``), and one session
of one model is held at a time.
"""  # noqa: D205

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.layers import Encodings
from ropeexport.audits.model import load_model, ort_reason, write_model
from ropeexport.audits.runs import Place, Plan, compare, plan, run
from ropeexport.errors import SpecError

DTYPE_NAMES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16",
               "tensor(double)": "float64"}  # the output's element type, as the severity names it (``advice``)


class Measure:
    """The effects of one audit's findings on one model (module doc): the plan made once for every finding's worst
    position and the model's attention windows, the original's windows run once.
    """  # noqa: D205

    def __init__(self, source: Path, encodings: Encodings, worst: list[int], windows: list[int],
                 threads: int | None = None) -> None:  # fmt: skip
        self.source, self.encodings, self.threads = source, encodings, threads
        self.plan: Plan | str = plan(source, encodings.first, worst, windows)
        self._original: list[dict[Place, np.ndarray]] | str | None = None

    def original(self) -> list[dict[Place, np.ndarray]] | str:
        """The original's windows (run on first use), or why it does not run."""
        if self._original is None:
            assert not isinstance(self.plan, str)
            self._original = self._run(self.source)
        return self._original

    def _run(self, path: Path) -> list[dict[Place, np.ndarray]] | str:
        assert not isinstance(self.plan, str)
        try:
            return run(path, self.plan, self.encodings.first, self.threads)
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            return f"ONNX Runtime refuses the model or a call of its run ({ort_reason(exc)})"

    def finding(self, records: list[dict[str, Any]], sites: list[int], name: str | None = None) -> dict[str, Any]:
        """The effect of repairing the finding ``name`` at ``records[i]`` for i in ``sites`` (module doc)."""
        from ropeexport.audits.fix import repair

        if isinstance(self.plan, str):
            return {"not_measured": self.plan}
        try:
            model, _ = repair(load_model(self.source), self.source, records, self.encodings, sites,
                              None if name is None else {name})  # fmt: skip
        except SpecError as exc:
            return {"not_measured": f"its repair is not one graft makes ({exc.message})", "unrepairable": exc.message}
        original = self.original()
        if isinstance(original, str):
            return {"not_measured": original}
        with tempfile.TemporaryDirectory(prefix="ropeexport-effect-") as folder:
            fixed = Path(folder) / "fixed.onnx"
            write_model(model, fixed)  # the weights copied block by block, never held
            del model
            repaired = self._run(fixed)
        if isinstance(repaired, str):
            return {"not_measured": repaired}
        return compare(self.plan, original, repaired) | {"output": "logits", "dtype": self.dtype()}

    def dtype(self) -> str:
        """The logits' element type, as the severity names it."""
        from ropeexport.audits.prove import Signature

        outputs = Signature(self.source).get_outputs()
        logits = next((o for o in outputs if o.name == "logits"), outputs[0])
        return DTYPE_NAMES.get(logits.type, logits.type)


def between(first: Path, second: Path, encodings: Encodings, threads: int | None = None) -> dict[str, Any]:
    """Two models run alike as users run them (module doc): the difference of the second from the first, per place
    and the worst (graft's record of the original against the grafted model); or why they cannot be run so.
    """  # noqa: D205
    measure = Measure(first, encodings, [], [], threads)
    if isinstance(measure.plan, str):
        return {"not_measured": measure.plan}
    one = measure.original()
    two = measure._run(second)
    for got in (one, two):
        if isinstance(got, str):
            return {"not_measured": got}
    assert not isinstance(one, str) and not isinstance(two, str)
    return compare(measure.plan, one, two) | {"output": "logits", "dtype": measure.dtype()}
