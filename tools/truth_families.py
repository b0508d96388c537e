"""``audit`` / ``graft --checkpoint`` on families ropeexport does not build as decoders, proven against transformers'
own model (the proof's transformers truth, ``ropeexport.audits.hf_truth``): Qwen3.5 text, Granite 4, LFM2 and
Gemma 3n, each a tiny random checkpoint exported by torch.onnx dynamo without a cache (``tests/audits/hybrids.py``).

    python tools/truth_families.py --work /tmp/truth-families --out tools/figures

Per family: the export (or the exporter's reason), the rotary sites the audit finds with the layers reading them and
its verdict, the graft (audit after, the proof of the original and the grafted model against transformers' model in
float64: the logit error at each far call, the last position included), and one layer's cos and sin exchanged where
its rotations use them (``tests/audits/uses_planted.plant``, ``swap``): the audit's finding and its layers, and the
proof's verdict of that model. Writes ``truth-families.json`` and ``truth-families.md`` under ``--out``.
"""  # noqa: D205

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def family_row(family: str, work: Path) -> dict[str, Any]:
    """One family end to end (module doc)."""
    import ropeexport as rx
    from ropeexport.audits.prove import DecoderProof
    from ropeexport.errors import SpecError
    from tests.audits.hybrids import FAMILIES, export, write_checkpoint
    from tests.audits.uses_planted import plant

    model_type, _, rotated, layer, width = FAMILIES[family]
    row: dict[str, Any] = {"family": family, "model_type": model_type, "rotated_layers": list(rotated)}
    ckpt = work / "checkpoint"
    if not (ckpt / "config.json").is_file():
        write_checkpoint(family, ckpt)
    config = ckpt / "config.json"
    start = time.perf_counter()
    model = work / "clean" / "model.onnx"
    row["export_s"] = None  # an export of an earlier run reused
    if not model.is_file():
        made = export(ckpt, work / "clean")
        row["export_s"] = round(time.perf_counter() - start, 1)
        if isinstance(made, str):
            return row | {"export_error": made}
    audited = rx.audit(model, config)
    row["audit"] = {"verdict": audited.verdict, "sites": [_site(s) for s in audited.sites],
                    "findings": [_finding(f) for f in audited.findings]}  # fmt: skip
    grafted = work / "grafted.onnx"
    for stale in (grafted, grafted.with_name("grafted.onnx.data")):
        stale.unlink(missing_ok=True)
    try:
        done = rx.graft(model, config, grafted, checkpoint=ckpt)
    except SpecError as exc:  # recorded, not hidden: the row says why graft refused
        row["graft"] = {"refused": str(exc), "calls": []}
    else:
        decoder = done.decoder or {}
        use = decoder.get("use") or {}
        row["graft"] = {"verdict": done.verdict, "text": done.text, "truth": done.truth,
                        "truth_words": decoder.get("truth", {}).get("words"),
                        "placed": decoder.get("truth", {}).get("how"),
                        "after": done.after.verdict if done.after else None,
                        "use": use.get("relative", use.get("not_measured")),
                        "calls": [_call(c) for c in decoder.get("calls", [])]}  # fmt: skip
    planted = plant(model, work / "planted" / "model.onnx", "computed", "swap", layer, width)
    found = rx.audit(planted, config)
    proof = DecoderProof(config, ckpt, planted).run({"planted": planted})
    row["planted"] = {"fault": f"cos and sin exchanged on layer {layer}", "layer": layer,
                      "findings": [_finding(f) for f in found.findings],
                      "proof": proof["verdict"]["planted"]["verdict"], "truth": proof["truth"]["kind"],
                      "calls": [_call(c) for c in proof["calls"]]}  # fmt: skip
    return row


def _site(site: dict[str, Any]) -> dict[str, Any]:
    return {"kind": site["kind"], "layers": site.get("layers"), "exact": site["exact"],
            "findings": [f["name"] for f in site["findings"]]}  # fmt: skip


def _finding(found: dict[str, Any]) -> dict[str, Any]:
    return {"name": found["name"], "text": found["text"], "layers": found.get("layers"),
            "level": (found.get("severity") or {}).get("level"),
            "effect": (found.get("effect") or {}).get("relative")}  # fmt: skip


def _call(call: dict[str, Any]) -> dict[str, Any]:
    models = {label: {k: m[k] for k in ("rel", "passed", "placed", "not_run") if k in m}
              for label, m in call["models"].items()}  # fmt: skip
    return {"call": call["call"], "positions": call["positions"], "models": models}


def markdown(rows: list[dict[str, Any]], command: str) -> str:
    """The figures page (module doc)."""
    lines = ["# The proof's transformers truth on families ropeexport does not build", "",
             f"`{command}`. Tiny random checkpoints (``tests/audits/hybrids.py``: 4 or 5 layers, hidden 64, 4 / 2 "
             "heads), exported by torch.onnx dynamo without a cache (states start empty on every call); the proof "
             "judges against transformers' own model in float64, eager, no cache, exact float64 angles per layer "
             "type, its calls placed by position_ids (8 tokens at 0..7 and at 4088..4095). Logits: max |logits - "
             "truth| / max |truth logit|, tolerance 1e-4. As users run them: the original against the grafted model "
             "on the runs of `audits/effect.py` (graft's `decoder.use`), or why not measured. Export: seconds of the "
             "dynamo export on this run's machine (2 shared cores, other runs beside it).", "",
             "| family | export (s) | rotary sites (layers) | audit | graft: audit after, proof | logits at "
             "4088..4095: original -> grafted | as users run them | one layer's cos/sin exchanged: audit | its proof "
             "(logits, worst call) |",
             "|---|---:|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "export_error" in r:
            lines.append(f"| {r['family']} ({r['model_type']}) | {r['export_s']} | dynamo refused: "
                         f"{r['export_error']} | | | | | | |")  # fmt: skip
            continue
        sites = "; ".join(f"{s['kind']} ({s['layers']})" for s in r["audit"]["sites"])
        audit = r["audit"]["verdict"] + "".join(f"<br>{f['text']} ({f['level']})" for f in r["audit"]["findings"])
        g = r["graft"]
        if "refused" in g:
            grafted = f"refused: {g['refused']}"
        else:
            grafted = f"audit after: {g['after']}; {g['text']} against {g['truth_words']}"
        far = g["calls"][-1]["models"] if g["calls"] else {}
        logits = " -> ".join(f"{far[k]['rel']:.2g}" for k in ("original", "grafted") if k in far and "rel" in far[k])
        p = r["planted"]
        named = "<br>".join(f"{f['text']} ({f['level']})" for f in p["findings"] if f["name"] != "float32-angles")
        worst = max((c["models"]["planted"].get("rel", 0.0) for c in p["calls"]), default=0.0)
        use = g.get("use")
        used = f"{use:.2g}" if isinstance(use, float) else f"not measured: {use}" if use else ""
        lines.append(f"| {r['family']} ({r['model_type']}) | {r['export_s'] or 'reused'} | {sites} | {audit} "
                     f"| {grafted} | {logits} | {used} | {named} | {p['proof']} ({worst:.2g}) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def rerender(out: Path) -> None:
    """``truth-families.md`` written again from the JSON beside it (the page's words changed, not the figures)."""
    data = json.loads((out / "truth-families.json").read_text())
    (out / "truth-families.md").write_text(markdown(data["rows"], data["command"]))


def main(argv: list[str] | None = None) -> int:
    """Every family; write the figures (module doc)."""
    from tests.audits.hybrids import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="checkpoints and exports go here (reused when present)")
    parser.add_argument("--out", required=True, help="folder for truth-families.json and truth-families.md")
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    args = parser.parse_args(argv)
    rows = []
    for family in args.families:
        folder = Path(args.work) / f"f{list(FAMILIES).index(family)}"
        folder.mkdir(parents=True, exist_ok=True)
        rows.append(family_row(family, folder))
        print(json.dumps(rows[-1])[:400], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python tools/truth_families.py " + " ".join(sys.argv[1:] if argv is None else argv)
    (out / "truth-families.json").write_text(json.dumps({"command": command, "rows": rows}, indent=2) + "\n")
    (out / "truth-families.md").write_text(markdown(rows, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
