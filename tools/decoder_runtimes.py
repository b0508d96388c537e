"""Which decoders each runtime verifies, and how long: every tiny architecture x variant on ORT and onnx.reference.

    python tools/decoder_runtimes.py --out tools/figures                          # the whole table (minutes)
    python tools/decoder_runtimes.py --configs llama --forms fused,gqa --out /tmp/r  # two rows

Each row is a tiny random checkpoint of ``tests/decoder/tiny.py`` (every architecture, 2 to 6 layers, hidden 32 or
64, vocabulary 96: what the tests build) in one variant (``VARIANTS``: each graph form, fused fp16, fused with int4
weights), built with ``rx.build_decoder(checkpoint=..., eager=False, **VARIANTS[variant])``
(verified on ORT at build), then verified again with ``rx.verify(folder, runtimes=["ort", "onnx-reference"])``:
each runtime's status (verified, or skipped with the ops it lacks), its verdict, worst error over the logit scale
and its seconds (``report.json``'s per-runtime ``seconds``: every scenario generated and judged, the float64
truth included), and the whole verify's wall time (hash checks, weights read, both runtimes). The ``sizes`` rows are
seeded Llama-3.1-8B configs shrunk by ``--num-layers`` / ``--hidden-size`` / ``--vocab-size``: how the time grows
with the model. Writes ``decoder-runtimes.json`` and ``decoder-runtimes.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ropeexport as rx  # noqa: E402

# variant -> build_decoder's graph form, dtype and weight format
VARIANTS: dict[str, dict[str, str]] = {
    "fused": {"graph": "fused"},
    "decomposed": {"graph": "decomposed"},
    "tensorrt": {"graph": "tensorrt"},
    "gqa": {"graph": "gqa"},
    "fused fp16": {"graph": "fused", "dtype": "fp16"},
    "fused int4": {"graph": "fused", "weight_format": "int4"},
}
RUNTIMES = ["ort", "onnx-reference"]
# (label, build_decoder's size arguments): seeded llama-3.1-8b shrunk, fp32 fused
SIZES = [("l1 h256 v128", {"num_layers": 1, "hidden_size": 256, "vocab_size": 128}),
         ("l2 h512 v2048", {"num_layers": 2, "hidden_size": 512, "vocab_size": 2048}),
         ("l4 h1024 v8192", {"num_layers": 4, "hidden_size": 1024, "vocab_size": 8192})]  # fmt: skip


def verify_row(folder: Path) -> dict[str, Any]:
    """``rx.verify`` on both runtimes: its wall time and per runtime status, verdict, worst error, seconds, reason."""
    began = time.perf_counter()
    [result] = rx.verify(folder, runtimes=RUNTIMES)
    row: dict[str, Any] = {"verify_seconds": round(time.perf_counter() - began, 2), "runtimes": {}}
    for record in result.report["runtimes"]:
        row["runtimes"][record["name"]] = {k: record[k] for k in ("status", "passed", "worst_rel", "seconds",
                                                                   "reason", "device") if k in record}  # fmt: skip
    return row


def measure(configs: list[str], variants: list[str], sizes: bool, work: Path) -> list[dict[str, Any]]:
    """Every (config, variant) row, then the sizes rows (module doc)."""
    from ropeexport.errors import SpecError
    from tests.decoder.tiny import checkpoint

    rows = []
    for name in configs:
        ckpt = checkpoint(work / "checkpoints" / name, name)
        for form in variants:
            try:
                built = rx.build_decoder(work / "out", checkpoint=ckpt, eager=False, **VARIANTS[form])
            except SpecError as exc:  # what the architecture does not take (gemma2's soft caps in tensorrt)
                rows.append({"config": name, "form": form, "refused": f"{exc.field}: {exc.message}"})
                continue
            rows.append({"config": name, "form": form, "built": built.passed} | verify_row(built.path))
            print(json.dumps(rows[-1]), flush=True)
    for label, fields in SIZES if sizes else []:
        built = rx.build_decoder(work / "out", preset="llama-3.1-8b", eager=False, **fields)
        rows.append({"config": f"llama-3.1-8b {label}", "form": "fused", "built": built.passed}
                    | verify_row(built.path))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _cell(record: dict[str, Any] | None) -> str:
    if record is None:
        return "-"
    if record["status"] != "verified":
        reason = str(record.get("reason", ""))
        return "cannot run: " + reason.split("has no kernel for ", 1)[-1].replace(" (ops the model uses)", "")
    verdict = "passed" if record.get("passed") else "FAILED"
    return f"{verdict}, {record['worst_rel']:.1e}, {record['seconds']:.2f} s"


def markdown(data: dict[str, Any]) -> str:
    """The table: per row, each runtime's verdict, worst error over the logit scale and seconds, or what it lacks."""
    lines = [
        "# Decoders verified on ONNX Runtime and onnx.reference",
        "",
        f"ONNX Runtime {data['versions']['onnxruntime']} (CPU provider), onnx.reference {data['versions']['onnx']}. "
        "Per runtime: verdict, worst call's max |logit error| over the logit scale against float64, and the seconds "
        "its verification took (every scenario generated and judged, the float64 truth included); `verify` is the "
        "whole `rx.verify` on both runtimes. Reproduce: `python tools/decoder_runtimes.py --out tools/figures`.",
        "",
        "| model | variant | ort | onnx-reference | verify |",
        "|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        if "refused" in row:
            lines.append(f"| {row['config']} | {row['form']} | not built: {row['refused']} | | |")
            continue
        runtimes = row["runtimes"]
        lines.append(f"| {row['config']} | {row['form']} | {_cell(runtimes.get('ort'))} | "
                     f"{_cell(runtimes.get('onnx-reference'))} | {row['verify_seconds']:.1f} s |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Measure (module doc) and write the JSON and the Markdown."""
    from tests.decoder.tiny import CONFIGS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for decoder-runtimes.json / .md")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="tests/decoder/tiny.py names, comma-separated")
    parser.add_argument("--forms", default=",".join(VARIANTS), help="variants (graph forms, fp16, int4), "
                        "comma-separated")
    parser.add_argument("--no-sizes", dest="sizes", action="store_false", help="skip the seeded sizes rows")
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS] + [f for f in args.forms.split(",") if f not in VARIANTS]
    if unknown:
        parser.error(f"unknown config or form {unknown[0]!r}; configs: {', '.join(CONFIGS)}; forms: "
                     f"{', '.join(VARIANTS)}")
    import onnx
    import onnxruntime

    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory() as work:
        rows = measure(configs, args.forms.split(","), args.sizes, Path(work))
    data = {
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "decoder-runtimes.json").write_text(json.dumps(data, indent=1) + "\n")
    (args.out / "decoder-runtimes.md").write_text(markdown(data))
    print(args.out / "decoder-runtimes.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
