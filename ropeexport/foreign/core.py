"""``audit``: every rotary site of a foreign ONNX model checked at every position against the config's schedule.

Steps, one way: read the model (onnx-ir; external data must lie inside the model's folder), the config (the same
import as ``build --hf-config``), find the sites (``foreign.sites``), evaluate each at the schedule's call lengths
(``foreign.observe``), compare and name (``foreign.diagnose``). The result: per site its kind, the nodes that read it,
per call length the rows compared, the worst error against float64 and its position, the attention factor read
from the values, the findings; verdict ``exact`` (every site exact to its dtype) or ``findings``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from ropeexport.errors import SpecError
from ropeexport.foreign.diagnose import compare, probe_lengths
from ropeexport.foreign.observe import Evaluator
from ropeexport.foreign.sites import find_sites
from ropeexport.version import __version__


@dataclass
class AuditResult:
    """What ``audit`` found (module doc); ``to_dict`` is audit.json, ``markdown`` audit.md."""

    model: str
    config: str
    spec: dict[str, Any]
    sites: list[dict[str, Any]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``exact`` when every site is exact to its dtype, else ``findings``."""
        return "exact" if all(s["exact"] for s in self.sites) else "findings"

    def to_dict(self) -> dict[str, Any]:
        """audit.json's content."""
        return {"ropeexport_version": __version__, "model": self.model, "hf_config": self.config,
                "verdict": self.verdict, "spec": self.spec, "sites": self.sites}  # fmt: skip

    def markdown(self) -> str:
        """The report as Markdown: the verdict, then one section per site."""
        spec = self.spec
        lines = [f"# ropeexport audit: {self.verdict}", "",
                 f"- model: `{self.model}`", f"- config: `{self.config}` ({spec['scaling']} schedule, theta "
                 f"{spec['theta']:g}, rotary_dim {spec['rotary_dim']}, max_positions {spec['max_positions']})",
                 "- reference: the config's schedule in float64; exact = within one unit in the last place of the "
                 "stored dtype", ""]  # fmt: skip
        for i, site in enumerate(self.sites):
            users = site["users"]
            shown = ", ".join(f"`{u}`" for u in users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
            verdict = "exact" if site["exact"] else "findings"
            lines += [
                f"## Site {i}: {site['kind']} ({verdict})",
                "",
                f"cos `{site['cos']}`, sin `{site['sin']}`, read by {shown}; dtype {site['dtype']}",
                "",
            ]
            for finding in site["findings"]:
                lines.append(f"- **{finding['text']}** (`{finding['name']}`)")
            if site["probes"]:
                lines += ["", "| call length L | rows | max abs error | at position | attention factor | exact |",
                          "|---:|---:|---:|---:|---:|:---|"]  # fmt: skip
                for p in site["probes"]:
                    factor = "" if p["attention_factor"] is None else f"{p['attention_factor']:.6g}"
                    lines.append(f"| {p['length']} | {p['rows']} | {p['max_abs']:.3g} | {p['position']} | {factor} "
                                 f"| {'yes' if p['exact'] else 'no'} |")  # fmt: skip
            lines.append("")
        return "\n".join(lines)


def _load(path: Path) -> ir.Model:
    if not path.is_file():
        raise SpecError("model", f"{str(path)!r} is not a file")
    try:
        model = ir.load(path)
    except Exception as exc:  # onnx-ir raises protobuf's and its own errors for a file that is not ONNX
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SpecError("model", f"{str(path)!r} is not an ONNX model ({first})") from None
    folder = path.resolve().parent
    for value in model.graph.initializers.values():
        tensor = value.const_value
        if isinstance(tensor, ir.ExternalTensor):
            where = (Path(tensor.base_dir) / tensor.location).resolve()
            if not where.is_relative_to(folder):
                raise SpecError("model", f"initializer {value.name!r} reads external data {tensor.location!r}, "
                                f"outside the model's folder {str(folder)!r}: refused")  # fmt: skip
            if not where.is_file():
                raise SpecError("model", f"initializer {value.name!r} reads external data {tensor.location!r}, "
                                "which does not exist")  # fmt: skip
    return model


def _rope_spec(hf_config: Path) -> Any:
    from ropeexport.catalog import spec_from_dict
    from ropeexport.requests import from_hf_config

    spec = spec_from_dict(from_hf_config(hf_config)[0].fields)  # what `build --hf-config` would build
    if spec.encoding != "rope":
        raise SpecError("hf_config", f"describes {spec.encoding}; audit checks rotary models (RoPE) so far")
    return spec


def audit(model: str | Path, hf_config: str | Path, threads: int = 2) -> AuditResult:
    """Audit ``model`` (an ONNX file) against ``hf_config`` (a transformers config.json) (module doc)."""
    path = Path(model)
    graph = _load(path)
    spec = _rope_spec(Path(hf_config))
    sites = find_sites(graph)
    if not sites:
        raise SpecError("model", f"{str(path)!r} has no rotary position encoding ropeexport can find (no "
                        "GroupQueryAttention with do_rotary, RotaryEmbedding, or Cos/Sin of positions)")  # fmt: skip
    evaluator = Evaluator(path, threads)
    width = spec.rotary_dim // 2
    result = AuditResult(str(path), str(hf_config), spec.to_dict())
    for site in sites:
        record: dict[str, Any] = site.to_dict() | {"probes": [], "findings": [], "exact": False, "dtype": None}
        if site.kind == "unidentified":
            text = f"a {'Cos' if site.cos else 'Sin'} that is not a rotation ropeexport recognises: not checked"
            record["findings"].append({"name": "unidentified-site", "text": text})
            result.sites.append(record)
            continue
        for length in probe_lengths(spec):
            cos, sin, dtype = evaluator.evaluate(site, length, width)
            if cos.shape[-1] != width:
                raise SpecError("hf_config", f"describes rotary_dim {spec.rotary_dim} (tables {width} wide) but the "
                                f"model's cos/sin at {site.cos!r} are {cos.shape[-1]} wide: the config does not "
                                "describe this model (head_dim, partial_rotary_factor)")  # fmt: skip
            probe = compare(spec, cos, sin, length, dtype)
            record["dtype"] = dtype
            record["probes"].append(probe.to_dict())
        record["exact"] = all(p["exact"] for p in record["probes"])
        record["findings"] = _summary(record["probes"])
        result.sites.append(record)
    return result


def _summary(probes: list[dict[str, Any]]) -> list[dict[str, str]]:
    """A site's findings: each name once, in the words of the probe where it weighs most (its largest error)."""
    best: dict[str, tuple[float, dict[str, str]]] = {}
    for probe in probes:
        for finding in probe["findings"]:
            held = best.get(finding["name"])
            if held is None or probe["max_abs"] > held[0]:
                best[finding["name"]] = (probe["max_abs"], finding)
    return [finding for _, finding in best.values()]


def write(result: AuditResult, out: str | Path) -> list[Path]:
    """audit.json and audit.md into ``out``, whole or not at all (a folder of a previous audit is updated)."""
    out = Path(out)
    if out.exists() and not (out / "audit.json").is_file():
        raise SpecError("out_dir", f"{str(out)!r} exists and holds no audit: give a new folder or a previous audit's")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        (scratch / "audit.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        (scratch / "audit.md").write_text(result.markdown())
        if not out.exists():
            scratch.rename(out)
        else:
            for name in ("audit.json", "audit.md"):
                os.replace(scratch / name, out / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [out / "audit.json", out / "audit.md"]
