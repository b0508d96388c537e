"""The Python API: everything the ``ropeexport`` command does, as functions (``import ropeexport as rx``).

Specs come from ``spec``, ``from_preset``, ``from_hf_config`` or ``load_specs``; ``export`` turns one into an
``onnx.ModelProto``; ``build`` exports, runs, verifies and reports one into ``OUT/NAME``; ``build_all`` builds many
and writes the tree's index; ``verify``, ``diff`` and ``check_trt`` read what a build wrote. ``build_decoder``
builds a whole decoder-only model (a transformers config, a local checkpoint or a preset) and verifies it by greedy
generation against a float64 recompute; ``generate`` / ``open_decoder`` serve a built decoder (greedy, ONNX Runtime,
IO binding, a preallocated cache). Errors are
``ropeexport.errors.SpecError`` naming the field at fault (``str(error)`` is one line: ``"field: what is allowed"``).

Example::

    import ropeexport as rx

    spec = rx.spec("rope", head_dim=64, num_heads=8, max_positions=4096, scaling="linear",
                   scaling_params={"factor": 2.0})
    result = rx.build(spec, "out")
    assert result.passed, result.report["comparisons"]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from ropeexport.batch import Job, OnDone, OnStage, Settings
from ropeexport.batch import build_all as _build_batch
from ropeexport.catalog import kind_for, spec_from_dict
from ropeexport.decoder.reverify import check_decoder_folder, is_decoder_folder, verify_decoder_folder
from ropeexport.errors import SpecError
from ropeexport.pipeline import BuildResult, build_artifact, check_target
from ropeexport.presets import Request
from ropeexport.report.diff import DEFAULT_MAX_GROWTH, ReportDiff, diff_reports, load_report
from ropeexport.requests import from_hf_config as _hf_requests
from ropeexport.requests import from_presets, from_spec_file, with_overrides
from ropeexport.reverify import VerifyResult, check_folder, verify_folder
from ropeexport.runtimes import check_runtime_names
from ropeexport.specs import SpecBase
from ropeexport.tree import artifact_folders, check_tree, is_tree, write_index
from ropeexport.trt.compat import CompatResult
from ropeexport.trt.compat import check_trt as _check_trt

Tolerance = float | Mapping[str, float] | None
Names = str | Sequence[str] | None


def _names(value: Names, field: str) -> list[str] | None:
    """A list of names; one string is a list of one (``dtypes="fp16"``), never its letters."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, f"must be a name or a list of names, got {value!r}")
    return list(value)


def _path(value: str | Path, field: str) -> Path:
    """A path that is given: an empty string is an error, never the current folder."""
    if not isinstance(value, (str, Path)):
        raise SpecError(field, f"must be a path, got {type(value).__name__}")
    if not str(value).strip():
        raise SpecError(field, "is empty; give a path")
    return Path(value)


def _a_spec(value: Any) -> SpecBase:
    if not isinstance(value, SpecBase):
        raise SpecError("spec", f"must be a spec (rx.spec, rx.from_preset, ...), got {type(value).__name__}")
    return value


def spec(encoding: str = "rope", **fields: Any) -> Any:
    """One validated spec of ``encoding`` (rope, alibi, t5, ...; see ``ropeexport list``) from its fields.

    ``rx.spec("alibi", num_heads=12, dtype="fp16")``. A field the encoding lacks, or a value out of range, raises
    SpecError naming the field.
    """
    return spec_from_dict({"encoding": encoding, **fields})


def _specs(requests: list[Request]) -> list[Any]:
    return [spec_from_dict(request.fields) for request in requests]


def from_preset(
    name: str,
    artifacts: Sequence[str] | None = None,
    dtypes: Sequence[str] | None = None,
    graphs: Sequence[str] | None = None,
    **fields: Any,
) -> list[Any]:
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
    **fields: Any,
) -> list[Any]:
    """The specs of a transformers ``config.json`` on disk (never fetched): the encoding's first artifact, fp32,
    fused unless given; ``fields`` override the imported values.
    """  # noqa: D205
    lists = [_names(artifacts, "artifacts"), _names(dtypes, "dtypes"), _names(graphs, "graphs")]
    return _specs(with_overrides(_hf_requests(_path(path, "hf_config"), *lists), fields))


def load_specs(path: str | Path) -> list[Any]:
    """The specs of a .json or .toml spec file: one spec, or ``artifacts = [...]`` with shared top-level fields."""
    return _specs(from_spec_file(_path(path, "spec_file")))


def export(spec: SpecBase) -> onnx.ModelProto:
    """The artifact's ONNX model, in memory (tables in float64, rounded once); nothing is run or written."""
    return kind_for(_a_spec(spec)).export(spec)


def _tolerance(value: Tolerance, name: str) -> dict[str, float]:
    """A number for every output, or {output: number} (``""`` for every output); checked like the CLI's flags."""
    table = {"": value} if isinstance(value, (int, float)) else dict(value or {})
    for output, number in table.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 <= number < float("inf"):
            raise SpecError(name, f"must be a finite number >= 0 (for {output or 'every output'}), got {number!r}")
    return {k: float(v) for k, v in table.items()}


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
    When ``out_dir`` is a tree (it has an index.json), its index is rewritten so it never shows an old verdict.
    """
    out = _path(out_dir, "out_dir")
    check_tree(out)  # an existing folder must be empty or a ropeexport tree, as for build_all and the CLI
    result = build_artifact(
        _a_spec(spec),
        kind_for(spec),
        out,
        check_runtime_names(_names(runtimes, "runtimes") or ["ort"]),
        atol=_tolerance(atol, "atol"),
        rtol=_tolerance(rtol, "rtol"),
        replace=replace,
    )
    if is_tree(out):
        write_index(out)
    return result


def build_layer_block(
    checkpoint: str | Path,
    out_dir: str | Path,
    layer: int = 0,
    dtype: str = "fp32",
    graph: str = "fused",
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    replace: bool = False,
    hf_config: str | Path | None = None,
    name: str | None = None,
) -> BuildResult:
    """The ``block`` artifact of one checkpoint layer (``decoder.layer``): its encoding's block with that layer's
    attention weights, built and verified into ``out_dir/NAME`` like ``build``; the manifest records the checkpoint.
    """  # noqa: D205
    from ropeexport.decoder.layer import layer_block

    out = _path(out_dir, "out_dir")
    check_tree(out)
    hf = None if hf_config is None else _path(hf_config, "hf_config")
    spec, kind, origin = layer_block(_path(checkpoint, "checkpoint"), layer, dtype, graph, name, hf)
    names = check_runtime_names(_names(runtimes, "runtimes") or ["ort"])
    result = build_artifact(spec, kind, out, names, atol=_tolerance(atol, "atol"), rtol=_tolerance(rtol, "rtol"),
                            origin=origin, replace=replace)  # fmt: skip
    write_index(out)  # as the CLI's builds end: the tree lists the new block
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
    provenance: Sequence[tuple[Mapping[str, Any], Mapping[str, str]]] | None = None,
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
    settings = Settings(
        out,
        check_runtime_names(_names(runtimes, "runtimes") or ["ort"]),
        _tolerance(atol, "atol"),
        _tolerance(rtol, "rtol"),
        replace=replace,
    )
    check_tree(out)
    for s in specs:
        check_target(out, s.name, s.to_dict(), replace)
    given = list(provenance or [({}, {})] * len(specs))
    batch = [Job(s.to_dict(), dict(origin), dict(sources)) for s, (origin, sources) in zip(specs, given, strict=True)]
    start = time.perf_counter()
    try:
        return _build_batch(batch, settings, jobs, on_stage, on_done)
    finally:
        if artifact_folders(out, damaged=True):  # an interrupted or failed batch still indexes what it finished
            _index(out, round(time.perf_counter() - start, 3), jobs)


def _index(out: Path, seconds: float, jobs: int) -> None:
    """Write the tree's index; a full or read-only disk is one line saying the index is out of date."""
    try:
        write_index(out, seconds, jobs)
    except OSError as exc:
        raise SpecError(
            "out_dir",
            f"the artifacts are built, but {str(out / 'index.json')!r} could not be rewritten ({exc.strerror}); "
            "free space and run 'ropeexport verify' on the tree to index them",
        ) from None


def verify(
    path: str | Path,
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    on_done: Callable[[VerifyResult, float], None] | None = None,
    on_scenario: Callable[[dict[str, Any]], None] | None = None,
) -> list[VerifyResult]:
    """Check the hashes of an artifact folder, or of every artifact in a tree, then verify each again here.

    One result per artifact (one for a folder), each with ``passed``, ``path`` and the fresh ``report``. In a tree
    (decoder folders included), every manifest and hash is checked before anything is verified (a damaged file:
    SpecError naming the artifact and the file, and nothing re-verified); the tree's index is rewritten after.
    ``on_done(result, seconds)`` is called as each artifact finishes.

    A decoder folder (written by ``build_decoder``) gives a ``DecoderVerifyResult`` (``ropeexport.decoder.reverify``,
    a VerifyResult): the files' sha256 checked against its report.json, every scenario run again on ONNX Runtime's
    CPU provider, and ``stored`` / ``scenarios`` to compare with the report it replaced; ``on_scenario(result)`` sees
    each scenario as it finishes. It takes no ``atol`` / ``rtol`` and no runtime but ``ort``.
    """
    folder = _path(path, "path")
    names = _names(runtimes, "runtimes")
    tolerances = _tolerance(atol, "atol"), _tolerance(rtol, "rtol")
    report = on_done or (lambda result, seconds: None)
    if (folder / "manifest.json").exists() or not artifact_folders(folder, damaged=True):
        began = time.perf_counter()
        if is_decoder_folder(folder):  # decoder.json and no manifest.json: scenarios, not probes
            result = verify_decoder_folder(folder, names, *tolerances, on_scenario=on_scenario)
        else:
            result = verify_folder(folder, names, *tolerances)
        report(result, time.perf_counter() - began)
        tree = folder.resolve().parent
        if is_tree(tree):  # the tree's index must not keep the old verdict
            write_index(tree)
        return [result]
    folders = artifact_folders(folder, damaged=True)  # a damaged artifact is an error here, never left out
    manifests = {}
    for one in folders:
        try:
            if is_decoder_folder(one):  # its report.json lists the files and hashes; it takes no atol, rtol, runtime
                # Refused before anything runs, not after the other artifacts: verify_decoder_folder would refuse.
                if names and any(r != "ort" for r in names):
                    raise SpecError("runtime", f"a decoder is re-verified on ort only, got {names}; verify the other "
                                    "folders of this tree one by one to use another runtime")  # fmt: skip
                if any(tolerances):
                    raise SpecError("atol/rtol", "a decoder's tolerance is fixed per dtype (relative to the logit "
                                    "scale); verify the other folders of this tree one by one to give one")  # fmt: skip
                check_decoder_folder(one)
            else:
                manifests[one] = check_folder(one)
        except SpecError as exc:  # name the artifact: a tree has many model.onnx files
            raise SpecError(f"{one.name}/{exc.field}", exc.message) from None
    results: list[VerifyResult] = []
    for one in folders:
        began = time.perf_counter()
        if one in manifests:
            result = verify_folder(one, names, *tolerances, manifest=manifests[one])
        else:
            result = verify_decoder_folder(one, names, on_scenario=on_scenario)
        results.append(result)
        report(result, time.perf_counter() - began)
    write_index(folder)
    return results


def diff(
    old: str | Path, new: str | Path, max_growth: float = DEFAULT_MAX_GROWTH, across: Sequence[str] = ()
) -> ReportDiff:
    """Compare two reports (report.json files or artifact folders) comparison by comparison.

    The result's ``regressed`` is true when a check that passed now fails, a comparison vanished, an error metric
    grew by more than ``max_growth`` times (and its atol), a tolerance was loosened, or the specs differ in a field
    not named in ``across`` (compare a fused with a decomposed artifact with ``across=["graph"]``).

    Two decoder reports (or folders) are compared scenario by scenario (``ropeexport.decoder.diff``: worst error over
    the logit scale, greedy agreement, first divergence, near ties, verdicts); a decoder report against another
    artifact's report is a SpecError.
    """
    if isinstance(max_growth, bool) or not isinstance(max_growth, (int, float)) or not 1 <= max_growth < float("inf"):
        raise SpecError("max_growth", f"must be a finite number >= 1, got {max_growth!r}")
    from ropeexport.report.diff import check_kinds, spec_fields

    old_report, new_report = load_report(_path(old, "old"), "old"), load_report(_path(new, "new"), "new")
    check_kinds(old_report, new_report)
    across = _names(across, "across") or []
    known = spec_fields(old_report) | spec_fields(new_report)
    unknown = [f for f in across if f not in known]
    if unknown:
        raise SpecError(
            "across", f"{unknown[0]!r} is not a spec field of these reports; allowed: {', '.join(sorted(known))}"
        )
    return diff_reports(old_report, new_report, float(max_growth), list(across))


def check_trt(model: onnx.ModelProto | str | Path, version: str) -> CompatResult:
    """Whether TensorRT ``version``'s ONNX parser takes ``model`` (a ModelProto or a path), node by node, no GPU.

    The result's ``compatible`` is the verdict and ``reasons`` names each offending node.
    """
    if not isinstance(model, (onnx.ModelProto, str, Path)):
        raise SpecError("model", f"must be an onnx.ModelProto or a path, got {type(model).__name__}")
    if not isinstance(version, str):  # 10.10 as a float is 10.1: only the string says which release
        raise SpecError("trt_version", f"must be a string such as '10.15', got {version!r}")
    if isinstance(model, (str, Path)):
        model = _path(model, "model")
    return _check_trt(model, version)


def build_decoder(
    out_dir: str | Path,
    hf_config: str | Path | None = None,
    checkpoint: str | Path | None = None,
    preset: str | None = None,
    dtype: str = "fp32",
    graph: str = "fused",
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    max_positions: int | None = None,
    name: str | None = None,
    eager: bool = True,
    replace: bool = False,
    on_scenario: Callable[[dict[str, Any]], None] | None = None,
) -> Any:
    """A whole decoder into ``OUT/NAME`` (``ropeexport.decoder.build``), from ``hf_config``, the checkpoint's own
    config.json, or a preset's config; ``num_layers`` / ``hidden_size`` / ``vocab_size`` shrink it (seeded weights).
    Returns a ``DecoderResult`` (``.passed``, ``.path``, ``.report``).
    """  # noqa: D205
    from ropeexport.decoder.build import build_decoder as _build_decoder

    request = _decoder_request(hf_config, checkpoint, preset, dtype, graph, num_layers, hidden_size, vocab_size,
                               max_positions, name)  # fmt: skip
    return _build_decoder(out_dir, request, eager, replace, on_scenario)


def audit(model: str | Path, hf_config: str | Path, out: str | Path | None = None, threads: int = 2) -> Any:
    """Every rotary site of a foreign ONNX ``model`` against ``hf_config``'s schedule at every position
    (``ropeexport.audit``); with ``out``, audit.json, audit.md and audit.html written there. Returns an
    ``AuditResult``.
    """  # noqa: D205
    from ropeexport.audit.core import audit as _audit
    from ropeexport.audit.core import write

    result = _audit(_path(model, "model"), _path(hf_config, "hf_config"), threads)
    if out is not None:
        write(result, out)
    return result


def graft(
    model: str | Path,
    hf_config: str | Path,
    out: str | Path,
    trust: str = "model",
    checkpoint: str | Path | None = None,
) -> Any:
    """``model`` with every rotary site replaced by ``hf_config``'s exact tables, written to ``out`` (an .onnx file
    that must not exist) and proven (``ropeexport.audit.graft``); with ``checkpoint`` (the folder the model was
    exported from) its logits are judged against the whole decoder's float64 recompute at far positions and across
    original_max_position_embeddings too. Returns a ``GraftResult``.
    """  # noqa: D205
    from ropeexport.audit.graft import graft as _graft

    folder = None if checkpoint is None else _path(checkpoint, "checkpoint")
    return _graft(_path(model, "model"), _path(hf_config, "hf_config"), _path(out, "out"), trust, folder)


def generate(
    folder: str | Path,
    prompt_ids: Sequence[int] | None = None,
    prompt: str | None = None,
    max_new_tokens: int = 32,
    position_offset: int = 0,
    threads: int | None = None,
    policy: str = "re-prefill",
    stop_at_eos: bool = False,
) -> Any:
    """Greedy generation with a built decoder folder (``ropeexport.decoder.serve``): ONNX Runtime on the CPU, IO
    binding, a cache allocated once. The prompt is token ids or text (read by the folder's tokenizer.json), placed at
    ``position_offset``; every token must stay below max_positions (else SpecError). Returns a ``Generation``
    (``.tokens``, ``.text``, ``.steps`` with each call's kind, positions, RoPE regime and seconds).
    """  # noqa: D205
    from ropeexport.decoder.serve import DecoderSession

    session = DecoderSession(_path(folder, "path"), threads)
    return session.generate(session.prompt_of(prompt_ids, prompt), max_new_tokens, position_offset, policy, stop_at_eos)


def open_decoder(folder: str | Path, threads: int | None = None) -> Any:
    """A ``DecoderSession`` over a built decoder folder, for many generations with one session (``generate``)."""
    from ropeexport.decoder.serve import DecoderSession

    return DecoderSession(_path(folder, "path"), threads)


def _decoder_request(
    hf_config: str | Path | None,
    checkpoint: str | Path | None,
    preset: str | None,
    *sizes_and_form: Any,
) -> Any:
    """The ``decoder.build.DecoderRequest`` of the API's arguments (``sizes_and_form``: dtype, graph, num_layers,
    hidden_size, vocab_size, max_positions, name, in that order): paths checked, a preset's config read from its card.
    """  # noqa: D205
    from ropeexport.decoder.build import DecoderRequest
    from ropeexport.presets import get_preset

    config = None
    if preset is not None:
        for other, given in (("hf_config", hf_config), ("checkpoint", checkpoint)):
            if given is not None:  # a checkpoint brings its own config.json: two configs would disagree
                raise SpecError("preset", f"cannot be combined with `{other}`: give one config")
        card = get_preset(preset)
        if card.config is None:
            raise SpecError("preset", f"{preset!r} is a spec card without a transformers config; a decoder needs one")
        config = dict(card.config)
    hf = None if hf_config is None else _path(hf_config, "hf_config")
    ckpt = None if checkpoint is None else _path(checkpoint, "checkpoint")
    return DecoderRequest(hf, ckpt, config, *sizes_and_form, base=preset)


def resolve_decoder(
    hf_config: str | Path | None = None,
    checkpoint: str | Path | None = None,
    preset: str | None = None,
    dtype: str = "fp32",
    graph: str = "fused",
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    max_positions: int | None = None,
    name: str | None = None,
) -> Any:
    """The ``DecoderSpec`` ``build_decoder`` would build, validated, and checked as the build checks it first (its
    scenarios fit max_positions, its memory estimate fits this machine, the checkpoint's tokenizer reads); nothing is
    exported, run or written.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request = _decoder_request(hf_config, checkpoint, preset, dtype, graph, num_layers, hidden_size, vocab_size,
                               max_positions, name)  # fmt: skip
    spec = resolve(request)[0]
    check_buildable(spec, request)
    return spec
