"""The decoder as a kind of the one pipeline (``ropeexport.pipeline``): its build, verify, index line, diff and report.

A decoder folder (``OUT/NAME/``), written through the store like every artifact:
- ``model.onnx`` (+ ``model.onnx.data`` past 64 MiB of weights), embedding the spec and the weights' source;
- ``decoder.json``: the spec, where each field came from, the transformers config used, the weights' source and the
  scenarios;
- the onnxruntime-genai package: ``genai_config.json`` and the checkpoint's tokenizer files (``decoder.genai``);
- ``manifest.json`` (the store's: every file above with its sha256) and ``report.json`` / ``report.md`` /
  ``report.html`` (every call of every scenario against the float64 truth and transformers).

``verify`` checks, as bad input (ArtifactError, one line): every listed file's sha256 (the store), decoder.json's
fields, the spec in decoder.json and in the manifest equal to the one the (hashed) model embeds, the weights' source
too, the spec decoder.json's transformers config makes equal to it (``config.check_config``: an edited rope_theta
is caught), and genai_config.json equal to what this spec and config make (its context length and vocabulary are the
model's). Then the weights are drawn again (seeded) or read from the checkpoint folder named, and every scenario runs
again on each runtime asked for (``runtimes``; default ``ort``, ONNX Runtime's CPU provider; ``decoder.runs``)
against the float64 truth and transformers (when the build asked for it and transformers is installed here; else
skipped with the reason).
"""

from __future__ import annotations

import ast
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from ropeexport.components.linear import is_weight
from ropeexport.decoder.checkpoint import CheckpointWeights
from ropeexport.decoder.config import check_config
from ropeexport.decoder.diff import check_report, diff_decoder_reports, fields
from ropeexport.decoder.export import write_decoder
from ropeexport.decoder.genai import CONFIG, copy_tokenizer, genai_config, unservable
from ropeexport.decoder.parts import position_pieces, weight_format
from ropeexport.decoder.report import write_html, write_markdown
from ropeexport.decoder.runs import RuntimeVerdict, by_runtime, index_runtimes, rows, run_on
from ropeexport.decoder.scenarios import scenarios
from ropeexport.decoder.spec import DecoderSpec, weight_label
from ropeexport.decoder.verify import tolerance, verify_decoder
from ropeexport.decoder.weights import describe, seeded_weights
from ropeexport.encoding import folder_bytes, interface
from ropeexport.errors import ArtifactError, RuntimeUnavailable, SpecError
from ropeexport.graph.onnx_io import sha256
from ropeexport.pipeline import Kind, Outcome, Renderer, Stage, VerifyResult, stored_report, versions
from ropeexport.report.diff_result import ReportDiff
from ropeexport.results import JsonObject
from ropeexport.reverify import check_model, embedded_spec, metadata, same_fields
from ropeexport.runtimes import check_runtime_names
from ropeexport.store import MANIFEST_SCHEMA, check_files, inside, read_artifact_json, read_manifest
from ropeexport.version import __version__

SEEDED = "seeded (numpy default_rng(0))"
NOT_ASKED = "skipped: not asked for"  # how a --no-eager build records the transformers reference
RECORD = "decoder.json"
# What a decoder's errors are relative to: the logit scale, not absolute values.
SCALE = "max |float64 logit| of the call (the logit scale)"
OnScenario = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class DecoderVerifyResult(VerifyResult):
    """A re-verified decoder: per runtime and scenario its numbers now beside the stored ones (``runtimes``);
    ``scenarios`` are the first runtime's that ran. ``skipped`` (the runtimes that could not run here) is every
    result's: the CLI's exit 3.
    """  # noqa: D205

    @property
    def scenarios(self) -> list[JsonObject]:
        """Per scenario re-run on the first runtime that ran: name, passed, worst_rel and agreement now, and the stored
        ones of that runtime (None where the stored report has none).
        """  # noqa: D205
        ran = [r for r in self.runtimes if r.ran]
        return ran[0].scenarios if ran else []

    @property
    def runtimes(self) -> list[RuntimeVerdict]:
        """Every runtime asked for (and the fallback, when none of them ran), in order (``decoder.runs``)."""
        now, before = by_runtime(self.report), by_runtime(self.stored)
        out = []
        for record in self.report.get("runtimes", []):
            name = str(record["name"])
            ran = record["status"] == "verified"
            out.append(RuntimeVerdict(name, ran, ran and bool(record.get("passed")), str(record.get("device", "")),
                                      str(record.get("reason", record.get("error", ""))),
                                      rows(now.get(name, []), before.get(name, [])) if ran else []))  # fmt: skip
        return out

    @property
    def dropped(self) -> list[str]:
        """Scenarios of the stored report (of the first runtime that ran) this ropeexport no longer runs."""
        ran = [r.name for r in self.runtimes if r.ran]
        if not ran:
            return []
        now = {s.get("name") for s in by_runtime(self.report).get(ran[0], [])}
        return [str(s.get("name")) for s in by_runtime(self.stored).get(ran[0], []) if s.get("name") not in now]


def checkpoint_of(weights: str) -> Path | None:
    """None for seeded weights, else the checkpoint folder the words name (``checkpoint.describe``); else an error."""
    if weights == SEEDED:
        return None
    head, _, quoted = weights.partition(" ")
    try:
        path = ast.literal_eval(quoted) if head == "checkpoint" else None
    except (ValueError, SyntaxError):
        path = None
    if not isinstance(path, str) or not path:
        raise ArtifactError("decoder.json weights", f"{weights!r} is neither {SEEDED!r} nor \"checkpoint '<folder>'\"")
    folder = Path(path)
    if not folder.is_dir():
        raise ArtifactError("decoder.json weights", f"{path!r}, the folder this decoder's weights were read from, no "
                            "longer exists; restore it to verify again")  # fmt: skip
    return folder


def rebuild_spec(record: Mapping[str, Any]) -> DecoderSpec:
    """The DecoderSpec decoder.json stores, name included, exactly as built; ArtifactError names a bad field."""
    stored = dict(record["spec"])
    sources = record.get("sources")
    try:
        return DecoderSpec.from_dict(stored, dict(sources) if isinstance(sources, dict) else {})
    except SpecError as exc:
        raise ArtifactError(f"decoder.json spec.{exc.field}", exc.message) from None
    except TypeError as exc:  # an unknown or missing field
        raise ArtifactError("decoder.json spec", f"is not a decoder spec ({exc})") from None


def read_record(folder: Path) -> dict[str, Any]:
    """decoder.json, its fields checked; else ArtifactError."""
    path = inside(folder, RECORD, RECORD)
    if not path.is_file():
        raise ArtifactError(RECORD, f"{str(path)!r} is missing: not a whole decoder folder")
    record = read_artifact_json(path, RECORD)
    if not isinstance(record, dict):
        raise ArtifactError(RECORD, "must be a JSON object")
    for key, kind in (("spec", dict), ("config", dict), ("weights", str)):
        if not isinstance(record.get(key), kind):
            raise ArtifactError(f"{RECORD} {key}", f"must be a {'table' if kind is dict else 'string'}")
    return record


def check_folder(folder: Path) -> tuple[dict[str, Any], DecoderSpec]:
    """(decoder.json, the spec) of a decoder folder whose files match their hashes and agree (``DecoderKind.spec_of``);
    else InputError naming what is wrong.
    """  # noqa: D205
    try:
        manifest = read_manifest(folder)
    except ArtifactError as exc:
        if exc.field != "path":
            raise
        raise SpecError("path", f"{str(folder)!r} is not a decoder folder (one written by `ropeexport build "
                        "--artifact decoder`, with its manifest.json)") from None  # fmt: skip
    if manifest.get("artifact") != "decoder":
        raise SpecError("path", f"{str(folder)!r} is not a decoder folder (written by `ropeexport build --artifact "
                        f"decoder`): it holds a {manifest.get('artifact')} artifact")  # fmt: skip
    check_files(folder, manifest["files"])
    spec = DecoderKind().spec_of(folder, manifest)
    return read_record(folder), spec


def weights_of(spec: DecoderSpec, checkpoint: Path | None) -> Mapping[str, Any]:
    """The decoder's weights: a checkpoint's, read one at a time as they are used (``CheckpointWeights``: its
    headers checked now), or the seeded draws.
    """  # noqa: D205
    return CheckpointWeights(spec, checkpoint) if checkpoint is not None else seeded_weights(spec)


def export_decoder(spec: DecoderSpec, config: Mapping[str, Any], weights: Mapping[str, Any], checkpoint: Path | None,
                   folder: Path, stage: Stage | None = None) -> list[str]:  # fmt: skip
    """The build's export stage, unverified: the model (streamed at any size, ``export.write_decoder``), the
    onnxruntime-genai package and the checkpoint's tokenizer files written into ``folder``; the file names.
    """  # noqa: D205
    files, _ = write_decoder(spec, weights, describe(checkpoint), folder, stage)
    # onnxruntime-genai 0.18 says one head geometry and cache for every layer, and was never run on latent attention
    # (``genai.unservable``): no genai_config.json then
    if unservable(spec):
        return files + copy_tokenizer(checkpoint, folder)
    (folder / CONFIG).write_text(json.dumps(genai_config(spec, config), indent=2) + "\n")
    return files + [CONFIG, *copy_tokenizer(checkpoint, folder)]


def run_scenarios(spec: DecoderSpec, config: Mapping[str, Any], weights: Mapping[str, Any], checkpoint: Path | None,
                  model_path: Path, eager: bool, on_scenario: OnScenario | None, stage: Stage | None = None,
                  runtimes: list[str] | None = None, ray: str | None = None) -> dict[str, Any]:  # fmt: skip
    """report.json of a decoder: every scenario run on each of ``runtimes`` (default ``ort``: ONNX Runtime's CPU
    provider) against float64 and transformers (``decoder.runs``). The report's ``scenarios`` and ``runtime`` are the
    first verified runtime's; ``runtimes`` holds one record per runtime; ``passed``: some runtime ran and every one
    that ran passed. ``ray``: the float64 passes as Ray tasks there, one per scenario (``decoder.truth_tasks``).
    """  # noqa: D205
    from ropeexport.decoder.reference import TransformersReference
    from ropeexport.decoder.truth_tasks import spread_on

    pieces = position_pieces(spec)  # each layer's position piece: the float64 truth rotates with its twin
    reference, skipped = None, None
    formats = weight_format(spec)
    if eager:
        try:
            if formats.quantized:  # transformers on the weights the model holds (dequantized), as the truth reads them
                held = {k: formats.read64(v) if is_weight(k) else v for k, v in weights.items()}
                if spec.storage.tied_embedding_int4:  # the embedding gathered from the int4 head (its tied head)
                    held["embed"] = formats.rows64(weights["embed"].T)
                reference = TransformersReference(spec, dict(config), held, None)
            else:
                reference = TransformersReference(spec, dict(config), weights, checkpoint)
        except RuntimeUnavailable as why:
            skipped = str(why)
    else:
        skipped = "not asked for (--no-eager)"
    start = time.perf_counter()
    stored: Mapping[str, Any] | None = None
    if formats.quantized:  # the int4 projections read back from the model (what it multiplies by), not re-packed
        from ropeexport.decoder.held import held_weights

        stored, _ = held_weights(onnx.load(model_path, load_external_data=False), spec, model_path.parent)
    names = runtimes or ["ort"]
    several = len(names) > 1

    def verify(name: str, infer: Any, release: Callable[[], None]) -> list[dict[str, Any]]:
        told = None if on_scenario is None else (lambda r: on_scenario({**r, "runtime": name}))
        staged = stage if stage is None or not several else (lambda what, *n: stage(f"{name}: {what}", *n))
        spread = None if ray is None else spread_on(ray, spec, checkpoint, model_path)
        return verify_decoder(infer, spec, weights, pieces, reference, on_scenario=told, stage=staged, held=stored,
                              spread=spread, release=release)  # fmt: skip

    records = run_on(names, model_path, verify)
    ran = [r for r in records if r["status"] == "verified"]
    first = ran[0] if ran else None
    return {
        "artifact": "decoder",
        "name": spec.name,
        "ropeexport": __version__,
        "spec": spec.to_dict(),
        "weights": describe(checkpoint),
        "runtime": first["device"] if first else "none: no runtime could run the model here",
        "runtimes": [{k: v for k, v in r.items() if not (r is first and k == "scenarios")} for r in records],
        "references": references(spec, reference.describe() if reference is not None else f"skipped: {skipped}"),
        "weight_format": formats.describe(),
        "tolerance": {"rel": tolerance(spec), "of": SCALE},
        "passed": bool(ran) and all(r["passed"] for r in ran),
        "seconds": round(time.perf_counter() - start, 2),
        "scenarios": first["scenarios"] if first else [],
    }


def references(spec: DecoderSpec, transformers: str) -> dict[str, str]:
    """What report.json says each figure is against: ``float64`` (the truth), ``transformers``, and for a quantized
    decoder ``unquantized`` (its quantization cost's reference, ``decoder.verify``).
    """  # noqa: D205
    truth = "no-cache full recompute in float64, exact positions (ropeexport.decoder.oracle)"
    if not weight_format(spec).quantized:
        return {"float64": truth, "transformers": transformers}
    return {
        "float64": f"{truth}, with the dequantized int4 weights the model holds",
        "transformers": f"{transformers}, on the dequantized int4 weights" if not transformers.startswith("skipped")
        else transformers,
        "unquantized": f"the same recompute with the checkpoint's weights unquantized ({spec.dtype}): the quantization "
        "cost, reported, not judged",
    }  # fmt: skip


def _max_of(summaries: list[dict[str, Any]], key: str) -> float | None:
    values = [float(s[key]) for s in summaries if isinstance(s.get(key), (int, float)) and not isinstance(s[key], bool)]
    return max(values) if values else None


@dataclass
class DecoderKind(Kind):
    """Decoders (module doc). For a build: ``config`` (the transformers config the spec was resolved from, shrunk)
    and ``checkpoint`` (None: seeded weights). ``eager``: compare with transformers (None when verifying: as the
    build did). ``on_scenario`` sees each scenario's result as it finishes, ``runtime`` naming its runtime (when
    verifying, with ``stored``: the stored report's summary of that scenario on that runtime, None when it has none).
    ``runtimes``: what the scenarios run on, by registry name (``decoder.runs``; a build's: ``ort``).
    """  # noqa: D205

    config: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None
    eager: bool | None = True
    on_scenario: OnScenario | None = None
    optimizer: Callable[[Path], dict[str, Any]] | None = None  # as ``EncodingKind.optimizer``
    runtimes: list[str] = field(default_factory=lambda: ["ort"])
    ray: str | None = None  # verify: the float64 passes as Ray tasks at this address (``decoder.truth_tasks``)
    name: str = "decoder"

    def __post_init__(self) -> None:
        self.runtimes = check_runtime_names(self.runtimes or ["ort"])

    def owns(self, manifest: Mapping[str, Any]) -> bool:
        """A manifest whose artifact is ``decoder``."""
        return manifest.get("artifact") == "decoder"

    def identity(self, spec: DecoderSpec) -> dict[str, object]:
        """The weights' source: a decoder of the same spec built from another checkpoint is another artifact."""
        return {"weights": describe(self.checkpoint)}

    def spec_of(self, folder: Path, manifest: Mapping[str, Any]) -> DecoderSpec:
        """The spec decoder.json records, once the model, the manifest and genai_config.json agree with it and the
        checkpoint its weights come from (if any) is there to read them again.
        """  # noqa: D205
        if "model.onnx" not in manifest["files"] or RECORD not in manifest["files"]:
            raise ArtifactError("manifest.json", "files must list model.onnx and decoder.json with their sha256")
        record = read_record(folder)
        spec = rebuild_spec(record)
        model = check_model(folder, manifest["files"])
        meta = metadata(model)
        if meta.get("ropeexport.artifact") != "decoder":
            raise ArtifactError("model.onnx", "carries no decoder metadata (ropeexport.artifact, ropeexport.spec)")
        built = embedded_spec(model)
        same_fields(json.loads(spec.digest_text()), built, "decoder.json spec")
        same_fields(manifest["spec"], built, "manifest.json spec")
        if meta.get("ropeexport.weights") != record["weights"]:
            raise ArtifactError(f"{RECORD} weights", f"is {record['weights']!r} but the model was built from "
                                f"{meta.get('ropeexport.weights')!r}")  # fmt: skip
        check_config(spec, record["config"])  # what the transformers reference and genai_config.json are made from
        checkpoint_of(record["weights"])  # checked with everything else, before any artifact of a tree runs
        if CONFIG in manifest["files"]:  # the onnxruntime-genai package must describe this model, not another
            stored = read_artifact_json(inside(folder, CONFIG, CONFIG), CONFIG)
            if not isinstance(stored, dict):  # a list (say) has no fields to name the first difference by
                raise ArtifactError(CONFIG, f"must be a JSON object (onnxruntime-genai's config), got a "
                                    f"{type(stored).__name__}: build the decoder again to write it")  # fmt: skip
            made = json.loads(json.dumps(genai_config(spec, record["config"])))
            # session_options say how to run the model, not what it is (builds before the thread count wrote none):
            # the manifest's hash holds them as written
            for config in (stored, made):
                described = config.get("model") if isinstance(config, dict) else None
                decoder = described.get("decoder") if isinstance(described, dict) else None
                if isinstance(decoder, dict):
                    decoder.pop("session_options", None)
            key = _first_difference(stored, made)
            if key is not None:
                raise ArtifactError(f"{CONFIG} {key}", f"is {_at(stored, key)!r} but this decoder's is "
                                    f"{_at(made, key)!r}")  # fmt: skip
        return spec

    def build(self, spec: DecoderSpec, folder: Path, stage: Stage) -> Outcome:
        """Weights, graph, the onnxruntime-genai package, every scenario; decoder.json."""
        stage("export")
        weights = weights_of(spec, self.checkpoint)
        files = export_decoder(spec, self.config, weights, self.checkpoint, folder, stage)
        # I/O and opset only: the TensorRT verdicts infer shapes over the whole model, weights included (protobuf caps
        # that at 2 GiB); `ropeexport check-trt` takes the folder's model.onnx when they are wanted.
        facts = interface(onnx.load(folder / "model.onnx", load_external_data=False))
        stage("verify")
        report = run_scenarios(spec, self.config, weights, self.checkpoint, folder / "model.onnx", self.eager is not
                               False, self.on_scenario, stage, self.runtimes)  # fmt: skip
        report["files"] = {f: sha256(folder / f) for f in files}
        record = {"spec": spec.to_dict(), "sources": dict(spec.sources), "config": dict(self.config),
                  "weights": describe(self.checkpoint),
                  "scenarios": [s.__dict__ for s in scenarios(spec)]}  # fmt: skip
        (folder / RECORD).write_text(json.dumps(record, indent=2, default=list) + "\n")
        position = spec.position_spec()
        manifest = {"encoding": position.encoding, "artifact": "decoder", "spec": spec.to_dict(),
                    "inputs": facts["inputs"], "outputs": facts["outputs"], "opset": facts["opset"],
                    "graph": spec.graph, "weights": describe(self.checkpoint), "versions": versions()}  # fmt: skip
        return Outcome(bool(report["passed"]), report, manifest)

    def verify(self, spec: DecoderSpec, folder: Path, manifest: Mapping[str, Any], stage: Stage) -> Outcome:
        """Every scenario again here (module doc)."""
        record = read_record(folder)
        checkpoint = checkpoint_of(record["weights"])
        stored = stored_report(folder)
        eager = self.eager
        if eager is None:
            eager = not str(stored.get("references", {}).get("transformers", "")).startswith(NOT_ASKED)
        weights = weights_of(spec, checkpoint)
        before = {runtime: {s.get("name"): s.get("summary") for s in stored_scenarios}
                  for runtime, stored_scenarios in by_runtime(stored).items()}  # fmt: skip

        def shown(result: dict[str, Any]) -> None:  # beside the stored numbers of the same runtime
            if self.on_scenario is not None:
                old = before.get(result["runtime"], {})
                self.on_scenario({**result, "stored": old.get(result["name"])})

        report = run_scenarios(spec, record["config"], weights, checkpoint, folder / "model.onnx", eager, shown, stage,
                               self.runtimes, self.ray)  # fmt: skip
        report["files"] = {k: v for k, v in manifest["files"].items() if k != RECORD}
        if self.optimizer is not None:  # what ONNX Runtime's rewrite did to rotations (``EncodingKind.optimizer``)
            report["optimizer"] = self.optimizer(folder / "model.onnx")
        return Outcome(bool(report["passed"]), report)

    def result(self, verified: VerifyResult) -> DecoderVerifyResult:
        """The verify result with the decoder's per-scenario views."""
        return DecoderVerifyResult(verified.path, verified.passed, verified.report, verified.stored, verified.seconds,
                                   verified.resumed)

    def renderers(self) -> dict[str, Renderer]:
        """report.md and report.html (``decoder.report``)."""
        return {"report.md": write_markdown, "report.html": write_html}

    def entry(self, folder: Path, out: Path, manifest: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
        """A decoder's line in the index, in the fields of every artifact's; ValueError when it does not read.

        A decoder's errors are relative to the logit scale (``SCALE``): ``worst_rel`` is the worst scenario's
        ``worst_rel`` against float64 (the truth, judged) and against transformers (shown, not judged),
        ``worst_rel_of`` says so; ``worst_max_abs`` is the float64 one in logits; ``worst_ratio`` is worst_rel over
        the tolerance (1 is the limit, as for every artifact). ``encoding`` is the position spec's.
        """
        scenarios_ = report.get("scenarios")
        if report.get("artifact") != "decoder" or not isinstance(scenarios_, list):
            raise ValueError("not a decoder's (report.json's artifact 'decoder' and its scenarios)")
        spec = manifest.get("spec") or {}
        position = spec.get("position") or {}
        summaries = [s["summary"] for s in scenarios_ if isinstance(s, dict) and isinstance(s.get("summary"), dict)]
        worst = {"float64": _max_of(summaries, "worst_rel"),
                 "transformers": _max_of(summaries, "worst_rel_transformers")}  # fmt: skip
        rel = {k: v for k, v in worst.items() if v is not None}
        worst_abs = _max_of(summaries, "worst_abs")
        tolerance = (report.get("tolerance") or {}).get("rel")
        ratio: dict[str, float] = {}
        if "float64" in rel and isinstance(tolerance, (int, float)) and tolerance > 0:
            ratio["float64"] = rel["float64"] / float(tolerance)
        passed = report.get("passed") is True and manifest.get("schema") == MANIFEST_SCHEMA
        build = manifest.get("build") or {}
        quantized = {}
        if spec.get("weight_format"):  # the two figures of a quantized decoder, apart (``decoder.verify``)
            cost = _max_of(summaries, "cost_rel")
            agree = [s.get("cost_agreement") for s in summaries]
            pairs = [tuple(int(x) for x in a.split("/")) for a in agree if isinstance(a, str) and "/" in a]
            quantized = {
                "weight_format": weight_label(spec),
                "quantization_cost": {"worst_rel": cost, "of": SCALE, "against": "float64, the weights unquantized",
                                      "agreement": f"{sum(p[0] for p in pairs)}/{sum(p[1] for p in pairs)}"},
            }  # fmt: skip
        return {
            "name": manifest.get("name", folder.name),
            "encoding": position.get("encoding"),
            "artifact": "decoder",
            "dtype": spec.get("dtype"),
            "graph": spec.get("graph"),
            "max_positions": position.get("max_positions"),
            "passed": passed,
            "status": "passed" if passed else "failed",
            "path": os.path.relpath(folder, out),
            "report": os.path.relpath(folder / "report.html", out),
            "worst_max_abs": {} if worst_abs is None else {"float64": worst_abs},
            "worst_ratio": ratio,
            "worst_rel": rel,
            "worst_rel_of": SCALE,
            "scenarios": {"passed": sum(s.get("passed") is True for s in scenarios_ if isinstance(s, dict)),
                          "total": len(scenarios_)},
            "bytes": folder_bytes(folder, manifest.get("files") or {}),
            "build_seconds": build.get("seconds"),
            "origin": {"weights": manifest.get("weights")},
            "runtimes": index_runtimes(report),
            "versions": manifest.get("versions") or {"ropeexport": report.get("ropeexport")},
        } | quantized  # fmt: skip

    def owns_report(self, report: Mapping[str, Any]) -> bool:
        """A report.json whose artifact is ``decoder``."""
        return report.get("artifact") == "decoder"

    def check_report(self, report: dict[str, Any], which: str) -> dict[str, Any]:
        """``decoder.diff.check_report``."""
        return check_report(report, which)

    def diff_fields(self, report: Mapping[str, Any]) -> set[str]:
        """Its spec fields, ``position.<field>`` and ``weights``."""
        return fields(dict(report))

    def diff(self, old: dict[str, Any], new: dict[str, Any], max_growth: float, across: list[str]) -> ReportDiff:
        """Scenario by scenario (``decoder.diff``)."""
        return diff_decoder_reports(old, new, max_growth, across)


def _first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """The first path (``model.context_length``) where two JSON values differ; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys(), key=str):
            if key not in a or key not in b:
                return f"{prefix}{key}"
            found = _first_difference(a[key], b[key], f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    return None if a == b else prefix.rstrip(".") or "(the whole file)"


def _at(data: Any, path: str) -> Any:
    for part in path.split("."):
        data = data.get(part) if isinstance(data, dict) else None
    return data

