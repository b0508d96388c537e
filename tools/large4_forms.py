"""Mistral Large 4 (``mistral_large4_text``) with its DSA indexer in the forms the suite does not build, by hand.

The suite builds the tiny checkpoint of ``tests/decoder/tiny.py`` (``mistral_large4``) decomposed with the latent
cache (fp32, and fp16 without transformers), and its twin ``mistral_large4-unshared`` fused in fp32. Layer 2 of the
first reads layer 1's latent (``kv_source_layers``), which is built over the latent cache only, so the expanded-cache
forms (fused, decomposed) are refused on it by name; the twin has ``kv_source_layers`` [0, 1, 2, 3] (no shared cache;
the same seed, every other field equal: the shared indexer layer, layer 2's own indexer, the NoPE layer 3,
``index_topk`` 4, 16 indexer heads). This script writes both checkpoints, builds the other forms with
``ropeexport.build_decoder`` (eager: transformers' ``MistralLarge4ForConditionalGeneration``
in the build's dtype; int4 against float64 on its dequantized weights only), checks that the gqa form is refused
(one line, exit 2, nothing written) and prints per form: passed, the worst error over the logit scale against float64
and transformers, transformers' own distance from float64, the selection and router flips the verifier took (layer,
row, slot, the keys or experts swapped, the margin) and the build's wall time. Run by hand (about a minute on 2 cores):

    python tools/large4_forms.py /tmp/large4-forms
"""  # noqa: D205

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (label, checkpoint: "shared" the suite's, "unshared" its twin, build fields)
# (fused fp32 on the twin is in the suite, tests/decoder/test_decoder.py, and so is the latent-cache fp16 build, there
# without transformers: here its fp16 figures are printed)
FORMS: list[tuple[str, str, dict[str, Any]]] = [
    ("decomposed fp32 (expanded cache)", "unshared", {"graph": "decomposed", "dtype": "fp32"}),
    ("fused fp16", "unshared", {"graph": "fused", "dtype": "fp16"}),
    ("fused int4", "unshared", {"graph": "fused", "dtype": "fp32", "weight_format": "int4"}),
    ("decomposed fp16, latent cache", "shared", {"graph": "decomposed", "dtype": "fp16", "latent_cache": True}),
]


def checkpoints(root: Path) -> dict[str, Path]:
    """The suite's tiny checkpoint (seed 0) and its twin without shared caches, each written once under ``root``."""
    from tests.decoder import tiny

    made = {}
    for kind, name in (("shared", "mistral_large4"), ("unshared", "mistral_large4-unshared")):
        folder = root / "checkpoints" / kind / "mistral_large4"
        if not (folder / "config.json").is_file():
            tiny.checkpoint(folder, name, 0)
        made[kind] = folder
    return made


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """The worst figures of a report.json over its scenarios, and every flip as (scenario, calls, flip)."""
    scenarios = report["scenarios"]

    def worst(key: str) -> float | None:
        values = [s["summary"].get(key) for s in scenarios if s["summary"].get(key) is not None]
        return max(values) if values else None

    flips: dict[tuple[str, tuple[tuple[str, Any], ...]], list[int]] = {}
    for s in scenarios:
        for call in s["calls"]:
            for flip in call.get("routing_flips", []):
                named = tuple((k, round(v, 5) if isinstance(v, float) else v) for k, v in sorted(flip.items()))
                flips.setdefault((s["name"], named), []).append(call["index"])
    return {"passed": report["passed"], "float64": worst("worst_rel"), "transformers": worst("worst_rel_transformers"),
            "transformers_vs_float64": worst("worst_rel_transformers_vs_float64"), "flips": flips}  # fmt: skip


def gqa_refusal(ckpt: Path, out: Path) -> str:
    """The CLI's answer to a gqa build: its exit status, its stderr lines, whether anything was written."""
    done = subprocess.run([sys.executable, "-m", "ropeexport", "build", "--artifact", "decoder", "--checkpoint",
                           str(ckpt), "--graph", "gqa", "--out", str(out)], capture_output=True, text=True)  # fmt: skip
    lines = done.stderr.strip().splitlines()
    return f"exit {done.returncode}, {len(lines)} stderr line(s), written: {out.exists()}: {lines[-1] if lines else ''}"


def fmt(value: float | None) -> str:
    """A figure of two digits, or "skipped" where the reference was."""
    return "skipped" if value is None else f"{value:.2g}"


def main(argv: list[str] | None = None) -> int:
    """Build every form of FORMS under ROOT/builds and print its figures; exit 1 when a form fails."""
    import json

    import ropeexport as rx

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a folder for the checkpoints and builds (reused: builds replaced)")
    args = parser.parse_args(argv)
    ckpts = checkpoints(args.root)
    print("gqa (shared):", gqa_refusal(ckpts["shared"], args.root / "gqa-shared"))
    print("gqa (unshared):", gqa_refusal(ckpts["unshared"], args.root / "gqa-unshared"))
    failed = False
    for label, kind, fields in FORMS:
        start = time.perf_counter()
        result = rx.build_decoder(args.root / "builds" / kind, checkpoint=ckpts[kind], replace=True, **fields)
        wall = time.perf_counter() - start
        got = summary(json.loads((result.path / "report.json").read_text()))
        failed |= not got["passed"]
        print(f"{label} ({kind} checkpoint): {'passed' if got['passed'] else 'FAILED'}; worst / logit scale: "
              f"float64 {fmt(got['float64'])}, transformers {fmt(got['transformers'])} (transformers vs float64 "
              f"{fmt(got['transformers_vs_float64'])}); wall {wall:.0f} s")  # fmt: skip
        for (scenario, flip), calls in got["flips"].items():
            print(f"    flip in {scenario} calls {calls[0]}-{calls[-1]}: {dict(flip)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
