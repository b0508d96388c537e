"""Reference outputs in Polygraphy's formats, so a GPU host can check TensorRT against our eager reference.

Usage on that host::

    polygraphy run model.onnx --trt --load-inputs polygraphy/inputs.json --load-outputs polygraphy/reference.json

``inputs.json`` is a list of feed dicts (``polygraphy.json.save_json``) and ``reference.json`` a ``RunResults`` with
one runner, ``ropeexport-eager``: the eager PyTorch reference's outputs for those feeds, written with Polygraphy's own
classes (no TensorRT needed). The call is the artifact kind's first probe that is not part of a sweep.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.recipes import Recipe

RUNNER = "ropeexport-eager"


def save_polygraphy_reference(spec: Any, kind: Recipe, folder: Path, seed: int = 0) -> list[str]:
    """Write ``folder/polygraphy/{inputs,reference}.json``; returns their paths relative to ``folder``."""
    from polygraphy.comparator import RunResults
    from polygraphy.comparator.struct import IterationResult
    from polygraphy.json import save_json
    from polygraphy.logger import G_LOGGER

    probes, _ = kind.probes(spec)
    probe = next((p for p in probes if not p.name.startswith("sweep")), probes[0])
    feeds = {
        name: np.ascontiguousarray(value)
        for name, value in kind.feeds(spec, probe, np.random.default_rng(seed)).items()
    }
    outputs = {name: np.ascontiguousarray(value) for name, value in kind.eager(spec, feeds).items()}
    target = folder / "polygraphy"
    target.mkdir(exist_ok=True)
    severity = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.ERROR  # Polygraphy announces every save at INFO
    logging.getLogger("polygraphy").setLevel(logging.ERROR)
    try:
        save_json([feeds], str(target / "inputs.json"))
        results = RunResults()
        results.append((RUNNER, [IterationResult(outputs=outputs, runner_name=RUNNER)]))
        results.save(str(target / "reference.json"))
    finally:
        G_LOGGER.module_severity = severity
    return ["polygraphy/inputs.json", "polygraphy/reference.json"]
