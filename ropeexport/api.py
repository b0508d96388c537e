"""The Python API: everything the ``ropeexport`` command does, as functions (``import ropeexport as rx``).

Specs come from ``spec``, ``from_preset``, ``from_hf_config`` or ``load_specs``; ``export`` turns one into an
``onnx.ModelProto``; ``build`` exports, runs, verifies and reports one into ``OUT/NAME``; ``build_all`` builds many
and writes the tree's index; ``verify``, ``diff`` and ``check_trt`` read what a build wrote. ``build_decoder``
builds a whole decoder-only model (a transformers config, a local checkpoint or a preset) and verifies it by greedy
generation against a float64 recompute; ``generate`` / ``open_decoder`` serve a built decoder (greedy, ONNX Runtime,
IO binding, a preallocated cache); ``audit`` / ``graft`` check and repair the positional encoding of models other
tools exported. Every function's result is a typed object (``BuildResult``, ``VerifyResult``, ``ReportDiff``, ...:
``passed``, ``path``, ``to_dict()``, and true when it passed). Errors are ``ropeexport.errors.InputError`` (bad input,
``SpecError`` among them) or ``OutputError`` (a disk that cannot be written), each naming the field at fault
(``str(error)`` is one line: ``"field: what is allowed"``).

Example::

    import ropeexport as rx

    spec = rx.spec("rope", head_dim=64, num_heads=8, max_positions=4096, scaling="linear",
                   scaling_params={"factor": 2.0})
    result = rx.build(spec, "out")
    assert result.passed, result.report["comparisons"]
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from ropeexport import artifacts, pipeline
from ropeexport.batch import Job, OnDone, OnStage, Settings
from ropeexport.batch import build_all as _build_batch
from ropeexport.catalog import kind_for, spec_from_dict
from ropeexport.decoder.kind import DecoderKind
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.encoding import EncodingKind
from ropeexport.errors import ArtifactError, InputError, OutputError, SpecError, renamed
from ropeexport.pipeline import BuildResult, VerifyResult
from ropeexport.presets import Request
from ropeexport.report.diff import DEFAULT_MAX_GROWTH
from ropeexport.report.diff_result import ReportDiff
from ropeexport.requests import from_hf_config as _hf_requests
from ropeexport.requests import from_presets, from_spec_file, with_overrides
from ropeexport.runtimes import check_runtime_names
from ropeexport.specs import SpecBase
from ropeexport.store import MANIFEST, Store, check_files, read_manifest
from ropeexport.tree import artifact_folders, check_tree, is_tree
from ropeexport.trt.compat import CompatResult
from ropeexport.trt.compat import check_trt as _check_trt

if TYPE_CHECKING:  # loaded when first used: onnx-ir, ONNX Runtime sessions and transformers stay out of import time
    from ropeexport.audits.core import AuditResult
    from ropeexport.audits.graft import GraftResult
    from ropeexport.decoder.build import DecoderRequest
    from ropeexport.decoder.serve import DecoderSession, Generation

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


def _a_spec(value: object) -> SpecBase:
    if not isinstance(value, SpecBase):
        raise SpecError("spec", f"must be a spec (rx.spec, rx.from_preset, ...), got {type(value).__name__}")
    return value


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
    fused unless given; ``fields`` override the imported values.
    """  # noqa: D205
    lists = [_names(artifacts, "artifacts"), _names(dtypes, "dtypes"), _names(graphs, "graphs")]
    return _specs(with_overrides(_hf_requests(_path(path, "hf_config"), *lists), fields))


def load_specs(path: str | Path) -> list[SpecBase]:
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


def _encoding_kind(runtimes: Names, atol: Tolerance, rtol: Tolerance) -> EncodingKind:
    names = check_runtime_names(_names(runtimes, "runtimes") or ["ort"])
    return EncodingKind(names, _tolerance(atol, "atol"), _tolerance(rtol, "rtol"))


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
    from ropeexport.decoder.layer import LayerBlockKind, layer_block

    out = _path(out_dir, "out_dir")
    check_tree(out)
    hf = None if hf_config is None else _path(hf_config, "hf_config")
    spec, kind, origin = layer_block(_path(checkpoint, "checkpoint"), layer, dtype, graph, name, hf)
    base = _encoding_kind(runtimes, atol, rtol)
    block = LayerBlockKind(base.runtimes, base.atol, base.rtol, artifact_kind=lambda _: kind, source=origin["weights"])
    result = pipeline.build(block, spec, out, replace, origin)
    _index(out)  # as the CLI's builds end: the tree lists the new block
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


def _index(out: Path, seconds: float | None = None, jobs: int | None = None) -> None:
    """Write the tree's index; a full or read-only disk is one line saying the index is out of date."""
    try:
        artifacts.write_index(out, seconds, jobs)
    except OSError as exc:
        raise OutputError(
            "out_dir",
            f"the artifacts are built, but {str(out / 'index.json')!r} could not be rewritten ({exc.strerror}); "
            "free space and run 'ropeexport verify' on the tree to index them",
        ) from None


def _checked(
    folder: Path, names: list[str] | None, tolerances: tuple[dict[str, float], dict[str, float]],
    on_scenario: Callable[[dict[str, object]], None] | None,
) -> tuple[pipeline.Kind, dict[str, object], object]:  # fmt: skip
    """(kind, manifest, spec) of an artifact folder whose files match their hashes and spec; else InputError."""
    manifest = read_manifest(folder)
    kind = artifacts.kind_of(manifest, runtimes=names or ["ort"], atol=tolerances[0], rtol=tolerances[1],
                             on_scenario=on_scenario)  # fmt: skip
    if isinstance(kind, DecoderKind) and any(tolerances):  # refused before anything runs, not after a tree's others
        raise SpecError("atol/rtol", "a decoder's tolerance is fixed per dtype (relative to the logit scale); "
                        "give neither")  # fmt: skip
    check_files(folder, manifest["files"])
    return kind, manifest, kind.spec_of(folder, manifest)


def verify(
    path: str | Path,
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    on_done: Callable[[VerifyResult, float], None] | None = None,
    on_scenario: Callable[[dict[str, object]], None] | None = None,
) -> list[VerifyResult]:
    """Check the hashes of an artifact folder, or of every artifact in a tree, then verify each again here.

    One result per artifact (one for a folder), each with ``passed``, ``path``, the fresh ``report`` and ``stored``,
    the report it replaced. In a tree, every manifest and hash is checked before anything is verified (a damaged
    file: an InputError naming the artifact and the file, and nothing re-verified); the tree's index is rewritten
    after. ``on_done(result, seconds)`` is called as each artifact finishes.

    ``runtimes`` (default ``["ort"]``) are verified on one after the other, every kind alike; one that cannot run
    here is in the result's ``skipped`` with the reason (the CLI's exit 3), never a pass.

    A decoder folder gives a ``DecoderVerifyResult``: every scenario generated again on each runtime and judged
    against the float64 truth with the decoder's own bound (``runtimes``: per runtime its verdict and each scenario's
    numbers now beside the stored ones; ``scenarios``: the first runtime's that ran). ``ort`` is ONNX Runtime's CPU
    provider there; ``onnx-reference`` cannot run ONNX Runtime's contrib ops (the ``gqa`` form, int4), and its
    reason names them. ``on_scenario(result)`` sees each scenario as it finishes (``result["runtime"]`` names its
    runtime). A decoder takes no ``atol`` / ``rtol``.
    """
    folder = _path(path, "path")
    names = _names(runtimes, "runtimes")
    if names is not None:
        names = check_runtime_names(names)
    tolerances = _tolerance(atol, "atol"), _tolerance(rtol, "rtol")
    report = on_done or (lambda result, seconds: None)
    one = (folder / MANIFEST).exists() or (folder / "decoder.json").exists()
    listed = [] if one else artifacts.artifact_folders(folder, damaged=True)
    folders = listed or [folder]
    results: list[VerifyResult] = []
    with contextlib.ExitStack() as held:
        # Each folder's lock is held from its check to its fresh reports: no build replaces it meanwhile, and no
        # second verification of it runs at once.
        checked = []
        for each in folders:
            try:
                held.enter_context(Store(each.resolve().parent).reading(each.name))
                checked.append((each, *_checked(each, names, tolerances, on_scenario)))
            except InputError as exc:
                if not listed:
                    raise
                raise renamed(exc, f"{each.name}/{exc.field}") from None  # a tree has many model.onnx files
        for each, kind, manifest, spec in checked:
            began = time.perf_counter()
            result = pipeline.reverify(kind, each, manifest, spec)
            if isinstance(kind, DecoderKind):
                result = kind.result(result)
            results.append(result)
            report(result, time.perf_counter() - began)
    tree = folder if listed else folder.resolve().parent
    if listed or is_tree(tree):  # the tree's index must not keep the old verdict
        _index(tree)
    return results


def diff(
    old: str | Path, new: str | Path, max_growth: float = DEFAULT_MAX_GROWTH, across: Sequence[str] = ()
) -> ReportDiff:
    """Compare two reports (report.json files or artifact folders) comparison by comparison.

    The result's ``regressed`` is true when a check that passed now fails, a comparison vanished, an error metric
    grew by more than ``max_growth`` times (and its atol), a tolerance was loosened, or the specs differ in a field
    not named in ``across`` (compare a fused with a decomposed artifact with ``across=["graph"]``).

    Two decoder reports (or folders) are compared scenario by scenario (``ropeexport.decoder.diff``: worst error over
    the logit scale, greedy agreement, first divergence, near ties, verdicts); reports of two kinds (a decoder's and
    a rope artifact's) are an ArtifactError.
    """
    if isinstance(max_growth, bool) or not isinstance(max_growth, (int, float)) or not 1 <= max_growth < float("inf"):
        raise SpecError("max_growth", f"must be a finite number >= 1, got {max_growth!r}")
    old_kind, old_report = artifacts.load_report(_path(old, "old"), "old")
    new_kind, new_report = artifacts.load_report(_path(new, "new"), "new")
    if type(old_kind) is not type(new_kind):
        kinds = new_report.get("artifact"), old_report.get("artifact")
        raise ArtifactError("new", f"is a {kinds[0]} report but OLD is a {kinds[1]} report: diff compares two "
                            "reports of one kind (two decoders, or two artifacts)")  # fmt: skip
    across = _names(across, "across") or []
    known = old_kind.diff_fields(old_report) | new_kind.diff_fields(new_report)
    unknown = [f for f in across if f not in known]
    if unknown:
        raise SpecError(
            "across", f"{unknown[0]!r} is not a spec field of these reports; allowed: {', '.join(sorted(known))}"
        )
    return old_kind.diff(old_report, new_report, float(max_growth), list(across))


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
    on_scenario: Callable[[dict[str, object]], None] | None = None,
    weight_format: str = "",
    block_size: int = 0,
    accuracy_level: int = 0,
    symmetric: bool = True,
    on_stage: pipeline.Stage | None = None,
) -> BuildResult:
    """A whole decoder into ``OUT/NAME`` (``ropeexport.decoder``), from ``hf_config``, the checkpoint's own
    config.json, or a preset's config; ``num_layers`` / ``hidden_size`` / ``vocab_size`` shrink it (seeded weights).
    ``weight_format`` "int4": the projections as MatMulNBits blocks of ``block_size`` (0: 32), ``symmetric`` or with
    zero points, at ``accuracy_level`` (0-4; ``components.linear``); "" (default): rounded once to ``dtype``.
    Returns a ``BuildResult`` (``.passed``, ``.path``, ``.report``: every scenario of report.json; an int4 decoder's
    also carries each call's quantization cost, reported and not judged). ``on_stage(stage, done, total)`` is told
    the build's progress: ``export`` per layer, then per scenario its name and its float64 passes per layer.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request = _decoder_request(hf_config, checkpoint, preset, (dtype, graph, num_layers, hidden_size, vocab_size,
                                                                max_positions, name),
                               _weights(weight_format, block_size, accuracy_level, symmetric))  # fmt: skip
    spec, used = resolve(request)
    check_buildable(spec, request, eager)
    out = _path(out_dir, "out_dir")
    check_tree(out)
    origin = {k: str(Path(v).resolve()) for k, v in (("hf_config", request.hf_config),
                                                      ("checkpoint", request.checkpoint)) if v is not None}  # fmt: skip
    if preset is not None:
        origin["preset"] = preset
    ckpt = None if request.checkpoint is None else Path(request.checkpoint)
    kind = DecoderKind(config=used, checkpoint=ckpt, eager=eager, on_scenario=on_scenario)
    result = pipeline.build(kind, spec, out, replace, origin, dict(spec.sources), stage=on_stage)
    _index(out)  # the tree's index lists the decoder beside the other artifacts
    return result


def audit(
    model: str | Path,
    hf_config: str | Path | None = None,
    out: str | Path | None = None,
    threads: int = 2,
    spec_file: str | Path | None = None,
    effects: bool = True,
) -> AuditResult:
    """Every rotary site of a foreign ONNX ``model`` against the encoding of the layers that read it at every
    position (``ropeexport.audits``): ``hf_config``'s (a transformers config.json), or ``spec_file``'s (a position
    spec, per layer where they differ; exactly one of the two); each finding's effect on the logits measured unless
    ``effects`` is False (it runs the model twice per finding: ``{"not_measured": "not asked"}`` instead). With
    ``out``, audit.json, audit.md and audit.html written there. Returns an ``AuditResult``.
    """  # noqa: D205
    from ropeexport.audits.core import audit as _audit
    from ropeexport.audits.core import write

    config = None if hf_config is None else _path(hf_config, "hf_config")
    spec = None if spec_file is None else _path(spec_file, "spec_file")
    result = _audit(_path(model, "model"), config, threads, spec, effects)
    if out is not None:
        write(result, _path(out, "out_dir"))
    return result


def graft(
    model: str | Path,
    hf_config: str | Path | None,
    out: str | Path,
    trust: str = "model",
    checkpoint: str | Path | None = None,
    spec_file: str | Path | None = None,
    proof_cache_gib: float = 4.0,
) -> GraftResult:
    """``model`` with every wrong rotary site replaced by the exact values of its layers' encoding (``hf_config``'s,
    or ``spec_file``'s: exactly one of the two), written to ``out`` (an .onnx file that must not exist; for a model
    with genai_config.json beside it, the new onnxruntime-genai folder, written whole: ``audits.package``) and proven
    (``ropeexport.audits.graft``); with ``checkpoint`` (the folder the model was exported from) its logits are judged
    against the whole decoder's float64 recompute at far positions and across original_max_position_embeddings too,
    a call whose cache would take more than ``proof_cache_gib`` GiB not run (and said: the verdict is then
    ``partial``, proven up to a position, never ``proven``). Returns a ``GraftResult``.
    """  # noqa: D205
    from ropeexport.audits.graft import graft as _graft

    folder = None if checkpoint is None else _path(checkpoint, "checkpoint")
    config = None if hf_config is None else _path(hf_config, "hf_config")
    spec = None if spec_file is None else _path(spec_file, "spec_file")
    return _graft(_path(model, "model"), config, _path(out, "out"), trust, folder, spec, proof_cache_gib)


def generate(
    folder: str | Path,
    prompt_ids: Sequence[int] | None = None,
    prompt: str | None = None,
    max_new_tokens: int = 32,
    position_offset: int = 0,
    threads: int | None = None,
    policy: str = "re-prefill",
    stop_at_eos: bool = False,
) -> Generation:
    """Greedy generation with a built decoder folder (``ropeexport.decoder.serve``): ONNX Runtime on the CPU, IO
    binding, a cache allocated once. The prompt is token ids or text (read by the folder's tokenizer.json), placed at
    ``position_offset``; every token must stay below max_positions (else SpecError). Returns a ``Generation``
    (``.tokens``, ``.text``, ``.steps`` with each call's kind, positions, RoPE regime and seconds).
    """  # noqa: D205
    from ropeexport.decoder.serve import DecoderSession

    session = DecoderSession(_path(folder, "path"), threads)
    return session.generate(session.prompt_of(prompt_ids, prompt), max_new_tokens, position_offset, policy, stop_at_eos)


def open_decoder(folder: str | Path, threads: int | None = None) -> DecoderSession:
    """A ``DecoderSession`` over a built decoder folder, for many generations with one session (``generate``)."""
    from ropeexport.decoder.serve import DecoderSession

    return DecoderSession(_path(folder, "path"), threads)


# A decoder's form and sizes as the API takes them: dtype, graph, num_layers, hidden_size, vocab_size, max_positions,
# name (``DecoderRequest``'s fields in its order).
_Form = tuple[str, str, int | None, int | None, int | None, int | None, str | None]


def _decoder_request(
    hf_config: str | Path | None,
    checkpoint: str | Path | None,
    preset: str | None,
    sizes_and_form: _Form,
    weights: Mapping[str, Any] | None = None,
) -> DecoderRequest:
    """The ``decoder.build.DecoderRequest`` of the API's arguments: paths checked, a preset's config read from its
    card.
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
    return DecoderRequest(hf, ckpt, config, *sizes_and_form, base=preset, **dict(weights or {}))


def _weights(weight_format: str, block_size: int, accuracy_level: int, symmetric: bool) -> dict[str, Any]:
    """How a decoder's projections are stored, as ``DecoderRequest`` takes it (validated by the spec)."""
    return {"weight_format": weight_format, "block_size": block_size, "accuracy_level": accuracy_level,
            "symmetric": symmetric}  # fmt: skip


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
    weight_format: str = "",
    block_size: int = 0,
    accuracy_level: int = 0,
    symmetric: bool = True,
    eager: bool = True,
) -> DecoderSpec:
    """The ``DecoderSpec`` ``build_decoder`` would build, validated, and checked as the build checks it first (its
    scenarios fit max_positions, its memory estimate fits this machine, with the transformers reference when
    ``eager``, as ``build_decoder`` takes it; the checkpoint's tokenizer reads); nothing is exported, run or written.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request = _decoder_request(hf_config, checkpoint, preset, (dtype, graph, num_layers, hidden_size, vocab_size,
                                                                max_positions, name),
                               _weights(weight_format, block_size, accuracy_level, symmetric))  # fmt: skip
    spec = resolve(request)[0]
    check_buildable(spec, request, eager)
    return spec
