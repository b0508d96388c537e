"""``ropeexport list``: encodings, layouts, graph styles, dtypes and frequency schedules with their parameters.

Examples:
  ropeexport list
  ropeexport list --json
  ropeexport list --presets          # model presets with their key parameters and sources

"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from ropeexport.catalog import encodings, recipes, spec_from_dict
from ropeexport.cli import subcommand
from ropeexport.dtypes import DTYPES
from ropeexport.families.rope.schedules import SCHEDULES
from ropeexport.families.rope.spec import LAYOUTS
from ropeexport.presets import presets
from ropeexport.specs import GRAPHS, SpecBase


def add_parser(sub: Any) -> None:
    """Register ``list``."""
    p = subcommand(sub, "list", __doc__, run)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--presets", action="store_true", help="list the model presets instead")


def _encoding(name: str, cls: type[SpecBase]) -> dict[str, Any]:
    defaults = cls()  # every spec class builds with its defaults
    fields = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(cls) if f.name != "name"}
    out: dict[str, Any] = {
        "summary": (cls.__doc__ or "").strip().splitlines()[0],
        "artifacts": {a: recipes()[(name, a)].summary for a in cls.artifacts if (name, a) in recipes()},
        "graphs": list(GRAPHS),
        "dtypes": list(DTYPES),
        "fields": {k: (dict(v) if isinstance(v, dict) else v) for k, v in fields.items()},
    }
    if name == "rope":
        out["layouts"] = list(LAYOUTS)
    return out


def catalogue() -> dict[str, Any]:
    """What ropeexport can build, as plain data."""
    return {
        "encodings": {name: _encoding(name, cls) for name, cls in encodings().items()},
        "schedules": {
            s.name: {
                "summary": s.summary,
                "regime": s.regime,
                "params": {
                    p.name: {
                        "type": p.kind,
                        "required": p.required,
                        "default": p.default,
                        "allowed": p.allowed(),
                        "help": p.help,
                    }
                    for p in s.params
                },
            }
            for s in SCHEDULES.values()
        },
    }


def _resolved(preset: Any) -> dict[str, Any]:
    """A preset's key parameters as the built spec holds them (rotary_dim 0 resolved to head_dim, and so on)."""
    spec = spec_from_dict(preset.imported().fields).to_dict()
    return {k: spec.get(k, v) for k, v in preset.key_parameters().items()}


def preset_catalogue() -> dict[str, Any]:
    """Every preset: summary, source, key parameters and default artifacts, as plain data."""
    return {
        name: {
            "summary": p.summary,
            "source": p.source,
            "notes": p.notes,
            "parameters": _resolved(p),
            "builds": {"artifacts": list(p.artifacts), "dtypes": list(p.dtypes), "graphs": list(p.graphs)},
        }
        for name, p in presets().items()
    }


def _print_presets(data: dict[str, Any]) -> None:
    for name, p in data.items():
        params = p["parameters"]
        key = ", ".join(f"{k} {v}" for k, v in params.items() if k != "encoding")
        builds = p["builds"]
        print(f"{name}  [{params.get('encoding')}] {key}")
        print(f"    {p['summary']}")
        print(f"    builds {'/'.join(builds['artifacts'])} {'/'.join(builds['dtypes'])} {'/'.join(builds['graphs'])}")
        print(f"    source: {p['source']}")


def run(args: argparse.Namespace) -> int:
    """Print the catalogue (or the presets)."""
    if args.presets:
        presets_data = preset_catalogue()
        if args.json:
            print(json.dumps(presets_data, indent=2))
        else:
            _print_presets(presets_data)
        return 0
    data = catalogue()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for name, enc in data["encodings"].items():
        print(f"encoding {name}: {enc['summary']}")
        for artifact, summary in enc["artifacts"].items():
            print(f"  --artifact {artifact}: {summary}")
        fields = ", ".join(f"--{k.replace('_', '-')} ({v})" for k, v in enc["fields"].items() if k != "scaling_params")
        print(f"  fields (defaults): {fields}")
    print("schedules (--scaling NAME --scaling-param KEY=VALUE):")
    for name, s in data["schedules"].items():
        print(f"  {name:9s} {s['summary']}")
        for pname, p in s["params"].items():
            need = "required" if p["required"] else f"default {p['default']}"
            print(f"            {pname} ({p['allowed']}; {need}): {p['help']}")
    return 0
