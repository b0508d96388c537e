"""Re-verification of a decoder folder (``ropeexport verify DIR`` on what ``build --artifact decoder`` wrote).

A decoder folder is one with ``decoder.json`` (and no manifest.json): its report.json lists the model files with
their sha256 (``files``), so that list plays the manifest's part. Checked first, as bad input (SpecError, one line):
report.json and decoder.json read as a decoder's, every listed file present inside the folder with its recorded
sha256, model.onnx an ONNX model whose external data is listed, and the spec and weight source embedded in the (hashed)
model equal to decoder.json's. Then the spec is rebuilt from decoder.json (``DecoderSpec`` of its fields, the name as
stored), the weights are drawn again (seeded) or read from the checkpoint folder named, and every scenario of this
ropeexport runs again in ONNX Runtime (CPU) against the float64 truth and transformers (when the build asked for it
and transformers is installed here; else skipped with the reason). The fresh report.json / report.md / report.html
replace the old ones; the result keeps the stored report, so each scenario's worst error now is shown beside the
stored one.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.decoder.report import write_html, write_markdown
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import SpecError
from ropeexport.inputs import loads_json, read_json
from ropeexport.reverify import VerifyResult, _inside
from ropeexport.reverify import check_files as check_listed
from ropeexport.reverify import check_model as check_onnx

SEEDED = "seeded (numpy default_rng(0))"
NOT_ASKED = "skipped: not asked for"  # how a --no-eager build records the transformers reference


@dataclass(frozen=True)
class DecoderVerifyResult(VerifyResult):
    """A re-verified decoder: its folder, verdict, fresh report and the report it replaced (``stored``)."""

    stored: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    artifact = "decoder"

    @property
    def skipped(self) -> dict[str, str]:
        """Runtimes that could not run here: none (a decoder runs on ONNX Runtime's CPU provider, always present)."""
        return {}

    @property
    def scenarios(self) -> list[dict[str, Any]]:
        """Per scenario re-run: name, passed, worst_rel and agreement now, and the stored ones (None if not stored)."""
        before = {s["name"]: s for s in self.stored.get("scenarios", [])}
        rows = []
        for s in self.report["scenarios"]:
            old = before.get(s["name"])
            rows.append({
                "name": s["name"],
                "passed": s["passed"],
                "worst_rel": s["summary"]["worst_rel"],
                "agreement": s["summary"]["agreement"],
                "stored_passed": None if old is None else old["passed"],
                "stored_worst_rel": None if old is None else old["summary"]["worst_rel"],
                "stored_agreement": None if old is None else old["summary"]["agreement"],
            })  # fmt: skip
        return rows

    @property
    def dropped(self) -> list[str]:
        """Scenarios of the stored report this ropeexport no longer runs."""
        now = {s["name"] for s in self.report["scenarios"]}
        return [s["name"] for s in self.stored.get("scenarios", []) if s["name"] not in now]


def is_decoder_folder(folder: Path) -> bool:
    """A folder with decoder.json and no manifest.json: a decoder's (``check_decoder_folder`` says whether it reads)."""
    return (
        folder.is_dir()
        and not folder.is_symlink()
        and (folder / "decoder.json").is_file()
        and not (folder / "manifest.json").exists()
    )


def _object(folder: Path, name: str) -> dict[str, Any]:
    path = _inside(folder, name, name)
    if not path.is_file():
        raise SpecError(name, f"{str(path)!r} is missing: not a whole decoder folder")
    data = read_json(path, name)
    if not isinstance(data, dict):
        raise SpecError(name, "must be a JSON object")
    return data


def _stored_report(folder: Path) -> dict[str, Any]:
    """report.json of a decoder, with the fields re-verification reads checked; else SpecError."""
    report = _object(folder, "report.json")
    if report.get("artifact") != "decoder":
        raise SpecError("report.json", f"artifact is {report.get('artifact')!r}, not 'decoder'")
    files = report.get("files")
    if not isinstance(files, dict) or "model.onnx" not in files or not all(isinstance(v, str) for v in files.values()):
        raise SpecError("report.json", "files must map each model file to its sha256, model.onnx included")
    scenarios = report.get("scenarios")
    if not isinstance(scenarios, list) or not all(
        isinstance(s, dict)
        and isinstance(s.get("name"), str)
        and isinstance(s.get("passed"), bool)
        and isinstance(s.get("summary"), dict)
        for s in scenarios
    ):
        raise SpecError("report.json", "scenarios must be a list of tables with a name, passed and summary")
    return report


def _record(folder: Path) -> dict[str, Any]:
    """decoder.json, its fields checked; else SpecError."""
    record = _object(folder, "decoder.json")
    for key, kind in (("spec", dict), ("config", dict), ("weights", str)):
        if not isinstance(record.get(key), kind):
            raise SpecError(f"decoder.json {key}", f"must be a {'table' if kind is dict else 'string'}")
    return record


def check_files(folder: Path, files: dict[str, str]) -> None:
    """Every file report.json lists is inside the folder, no link, and has its recorded sha256; else SpecError."""
    check_listed(folder, files, "report.json")


def rebuild_spec(record: dict[str, Any]) -> DecoderSpec:
    """The DecoderSpec decoder.json stores, name included, exactly as built; SpecError names a bad field."""
    fields = dict(record["spec"])
    sources = record.get("sources")
    try:
        return DecoderSpec(**fields, sources=dict(sources) if isinstance(sources, dict) else {})
    except SpecError as exc:
        raise SpecError(f"decoder.json spec.{exc.field}", exc.message) from None
    except TypeError as exc:  # an unknown or missing field
        raise SpecError("decoder.json spec", f"is not a decoder spec ({exc})") from None


def checkpoint_of(weights: str) -> Path | None:
    """None for seeded weights, else the checkpoint folder the words name (``weights.describe``); else SpecError."""
    if weights == SEEDED:
        return None
    head, _, quoted = weights.partition(" ")
    try:
        path = ast.literal_eval(quoted) if head == "checkpoint" else None
    except (ValueError, SyntaxError):
        path = None
    if not isinstance(path, str) or not path:
        raise SpecError("decoder.json weights", f"{weights!r} is neither {SEEDED!r} nor \"checkpoint '<folder>'\"")
    folder = Path(path)
    if not folder.is_dir():
        raise SpecError(
            "checkpoint",
            f"{path!r}, the folder this decoder's weights were read from, no longer exists; restore it to re-verify",
        )
    return folder


def _flat(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's fields, the position's as ``position.<field>``: a difference names the field itself."""
    position = spec.get("position")
    if not isinstance(position, dict):
        return spec
    return {k: v for k, v in spec.items() if k != "position"} | {f"position.{k}": v for k, v in position.items()}


def check_model(folder: Path, files: dict[str, str], spec: DecoderSpec, weights: str) -> None:
    """model.onnx reads (``reverify.check_model``) and embeds decoder.json's spec and weight source; else SpecError.

    decoder.json is not hashed, the model is: a spec edited after the build must not be what the model is judged by.
    """
    model = check_onnx(folder, {"files": files})
    meta = {p.key: p.value for p in model.metadata_props}
    if meta.get("ropeexport.artifact") != "decoder" or "ropeexport.spec" not in meta:
        raise SpecError("model.onnx", "carries no decoder metadata (ropeexport.artifact, ropeexport.spec)")
    embedded = loads_json(meta["ropeexport.spec"], "model.onnx ropeexport.spec metadata")
    if not isinstance(embedded, dict):
        raise SpecError("model.onnx", "ropeexport.spec metadata must be a table of fields")
    stored, embedded = _flat(json.loads(spec.digest_text())), _flat(embedded)
    for key in sorted(set(stored) | set(embedded)):
        if stored.get(key) != embedded.get(key):
            raise SpecError(
                f"decoder.json spec.{key}", f"is {stored.get(key)!r} but the model was built with {embedded.get(key)!r}"
            )
    if meta.get("ropeexport.weights") != weights:
        raise SpecError(
            "decoder.json weights", f"is {weights!r} but the model was built from {meta.get('ropeexport.weights')!r}"
        )


def check_decoder_folder(folder: Path) -> tuple[dict[str, Any], dict[str, Any], DecoderSpec]:
    """(decoder.json, report.json, the spec) of a decoder folder whose files match their hashes; else SpecError."""
    report = _stored_report(folder)
    record = _record(folder)
    check_files(folder, report["files"])
    spec = rebuild_spec(record)
    check_model(folder, report["files"], spec, record["weights"])
    return record, report, spec


def verify_decoder_folder(
    folder: str | Path,
    runtimes: list[str] | None = None,
    atol: dict[str, float] | None = None,
    rtol: dict[str, float] | None = None,
    eager: bool | None = None,
    on_scenario: Callable[[dict[str, Any]], None] | None = None,
) -> DecoderVerifyResult:
    """Check the folder (module doc), run every scenario again here, and replace report.json / .md / .html.

    ``runtimes``: only ``ort`` (a decoder runs on ONNX Runtime's CPU provider); ``atol`` / ``rtol``: none (a
    decoder's tolerance is fixed per dtype, relative to the logit scale). ``eager``: whether to compare with
    transformers; None does what the build did. ``on_scenario`` gets each scenario's fresh result with ``stored``,
    the stored report's summary of that scenario (None when it has none), added.
    """
    from ropeexport.decoder.build import _verify
    from ropeexport.decoder.checkpoint import load_checkpoint, seeded_weights

    folder = Path(folder)
    if runtimes and any(r != "ort" for r in runtimes):
        raise SpecError("runtime", f"a decoder is re-verified on ort (CPUExecutionProvider) only, got {runtimes}")
    if atol or rtol:
        raise SpecError(
            "atol/rtol", "a decoder's tolerance is fixed per dtype (relative to the logit scale); give neither"
        )
    record, stored, spec = check_decoder_folder(folder)
    checkpoint = checkpoint_of(record["weights"])
    if eager is None:
        eager = not str(stored.get("references", {}).get("transformers", "")).startswith(NOT_ASKED)
    weights = load_checkpoint(spec, checkpoint) if checkpoint is not None else seeded_weights(spec)
    before = {s["name"]: s["summary"] for s in stored["scenarios"]}

    def shown(result: dict[str, Any]) -> None:
        if on_scenario is not None:
            on_scenario({**result, "stored": before.get(result["name"])})

    start = time.perf_counter()
    report = _verify(spec, dict(record["config"]), weights, checkpoint, folder / "model.onnx", eager, shown)
    report["files"] = dict(stored["files"])
    # Reports are written beside each other in a temporary folder, then moved over the old ones.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".reports.") as scratch:
        (Path(scratch) / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (Path(scratch) / "report.md").write_text(write_markdown(report))
        (Path(scratch) / "report.html").write_text(write_html(report))
        for name in ("report.json", "report.md", "report.html"):
            os.replace(Path(scratch) / name, folder / name)
    return DecoderVerifyResult(folder, bool(report["passed"]), report, stored, round(time.perf_counter() - start, 2))
