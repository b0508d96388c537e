"""The kind of the encoding artifacts (rope, apply, bias, scores, attention, block): one family's ``Recipe``
run by the shared verification, reported by ``ropeexport.report``.

``build``: export (``Recipe.export``) -> ``model.onnx`` -> verification on the runtimes asked for
(``verification.core``: every probe against eager and float64, table checks, guards, properties) -> report.json ->
the Polygraphy reference inputs and outputs (hashed: TensorRT is later compared against them) -> the TensorRT engine
when a GPU built one. ``verify``: the model read back defensively, the spec rebuilt from the manifest and checked
against the one embedded in the (hashed) model, then verified again here.
"""  # noqa: D205

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ropeexport.catalog import encodings, recipe_for, spec_from_dict
from ropeexport.errors import ArtifactError
from ropeexport.graph.onnx_io import save_model, sha256
from ropeexport.pipeline import Kind, Outcome, Renderer, Stage, versions
from ropeexport.recipes import Recipe
from ropeexport.report import REPORT_SCHEMA, renderers, report_dict
from ropeexport.report.diff import check_report, diff_reports
from ropeexport.report.diff_result import ReportDiff
from ropeexport.reverify import check_embedded_spec, check_model
from ropeexport.runtimes import check_runtime_names
from ropeexport.runtimes.base import NUMPY_OF_ONNX
from ropeexport.store import MANIFEST_SCHEMA
from ropeexport.trt import trt_compat
from ropeexport.verification.core import verify_artifact
from ropeexport.verification.polygraphy_files import save_polygraphy_reference

REQUIRED = ("encoding", "inputs", "outputs", "opset", "graph")  # manifest fields beside the store's own


def artifact_names() -> set[str]:
    """Every artifact an encoding family builds (rope, apply, bias, scores, attention, block), from the catalog."""
    return {artifact for cls in encodings().values() for artifact in cls.artifacts}


def _io(values: Any) -> list[dict[str, Any]]:
    out = []
    for vi in values:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
        out.append({"name": vi.name, "dtype": str(NUMPY_OF_ONNX[tt.elem_type]), "shape": dims})
    return out


def interface(model: onnx.ModelProto) -> dict[str, Any]:
    """Inputs and outputs (name, dtype, shape with symbolic dims) and the default-domain opset."""
    return {
        "inputs": _io(model.graph.input),
        "outputs": _io(model.graph.output),
        "opset": next(o.version for o in model.opset_import if o.domain == ""),
    }


def model_facts(model: onnx.ModelProto) -> dict[str, Any]:
    """``interface`` and the TensorRT verdict per version (``trt.compat``: a walk over every node)."""
    return interface(model) | {"trt_compat": trt_compat(model)}


def manifest_fields(spec: Any, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's own fields (the store adds schema, name and files): spec, I/O, opset, graph style, versions;
    ``facts`` are ``model_facts`` of the model.
    """  # noqa: D205
    return {
        "encoding": spec.encoding,
        "artifact": spec.artifact,
        "spec": spec.to_dict(),
        "inputs": facts["inputs"],
        "outputs": facts["outputs"],
        "opset": facts["opset"],
        "graph": spec.graph,
        "versions": versions(),
        "trt_compat": facts["trt_compat"],
    }


def _worst(report: Mapping[str, Any], key: str) -> dict[str, float | None]:
    """The worst ``key`` (max_abs, max_ratio) per reference over every runtime and output; None where one raised."""
    worst: dict[str, float | None] = {}
    for c in report.get("comparisons", []):
        ref, value = c.get("reference"), c.get(key)
        if ref in worst and worst[ref] is None:
            continue
        worst[ref] = None if value is None else max(float(value), worst.get(ref) or 0.0)
    return worst


def folder_bytes(folder: Path, names: Any) -> dict[str, int]:
    """{"model": bytes of the listed model.* files present (model.onnx, its .data, an engine), "folder": every file}."""
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    model_files = [f for f in names if str(f).startswith("model.") and (folder / f).is_file()]
    return {"model": sum((folder / f).stat().st_size for f in model_files), "folder": size}


@dataclass
class EncodingKind(Kind):
    """Encoding artifacts (module doc). ``runtimes``, ``atol`` and ``rtol`` are the verification's settings;
    ``recipe_of`` picks the family's Recipe of a spec (and, when verifying, of a manifest: a checkpoint
    layer's block carries its weights through its origin, ``decoder.layer``).
    """  # noqa: D205

    runtimes: list[str] = field(default_factory=lambda: ["ort"])
    atol: dict[str, float] = field(default_factory=dict)
    rtol: dict[str, float] = field(default_factory=dict)
    recipe_of: Callable[[Any], Recipe] | None = None
    name: str = "encoding"
    # what ONNX Runtime's optimizer did to the model's rotations, added to a verify's report (``artifacts.kinds``
    # hands in ``audits.optimizer.check``: the audit sits above this kind); None: not looked at
    optimizer: Callable[[Path], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.runtimes = check_runtime_names(self.runtimes or ["ort"])

    def kind_of(self, spec: Any) -> Recipe:
        """The family's kind of ``spec`` (or the one given at construction)."""
        return self.recipe_of(spec) if self.recipe_of is not None else recipe_for(spec)

    # -- build and verify -----------------------------------------------------------------------------------------

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        """A manifest of one of the encoding artifacts (a checkpoint layer's block is claimed first by its own kind)."""
        return manifest.get("artifact") in artifact_names()

    def identity(self, spec: Any) -> dict[str, object]:
        """Nothing beyond the spec: an encoding artifact's learned tensors come from its spec's fields."""
        return {}

    def spec_of(self, folder: Path, manifest: Mapping[str, Any]) -> Any:
        """The manifest's spec, once the model reads and embeds that same spec (ArtifactError otherwise)."""
        missing = [f for f in REQUIRED if f not in manifest]
        if missing:
            raise ArtifactError("manifest.json", f"missing field(s) {', '.join(missing)}")
        if "model.onnx" not in manifest["files"]:
            raise ArtifactError("manifest.json", "files must map each model file to its sha256, model.onnx included")
        model = check_model(folder, manifest["files"])
        check_embedded_spec(model, manifest)
        return spec_from_dict(manifest["spec"], "manifest.json spec")

    def _run(self, spec: Any, kind: Recipe, folder: Path, stage: Stage) -> tuple[Any, dict[str, Any]]:
        verification = verify_artifact(spec, kind, folder / "model.onnx", self.runtimes, atol=self.atol,
                                       rtol=self.rtol, stage=stage)  # fmt: skip
        saved = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        return verification, model_facts(saved)

    def build(self, spec: Any, folder: Path, stage: Stage) -> Outcome:
        """Export, save, verify; the Polygraphy reference and a TensorRT engine (when one was built) beside."""
        kind = self.kind_of(spec)
        stage("export")
        names = save_model(kind.export(spec), folder)
        verification, facts = self._run(spec, kind, folder, stage)
        files = {n: sha256(folder / n) for n in names}
        report = report_dict(spec, verification, versions(), files, facts)
        save_polygraphy_reference(spec, kind, folder)
        manifest = manifest_fields(spec, facts)
        manifest["build"] = {"runtimes": self.runtimes}
        engine_info = folder / "model.engine.json"
        if engine_info.is_file():  # the TensorRT runner built and saved an engine (GPU hosts only)
            manifest["tensorrt"] = json.loads(engine_info.read_text())
        return Outcome(verification.passed, report, manifest)

    def recipe_for_manifest(self, spec: Any, manifest: Mapping[str, Any]) -> Recipe:
        """The family's kind that verifies a built artifact (a checkpoint layer's block overrides it)."""
        del manifest
        return self.kind_of(spec)

    def verify(self, spec: Any, folder: Path, manifest: Mapping[str, Any], stage: Stage) -> Outcome:
        """Every probe again on this machine's runtimes."""
        verification, facts = self._run(spec, self.recipe_for_manifest(spec, manifest), folder, stage)
        report = report_dict(spec, verification, versions(), dict(manifest["files"]), facts)
        if self.optimizer is not None:  # what the runtime's rewrite did to rotations (the line verify prints)
            report["optimizer"] = self.optimizer(folder / "model.onnx")
        return Outcome(verification.passed, report)

    def renderers(self) -> dict[str, Renderer]:
        """report.md and report.html (``ropeexport.report``)."""
        return renderers()

    # -- the tree's index and diff --------------------------------------------------------------------------------

    def entry(self, folder: Path, out: Path, manifest: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
        """One artifact's line in the index: verdict, worst errors, size, build time, runtimes and versions."""
        spec = manifest.get("spec", {})
        build = manifest.get("build", {})
        ok = manifest.get("schema") == MANIFEST_SCHEMA and report.get("schema") == REPORT_SCHEMA
        return {
            "name": manifest.get("name", folder.name),
            "encoding": manifest.get("encoding"),
            "artifact": manifest.get("artifact"),
            "dtype": spec.get("dtype"),
            "graph": manifest.get("graph"),
            "max_positions": spec.get("max_positions"),
            "passed": bool(report.get("passed")) if ok else False,
            "status": ("passed" if report.get("passed") else "failed") if ok else "unreadable",
            "path": os.path.relpath(folder, out),
            "report": os.path.relpath(folder / "report.html", out),
            "worst_max_abs": _worst(report, "max_abs"),
            "worst_ratio": _worst(report, "max_ratio"),
            "bytes": folder_bytes(folder, manifest.get("files", {})),
            "build_seconds": build.get("seconds"),
            "origin": build.get("origin", {}),
            "runtimes": [
                {k: r[k] for k in ("name", "status", "device", "reason") if k in r} for r in report.get("runtimes", [])
            ],
            "versions": manifest.get("versions", {}),
        }

    def owns_report(self, report: Mapping[str, Any]) -> bool:
        """A report of one of the encoding artifacts."""
        return report.get("artifact") in artifact_names()

    def check_report(self, report: dict[str, Any], which: str) -> dict[str, Any]:
        """``report.diff.check_report``: the schema and the fields diff reads."""
        return check_report(report, which)

    def diff_fields(self, report: Mapping[str, Any]) -> set[str]:
        """The report's spec fields."""
        return set(report.get("spec") or {})

    def diff(self, old: dict[str, Any], new: dict[str, Any], max_growth: float, across: list[str]) -> ReportDiff:
        """Comparison by comparison (``report.diff``)."""
        return diff_reports(old, new, max_growth, across)

