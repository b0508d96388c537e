"""``ropeexport list``: encodings, layouts, graph styles, dtypes and frequency schedules with their parameters.

Examples:
  ropeexport list
  ropeexport list --json

"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ropeexport.encodings.schedules import SCHEDULES
from ropeexport.spec import DTYPES, GRAPHS, LAYOUTS, SPECS


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


def catalogue() -> dict[str, Any]:
    """What ropeexport can build, as plain data."""
    return {
        "encodings": {
            name: {"layouts": list(LAYOUTS), "graphs": list(GRAPHS), "dtypes": list(DTYPES)} for name in SPECS
        },
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
        print(
            f"encoding {name}: layouts {', '.join(enc['layouts'])}; graphs {', '.join(enc['graphs'])}; "
            f"dtypes {', '.join(enc['dtypes'])}"
        )
    print("schedules (--scaling NAME --scaling-param KEY=VALUE):")
    for name, s in data["schedules"].items():
        print(f"  {name:9s} {s['summary']}")
        for pname, p in s["params"].items():
            need = "required" if p["required"] else f"default {p['default']}"
            print(f"            {pname} ({p['allowed']}; {need}): {p['help']}")
    return 0
