"""``audit``: every rotary site of a foreign ONNX model checked at every position against the config's schedule.

Steps, one way: read the model (``audit.model``: every tensor's external data inside the model's folder and whole;
ONNX Runtime must load it), the config (the same import as ``build --hf-config``), find the sites in every graph
(``audit.sites``), evaluate each at the schedule's call lengths (``audit.observe``), compare and name
(``audit.diagnose``, ``audit.checks``). The result: per site its kind, the nodes that read it, per call length the
rows compared, the worst error against float64 and its position, the attention factor read from the values, the
findings (a site that could not be checked says why); verdict ``exact`` (every site exact to its dtype) or
``findings``. Each of the model's findings carries its effect on the logits (``audits.effect``), a severity from it
and the next step (``audits.advice``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ropeexport.audits import pages
from ropeexport.audits.checks import STRUCTURAL, check_bias_site, check_site
from ropeexport.audits.indexer import not_rotated, worded
from ropeexport.audits.layers import (
    Encodings,
    describe,
    encodings_for,
    layer_finding,
    model_layers,
    render,
    vision_spec,
)
from ropeexport.audits.model import load_model, refusal
from ropeexport.audits.observe import Evaluator
from ropeexport.audits.sites import find_sites, refuse_unread
from ropeexport.errors import SpecError
from ropeexport.results import JsonObject
from ropeexport.store import Store, read_object
from ropeexport.version import __version__


@dataclass
class AuditResult:
    """What ``audit`` found (module doc); ``to_dict`` is audit.json, ``markdown`` audit.md, ``html`` audit.html."""

    model: str
    config: str
    spec: JsonObject  # the first encoding's (the only one, but for a per-layer model): ``layers`` has each
    sites: list[JsonObject] = field(default_factory=list)
    layers: JsonObject = field(default_factory=dict)  # ``Encodings.to_dict``: each encoding and its layers
    findings: list[JsonObject] = field(default_factory=list)  # the model's findings, by their effect (``merge``)
    source: str = "hf_config"  # what ``config`` is: a transformers config, or a ``spec_file``
    fail_on: str = "minor"  # the gate's level (``advice.fails``)
    optimized: JsonObject | None = None  # ONNX Runtime's optimized graph audited too (``audits.optimized``), if asked

    @property
    def verdict(self) -> str:
        """``exact`` when every site is exact to its dtype and the model has no finding (nor its optimized graph, when
        audited), else ``findings``.
        """  # noqa: D205
        optimized = self.optimized is None or self.optimized["verdict"] == "exact"
        return "exact" if all(s["exact"] for s in self.sites) and not self.findings and optimized else "findings"

    @property
    def gate(self) -> JsonObject:
        """The CI gate at ``fail_on`` (``advice.fails``): ``passed`` when the model is exact, or when every finding is
        below that level (a site that is not exact with no finding to weigh fails); ``failing`` and ``passing``: the
        findings' names on each side, each with its level.
        """  # noqa: D205
        from ropeexport.audits.advice import fails

        level = lambda f: (f.get("severity") or {}).get("level", "unmeasured")  # noqa: E731
        failing = [f for f in self.findings if fails(level(f), self.fail_on)]
        passing = [f for f in self.findings if not fails(level(f), self.fail_on)]
        unweighed = not all(s["exact"] for s in self.sites) and not self.findings  # never passed for want of one
        failed = [{"name": f["name"], "level": level(f)} for f in failing]
        passed = [{"name": f["name"], "level": level(f)} for f in passing]
        ok = not failing and not unweighed
        if self.optimized is not None:  # the optimized graph's gate, its findings marked as its own
            inner = self.optimized["gate"]
            ok = ok and bool(inner["passed"])
            failed += [f | {"graph": "optimized"} for f in inner["failing"]]
            passed += [f | {"graph": "optimized"} for f in inner["passing"]]
        return {"fail_on": self.fail_on, "passed": ok, "failing": failed, "passing": passed}

    def to_dict(self) -> dict[str, object]:
        """audit.json's content."""
        out: dict[str, object] = {"ropeexport_version": __version__, "model": self.model, self.source: self.config,
                                  "verdict": self.verdict, "gate": self.gate, "spec": self.spec,
                                  "layers": self.layers, "findings": self.findings, "sites": self.sites}  # fmt: skip
        return out if self.optimized is None else out | {"optimized": self.optimized}

    def markdown(self) -> str:
        """The report as Markdown (audit.md, ``audits.pages``): the verdict, then one section per site."""
        inner = None
        if self.optimized is not None:  # the optimized graph's own report, as a result of its own
            inner = AuditResult(self.optimized["model"] or "(ONNX Runtime's optimized graph)", self.config, self.spec,
                                self.optimized["sites"], self.layers, self.optimized["findings"], self.source,
                                self.fail_on).markdown()  # fmt: skip
        return pages.markdown(self, inner)

    def html(self) -> str:
        """The report as one self-contained HTML page (audit.html, ``audits.pages``)."""
        return pages.html(self)


def audit(model: str | Path, hf_config: str | Path | None = None, threads: int = 2,
          spec_file: str | Path | None = None, effects: bool = True, fail_on: str = "minor",
          optimized: str | None = None, optimized_model: str | Path | None = None,
          known: dict[Any, dict[str, Any]] | None = None) -> AuditResult:  # fmt: skip
    """Audit ``model`` (an ONNX file) against ``hf_config`` (a transformers config.json) or ``spec_file`` (a position
    spec, per layer where they differ: ``audits.layers``) (module doc); ``effects``: each finding's effect on the
    logits measured (``audits.effect``); ``fail_on``: the level the result's gate fails at (``advice.fails``);
    ``optimized`` (a level: basic, extended, all) or ``optimized_model`` (a graph ONNX Runtime saved elsewhere): that
    optimized graph audited too (``audits.optimized``); ``known``: effects already measured on this very graph, by
    ``optimized.finding_key`` (the optimized graph's audit takes the exported one's: ``optimized.known_effects``).
    """  # noqa: D205
    from ropeexport.audits.advice import check_fail_on
    from ropeexport.audits.optimized import check_request

    check_fail_on(fail_on)
    check_request(optimized, optimized_model)
    path = Path(model)
    graph = load_model(path)
    vision = None if spec_file is None or hf_config is not None else vision_spec(Path(spec_file))
    if vision is not None:  # 2-D vision RoPE: read by running the model (``audits.vision``)
        from ropeexport.audits.vision import audit_vision

        read, named_faults = audit_vision(path, vision, threads)
        return AuditResult(str(path), str(spec_file), vision.to_dict(), [read], {}, named_faults, "spec_file",
                           fail_on)  # fmt: skip
    encodings = encodings_for(hf_config, spec_file, graph)
    named = model_layers(graph)
    encodings.check_count(named)
    spec = encodings.first
    sites = find_sites(graph, spec.encoding)
    if spec.encoding == "rope":
        refuse_unread(graph, sites)
    if not sites and spec.encoding == "rope":
        raise SpecError("model", f"{str(path)!r} has no rotary position encoding ropeexport can find (no "
                        "GroupQueryAttention with do_rotary, RotaryEmbedding, or Cos/Sin of positions, in the main "
                        "graph, its subgraphs or its model-local functions)")  # fmt: skip
    refused = refusal(path)
    if refused is not None:
        raise SpecError("model", f"ONNX Runtime refuses {str(path)!r}: {refused}")
    evaluator = Evaluator(path, threads)
    source = "hf_config" if hf_config is not None else "spec_file"
    result = AuditResult(str(path), str(hf_config if hf_config is not None else spec_file), spec.to_dict(),
                         layers=encodings.to_dict(), source=source, fail_on=fail_on)  # fmt: skip
    for site in sites:
        try:
            record = check_site(site, encodings.judging(site), evaluator) if spec.encoding == "rope" else (
                check_bias_site(site, spec, evaluator))  # fmt: skip
            if record is not None and site.indexer:  # the indexer's rotation: its findings say so
                worded(record, encodings.indexer is not None)
        except SpecError as exc:  # the checks name the config; a model that --spec does not fit is the spec's fault
            if exc.field != "hf_config" or source == "hf_config":
                raise
            raise SpecError("spec_file", exc.message.replace("the config does not", "the spec does not").replace(
                "partial_rotary_factor", "rotary_dim")) from None
        if record is not None:
            result.sites.append(record)
    if not result.sites:
        raise SpecError("model", f"{str(path)!r} has no ALiBi bias ropeexport can find (a term added to the "
                        "attention scores, before a Softmax or as a fused Attention's bias, computed from "
                        "attention_mask or position_ids and constants)")  # fmt: skip
    if spec.encoding == "rope":
        enough_positions(result.sites, encodings, graph)
    from ropeexport.audits.uses import name_layers, translations
    from ropeexport.audits.windows import window_findings

    translations(result.sites)  # a position offset of q and k alike: a translation, said so
    name_layers(result.sites)
    result.findings = merge(result.sites) + unread(result.sites, encodings, named)
    result.findings += not_rotated(result.sites, encodings.indexer, named)
    result.findings = inverted(result.findings, encodings, named) + result.findings
    result.findings += window_findings(graph, None if hf_config is None else Path(hf_config), path)
    if spec.encoding == "rope":  # the query times a factor of its position (Ministral 3, Llama 4's NoPE layers)
        from ropeexport.audits.features import feature_findings
        from ropeexport.audits.learned_scale import findings as learned_scale_findings
        from ropeexport.audits.query_scale import findings as query_scale_findings
        from ropeexport.audits.query_scale import tables as query_scale_tables

        # one judge of each layer's factor: a gathered table (ropeexport's form) is ``audits.query_scale``'s, which
        # graft can repair; every other layer ``audits.features`` judges by use (a factor computed in the graph, one
        # where the config gives none, or none where it gives one), which supersedes query_scale's "unread"
        scaled = query_scale_findings(graph, hf_config)
        config_path = None if hf_config is None else Path(hf_config)
        tabled = frozenset(i for table in query_scale_tables(graph) for i in table.readers)
        extra = feature_findings(path, graph, sites, config_path, result.layers, int(spec.max_positions), threads,
                                 tabled=tabled)  # fmt: skip
        judged = "query_scales" in result.layers  # features read the factors: its findings say what is missing
        result.findings += [f for f in scaled if not (judged and f["name"] == "query-scale-unread")] + extra
        result.findings += learned_scale_findings(graph, hf_config, sites)  # the checkpoint's per-head factor (Large 4)
    if effects:
        weigh(result, path, encodings, threads, known or {})
    else:  # each measure runs the model twice; a caller who only wants the names skips them
        for found in result.findings:
            found["effect"] = {"not_measured": "not asked"}
    from ropeexport.audits.advice import advise

    advise(result.findings, result.sites, result.model, result.config, source)
    if optimized is not None or optimized_model is not None:
        from ropeexport.audits.optimized import attach

        given = None if optimized_model is None else Path(optimized_model)
        again = lambda p, known: audit(p, hf_config, threads, spec_file, effects, fail_on, known=known)  # noqa: E731
        result.optimized = attach(path, optimized, given, again, threads, result.findings, encodings)
    return result


def enough_positions(sites: list[dict[str, Any]], encodings: Encodings, graph: Any) -> None:
    """A SpecError where an encoding's max_positions is too few for the rows compared to tell its schedule from a
    neighbour's in the dtype a site stores (``audits.neighbours``): an "exact" that could not fail is never said.
    """  # noqa: D205
    from ropeexport.audits.layers import DECLARED
    from ropeexport.audits.neighbours import smallest_positions

    for site in sites:
        if site["dtype"] is None or not site["probes"]:
            continue
        for group in (g for g in encodings.groups if g.label in site.get("checked_as", [])):
            spec = group.spec
            needed, neighbour = smallest_positions(spec, site["dtype"])
            if spec.max_positions >= needed:
                continue
            rows = "row 0" if spec.max_positions == 1 else f"rows 0 .. {spec.max_positions - 1}"
            declared = graph.metadata_props.get(DECLARED) is not None
            field = "model" if declared else encodings.field
            what = (f"its {DECLARED} metadata" if declared else "the config's max_position_embeddings"
                    if encodings.field == "hf_config" else "the spec's max_positions")  # fmt: skip
            raise SpecError(field, f"max_positions {spec.max_positions} ({what}) is too few to judge {site['dtype']} "
                            f"tables: {rows} of {describe(spec)} and of {neighbour} (1% apart) agree within two "
                            f"units of {site['dtype']}, so either would be exact; the audit needs at least "
                            f"{needed} positions to tell them apart")  # fmt: skip


def merge(sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The model's findings: each site's, one entry per finding found at several sites (a finding naming layers: its
    layers joined, ``layers.render``), with the sites it is found at.
    """  # noqa: D205
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for index, site in enumerate(sites):
        for found in site["findings"]:
            key = (found["name"], found.get("template", found["text"]), found.get("label"))
            merged = out.setdefault(key, {"name": found["name"], "text": found["text"], "sites": []})
            merged["sites"].append(index)
            if found.get("indexer"):  # the indexer's rotation (``audits.indexer``): kept on the model's finding
                merged["indexer"] = True
            if "template" in found:
                merged["layers"] = sorted({*merged.get("layers", []), *found["layers"]})
                merged["text"] = render(found["template"], found["label"], merged["layers"])
    return list(out.values())


def unread(sites: list[dict[str, Any]], encodings: Encodings, named: set[int]) -> list[dict[str, Any]]:
    """``not-rotated``: layers of the model the encodings rotate that no site is read by; only where every rotary
    site's readers name their layers (else which layers read a site is not known).
    """  # noqa: D205
    rope = [s for s in sites if s["kind"] != "ALiBi bias" and not s.get("indexer")]  # an indexer's: ``indexer``
    if not rope or any(s.get("layers") is None for s in rope) or encodings.first.encoding != "rope":
        return []
    read = {layer for s in rope for layer in s["layers"]}
    if encodings.count is None:
        return []
    # below the count: the builder names its final norm /model/layers.{n}/final_norm_layernorm, a layer past the last
    rotated = {i for i in named if i < encodings.count and encodings.of(i) is not None}
    missing = sorted(rotated - read)
    if not missing:
        return []
    found = layer_finding("not-rotated", "{who} {are} not rotated but the config rotates {them}", "", missing)
    return [found | {"sites": []}]


def inverted(findings: list[dict[str, Any]], encodings: Encodings, named: set[int]) -> list[dict[str, Any]]:
    """``rope-condition-inverted``: every layer the config rotates is unrotated and every one it leaves without RoPE
    is rotated (Cohere 2's condition inverted, vLLM PR #11203), said as one finding before the two it is made of.
    """  # noqa: D205
    layers = {f["name"]: set(f.get("layers", [])) for f in findings
              if f["name"] in ("nope-rotated", "not-rotated") and not f.get("indexer")}  # fmt: skip
    if len(layers) < 2 or encodings.count is None:
        return []
    nope = {i for i in named if i < encodings.count and encodings.of(i) is None}
    if layers["nope-rotated"] != nope or layers["not-rotated"] != {i for i in named if i < encodings.count} - nope:
        return []
    text = (f"RoPE on the layers the config leaves without it ({render('{who}', '', sorted(nope))}) and none on the "
            f"ones it rotates ({render('{who}', '', sorted(layers['not-rotated']))}): the per-layer condition inverted")
    return [{"name": "rope-condition-inverted", "text": text, "sites": []}]


def weigh(result: AuditResult, path: Path, encodings: Encodings, threads: int | None = None,
          known: dict[Any, dict[str, Any]] | None = None) -> None:
    """Each finding's effect on the logits as users run the model (``audits.effect``), the findings then ranked by it
    (unmeasured last). The run is planned once for every finding's worst position and the model's attention windows.
    A finding in ``known`` (by ``optimized.finding_key``) takes that effect, measured on this graph already.
    """  # noqa: D205
    from ropeexport.audits.effect import Measure
    from ropeexport.audits.fix import OPERATOR_AXES, PICKED_AFTER, UNREPAIRABLE
    from ropeexport.audits.optimized import finding_key

    last = int(encodings.first.max_positions) - 1
    weighed: list[tuple[dict[str, Any], int]] = []
    for found in result.findings:
        if finding_key(found) in (known or {}):
            found["effect"] = dict((known or {})[finding_key(found)])
            continue
        if found["name"] == "query-scale":  # not a rotary site: its table repaired alone (``query_scale``)
            from ropeexport.audits.query_scale import effect

            found["effect"] = effect(path, result.config, found, encodings, threads)
            continue
        if found["name"] in UNREPAIRABLE:
            found["effect"] = {"not_measured": f"its repair is not one graft makes: {UNREPAIRABLE[found['name']]}"}
            continue
        sites = [result.sites[i] for i in found["sites"]]
        if found["name"].startswith("mrope-") and any(s["table"] and s["kind"] != OPERATOR_AXES for s in sites):
            # picked after the tables (an operator picking each pair's axis itself has its attributes set instead)
            found["effect"] = {"not_measured": f"its repair is not one graft makes: {PICKED_AFTER}",
                               "unrepairable": PICKED_AFTER}  # fmt: skip
            continue
        if any(f["name"] in (*STRUCTURAL, "unidentified-site") for s in sites for f in s["findings"]):
            found["effect"] = {"not_measured": "the audit could not check its site whole: there are no right values "
                               "to put in"}  # fmt: skip
            continue
        probes = [p for s in sites for p in s["probes"] if not p["exact"]]
        weighed.append((found, max(probes, key=lambda p: p["max_abs"])["position"] if probes else last))
    if weighed:
        measure = Measure(path, encodings, [position for _, position in weighed], _windows(path), threads)
        for found, _ in weighed:
            found["effect"] = measure.finding(result.sites, found["sites"], found["name"])
    result.findings.sort(key=lambda f: -f["effect"].get("relative", -1.0))


def _windows(path: Path) -> list[int]:
    """The attention windows the model's layers read (``windows.observed``): their edges are scored."""
    from ropeexport.audits.windows import observed

    return sorted({w for w in observed(load_model(path)).values() if w})


def _an_audit(folder: Path) -> bool:
    """A report folder an earlier audit wrote (audit.json, before audit folders had a manifest): replaced too."""
    return (folder / "audit.json").is_file() and not (folder / "manifest.json").exists()


def write(result: AuditResult, out: str | Path, recorded: Mapping[str, object] | None = None) -> list[Path]:
    """audit.json, audit.md and audit.html into the folder ``out`` through the store (``ropeexport.store``): whole or
    not at all, a previous audit's folder replaced (whatever either says), any other folder refused. ``recorded``:
    more for the manifest's record of what was audited (a zoo's: the inputs' sha256 and the options).
    """  # noqa: D205
    out = Path(out)
    if (out.exists() or out.is_symlink()) and not is_audit(out):
        raise SpecError("out_dir", f"{str(out)!r} exists and holds no audit: give a new folder or a previous "
                        "audit's")  # fmt: skip
    record = {"model": result.model, "hf_config": result.config} | dict(recorded or {})
    with Store(out.parent).draft(out.name, record, replace=True, ours=_an_audit, field="out_dir", tree=False) as draft:
        (draft.path / "audit.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        (draft.path / "audit.md").write_text(result.markdown())
        (draft.path / "audit.html").write_text(result.html())
        manifest = {"artifact": "audit", "spec": record, "verdict": result.verdict, "ropeexport_version": __version__}
        draft.commit(manifest, result.verdict == "exact", guard_verified=False)
    return [out / "audit.json", out / "audit.md", out / "audit.html"]


def is_audit(folder: Path) -> bool:
    """A folder (no link) an audit wrote: a manifest whose artifact is ``audit``, or an earlier audit's audit.json."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    manifest = read_object(folder / "manifest.json", "manifest.json")
    return _an_audit(folder) or (manifest is not None and manifest.get("artifact") == "audit")
