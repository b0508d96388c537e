"""``ropeexport list``: encodings, layouts, graph styles, dtypes and frequency schedules with their parameters.

Examples:
  ropeexport list
  ropeexport list --json

"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from ropeexport.encodings.schedules import SCHEDULES
from ropeexport.registry import KINDS
from ropeexport.spec import DTYPES, GRAPHS, LAYOUTS, SpecBase, encodings


def add_parser(sub: Any) -> None:
    """Register ``list``."""
    p = sub.add_parser(
        "list",
        help="list encodings and schedules",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def _encoding(name: str, cls: type[SpecBase]) -> dict[str, Any]:
    defaults = cls()  # every spec class builds with its defaults
    fields = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(cls) if f.name != "name"}
    out: dict[str, Any] = {
        "summary": (cls.__doc__ or "").strip().splitlines()[0],
        "artifacts": {a: KINDS[(name, a)].summary for a in cls.artifacts if (name, a) in KINDS},
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


def run(args: argparse.Namespace) -> int:
    """Print the catalogue."""
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
