"""Encoding artifacts from the API: specs in (``spec``, ``from_preset``, ``from_hf_config``, ``load_specs``), an
artifact's model in memory (``export``), and artifacts built, verified and reported into a tree (``build``,
``build_all``).
"""  # noqa: D205

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx

from ropeexport import pipeline
from ropeexport.api.shared import Tolerance, _a_spec, _encoding_kind, _index, _names, _path
from ropeexport.batch import Job, OnDone, OnStage, Settings
from ropeexport.batch import build_all as _build_batch
from ropeexport.catalog import recipe_for, spec_from_dict
from ropeexport.errors import SpecError
from ropeexport.pipeline import BuildResult
from ropeexport.presets import Request
from ropeexport.requests import from_hf_config as _hf_requests
from ropeexport.requests import from_presets, from_spec_file, with_overrides
from ropeexport.specs import SpecBase
from ropeexport.store import Store
from ropeexport.tree import artifact_folders, check_tree, is_tree


def spec(encoding: str = "rope", **fields: object) -> SpecBase:
    """One validated spec of ``encoding`` (rope, alibi, t5, ...; see ``ropeexport list``) from its fields.

    ``rx.spec("alibi", num_heads=12, dtype="fp16")``. A field the encoding lacks, or a value out of range, raises
    SpecError naming the field.
    """
    return _a_spec(spec_from_dict({"encoding": encoding, **fields}))


def _specs(requests: list[Request]) -> list[SpecBase]:
    return [_a_spec(spec_from_dict(request.fields)) for request in requests]


def from_preset(
    name: str,
    artifacts: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    graphs: Sequence[str] | None = None,
    **fields: object,
) -> list[SpecBase]:
    """The specs a model preset builds (``ropeexport list --presets``): one per artifact x dtype x graph.

    The card's ``[build]`` lists are used unless ``artifacts``/``dtypes``/``graphs`` are given; ``fields`` override
    every spec's value (``max_positions=32768``; ``scaling_params`` merges into the card's schedule).
    """
    lists = [_names(artifacts, "artifacts"), _names(dtypes, "dtypes"), _names(graphs, "graphs")]
    return _specs(with_overrides(from_presets([name], *lists), fields))


def from_hf_config(
    path: str | Path,
    artifacts: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    graphs: Sequence[str] | None = None,
    **fields: object,
) -> list[SpecBase]:
    """The specs of a transformers ``config.json`` on disk (never fetched): the encoding's first artifact, fp32,
    fused unless given; ``fields`` override the imported values (``encoding="vision_rope"``: the vision tower's 2-D
    RoPE, read from the config's ``vision_config``).
    """  # noqa: D205
    lists = [_names(artifacts, "artifacts"), _names(dtypes, "dtypes"), _names(graphs, "graphs")]
    requests = _hf_requests(_path(path, "hf_config"), lists[0], lists[1], lists[2],
                            vision=fields.get("encoding") == "vision_rope")  # fmt: skip
    return _specs(with_overrides(requests, fields))


def load_specs(path: str | Path) -> list[SpecBase]:
    """The specs of a .json or .toml spec file: one spec, or ``artifacts = [...]`` with shared top-level fields."""
    return _specs(from_spec_file(_path(path, "spec_file")))


def export(spec: SpecBase) -> onnx.ModelProto:
    """The artifact's ONNX model, in memory (tables in float64, rounded once); nothing is run or written."""
    return recipe_for(_a_spec(spec)).export(spec)


def build(
    spec: SpecBase,
    out_dir: str | Path,
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    replace: bool = False,
) -> BuildResult:
    """Export, run, verify and report ``spec`` into ``out_dir/spec.name``: the folder appears whole or not at all.

    ``runtimes``: ort (default), onnx-reference, trt. ``atol``/``rtol`` override the dtype's tolerances: a number for
    every output, or {output: number}. Returns the result (``passed``, ``path``, ``report``: report.json's dict).
    When ``out_dir`` is a tree (it has an index.json), its index is rewritten so it never shows an old verdict. A
    build that fails where ``out_dir/spec.name`` holds a verified artifact leaves that one in place (``kept``).
    """
    out = _path(out_dir, "out_dir")
    check_tree(out)  # an existing folder must be empty or a ropeexport tree, as for build_all and the CLI
    result = pipeline.build(_encoding_kind(runtimes, atol, rtol), _a_spec(spec), out, replace)
    if is_tree(out):
        _index(out)
    return result


def build_all(
    specs: Sequence[SpecBase],
    out_dir: str | Path,
    jobs: int = 1,
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    replace: bool = False,
    on_stage: OnStage | None = None,
    on_done: OnDone | None = None,
    provenance: Sequence[tuple[Mapping[str, object], Mapping[str, str]]] | None = None,
) -> list[BuildResult]:
    """Build every spec into the tree ``out_dir`` (``jobs`` worker processes), then write its index.

    Everything is validated before anything is written: names must be unique, and a name already in the tree must
    hold the same spec unless ``replace``. ``out_dir/index.json`` and ``index.html`` cover every artifact in the
    tree, earlier builds included; they are written even when the batch is interrupted or a build raises. Results
    are in ``specs``' order. ``on_stage(name, stage, done, total)`` and ``on_done(result)`` report progress;
    ``provenance`` gives, per spec, what asked for it and the source of each field, for its manifest.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SpecError("jobs", f"must be an integer >= 1, got {jobs!r}")
    out = _path(out_dir, "out_dir")
    names = [_a_spec(s).name for s in specs]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate:
        raise SpecError("name", f"{duplicate!r} is used by more than one artifact; names must be unique")
    kind = _encoding_kind(runtimes, atol, rtol)
    settings = Settings(out, kind.runtimes, kind.atol, kind.rtol, replace=replace)
    check_tree(out)
    store = Store(out)
    for s in specs:
        store.check(s.name, s.to_dict(), replace)
    given = list(provenance or [({}, {})] * len(specs))
    batch = [Job(s.to_dict(), dict(origin), dict(sources)) for s, (origin, sources) in zip(specs, given, strict=True)]
    start = time.perf_counter()
    try:
        return _build_batch(batch, settings, jobs, on_stage, on_done)
    finally:
        if artifact_folders(out, damaged=True):  # an interrupted or failed batch still indexes what it finished
            _index(out, round(time.perf_counter() - start, 3), jobs)
