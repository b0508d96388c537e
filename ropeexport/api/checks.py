"""What a build wrote, checked from the API: ``verify`` (hashes, then every check again), ``diff`` (two reports,
comparison by comparison) and ``check_trt`` (a model against TensorRT's ONNX parser, node by node, no GPU).
"""  # noqa: D205

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import onnx

from ropeexport import artifacts, pipeline
from ropeexport.api.shared import Tolerance, _index, _names, _path, _tolerance
from ropeexport.decoder.kind import DecoderKind
from ropeexport.errors import ArtifactError, InputError, SpecError, renamed
from ropeexport.journal import Journal
from ropeexport.pipeline import VerifyResult
from ropeexport.report.diff import DEFAULT_MAX_GROWTH
from ropeexport.report.diff_result import ReportDiff
from ropeexport.runtimes import check_runtime_names
from ropeexport.store import MANIFEST, Store, check_files, read_manifest
from ropeexport.tree import is_tree
from ropeexport.trt.compat import CompatResult
from ropeexport.trt.compat import check_trt as _check_trt


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
    ray: str | None = None,
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

    In a tree, a run that stops before the end (its process killed) leaves ``TREE/.verify-run.json``
    (``ropeexport.journal``); a rerun with the same runtimes, tolerances and versions keeps each artifact it lists
    whose report.json is unchanged since, its stored report the result (``resumed``, ``on_done`` told with 0 s), and
    verifies the rest. A run that finishes removes the file: the next verifies every artifact again.

    ``ray``: a Ray address (``local``, ``auto``, ``HOST:PORT``, ``ray://HOST:PORT``; ``ropeexport.fanout``): each
    artifact of a tree verified by a Ray task (on_scenario is then not called: the scenarios run on the workers),
    its reports written here as they come back, the same bytes as without Ray; one decoder folder is verified here,
    its float64 truth's passes split by scenario into Ray tasks (``decoder.truth_tasks``), the same report but its
    ``seconds``. The folders (and a decoder's checkpoint) must be on storage the workers read at the same paths.
    None: everything in this process, Ray not imported.
    """
    folder = _path(path, "path")
    names = _names(runtimes, "runtimes")
    if names is not None:
        names = check_runtime_names(names)
    tolerances = _tolerance(atol, "atol"), _tolerance(rtol, "rtol")
    if ray is not None:  # a malformed address is refused before any folder is read
        from ropeexport.fanout import parse_address

        parse_address(ray)
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
        alone = not listed and isinstance(checked[0][1], DecoderKind)
        # a tree's run is journaled: a rerun after a stopped run skips what it verified (``journal``)
        journal = Journal(folder, names or ["ort"], *tolerances) if listed else None
        found: dict[int, VerifyResult] = {}
        for i, (each, kind, *_) in enumerate(checked):
            resumed = _resumed(journal, each, kind)
            if resumed is not None:
                found[i] = resumed
                report(resumed, 0.0)
        todo = [c for i, c in enumerate(checked) if i not in found]

        def landed(result: VerifyResult) -> None:
            if journal is not None:
                journal.record(result.path, result.passed)

        if ray is None or alone:  # one decoder: verified here, its float64 passes fanned out (``truth_tasks``)
            ran: list[VerifyResult] = []
            for each, kind, manifest, spec in todo:
                if ray is not None and isinstance(kind, DecoderKind):
                    kind.ray = ray
                began = time.perf_counter()
                result = pipeline.reverify(kind, each, manifest, spec)
                if isinstance(kind, DecoderKind):
                    result = kind.result(result)
                ran.append(result)
                landed(result)
                report(result, time.perf_counter() - began)
        else:
            ran = _fanned_out(todo, names, tolerances, ray, report, landed) if todo else []
        fresh = iter(ran)
        results = [found[i] if i in found else next(fresh) for i in range(len(checked))]
        if journal is not None:
            journal.finish()
    tree = folder if listed else folder.resolve().parent
    if listed or is_tree(tree):  # the tree's index must not keep the old verdict
        _index(tree)
    return results


def _resumed(journal: Journal | None, folder: Path, kind: pipeline.Kind) -> VerifyResult | None:
    """``folder``'s result as a stopped run of the same settings verified it (its stored report), or None."""
    passed = journal.done(folder) if journal is not None else None
    if passed is None:
        return None
    stored = pipeline.stored_report(folder)
    result = VerifyResult(folder, passed, stored, stored, 0.0, resumed=True)
    return kind.result(result) if isinstance(kind, DecoderKind) else result


def _fanned_out(checked: list[tuple[Path, pipeline.Kind, dict[str, object], object]], names: list[str] | None,
                tolerances: tuple[dict[str, float], dict[str, float]], ray: str,
                report: Callable[[VerifyResult, float], None],
                landed_: Callable[[VerifyResult], None]) -> list[VerifyResult]:  # fmt: skip
    """Each checked folder verified by a Ray task (``artifacts.reverify_task``), its reports written here as it comes
    back (this process holds every folder's lock), then ``landed_(result)``; the results in the folders' order.
    """  # noqa: D205
    from ropeexport.fanout import fan_out

    jobs = [artifacts.Reverify(each, names or ["ort"], *tolerances) for each, *_ in checked]
    results: dict[int, VerifyResult] = {}

    def landed(index: int, done: artifacts.Reverified) -> None:
        each, kind, *_ = checked[index]
        result = pipeline.store_outcome(kind, each, done.outcome, pipeline.stored_report(each), done.seconds)
        if isinstance(kind, DecoderKind):
            result = kind.result(result)
        results[index] = result
        landed_(result)
        report(result, done.seconds)

    fan_out(artifacts.reverify_task, jobs, ray, landed)
    return [results[i] for i in range(len(checked))]


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
