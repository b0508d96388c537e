"""What ONNX Runtime's graph optimizer does to the rotations of every decoder form ropeexport builds, and what
``audit --optimized`` says of the graph it runs: the figures of issue 41, item 8.

    python tools/optimized_rotations.py --out tools/figures

Runs under whatever onnxruntime the interpreter imports and keeps one run per version in
``optimized-rotations.json`` (a run of another version is added beside, the same version's replaced), so the pinned
version and the newest are measured by the same tool: the second from a virtual environment that holds only that
onnxruntime (``pip install --no-deps onnxruntime==1.32.0``) and reaches the project's other packages through a .pth
file naming the project venv's site-packages, with this checkout on PYTHONPATH::

    PYTHONPATH=. /tmp/ort132/bin/python tools/optimized_rotations.py --out tools/figures

Per run: (1) whether the CPU provider fuses a RotaryEmbedding into GroupQueryAttention at level all (a graph made for
GroupQueryAttentionFusion to match: Q/K/V MatMuls with float16 weights, a RotaryEmbedding of each domain, interleaved
or not); (2) every decoder form (fused, decomposed, tensorrt, gqa; fp32) of the tiny random checkpoints of GPT-J
(interleaved, 4 of 8 channels), GPT-NeoX (halves, 4 of 8) and Phi-4-mini's shape (halves, 12 of 16, LongRoPE), at
each level (basic, extended, all): the rotary sites before and after, what the optimizer did to them, the optimized
graph's audit; (3) ONNX Runtime PR #29261's first revision of that fusion planted into the CPU provider's optimized
gqa-form graph (``tests/audits/fusion.py``), as the audit names it. Writes ``optimized-rotations.json`` and
``optimized-rotations.md`` (rendered into docs/reference/audit.md). Nothing is downloaded.
"""  # noqa: D205

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAMES = {"gptj": "GPT-J: interleaved, 4 of 8 channels", "gpt_neox": "GPT-NeoX: halves, 4 of 8 channels",
         "phi3-partial-longrope": "Phi-4-mini's shape: halves, 12 of 16 channels, LongRoPE"}  # fmt: skip
PLANTED = ["gptj", "gptj-d16", "gpt_neox", "gpt_neox-d32", "phi3-partial-longrope"]
LEVELS = ("basic", "extended", "all")


def _ops(path: Path) -> collections.Counter[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return collections.Counter(f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in model.graph.node)


def fusion_probe(work: Path) -> list[dict[str, Any]]:
    """(1): for each RotaryEmbedding domain and pairing, whether level all fused it into GroupQueryAttention."""
    import onnx

    from ropeexport.audits.optimizer import optimize
    from tests.audits.test_optimized import FUSABLE, _gqa_after_rotations

    rows = []
    for domain, interleaved in FUSABLE:
        folder = work / f"probe-{domain or 'onnx'}-{interleaved}"
        (folder / "optimized").mkdir(parents=True)
        onnx.save(_gqa_after_rotations(domain, interleaved), str(folder / "model.onnx"))
        saved = onnx.load(str(optimize(folder / "model.onnx", "all", folder / "optimized")))
        rotary = [n for n in saved.graph.node if n.op_type == "GroupQueryAttention"
                  and any(a.name == "do_rotary" and a.i for a in n.attribute)]  # fmt: skip
        rows.append({"domain": domain or "ai.onnx (opset 23)", "interleaved": interleaved, "fused": bool(rotary),
                     "rotary_embedding_after": sum(n.op_type == "RotaryEmbedding" for n in saved.graph.node)})
    return rows


def form_rows(work: Path, checkpoints: dict[str, Path]) -> list[dict[str, Any]]:
    """(2): every form and level of each checkpoint of ``NAMES``."""
    import ropeexport as rx
    from ropeexport.audits.optimizer import optimize
    from ropeexport.decoder.spec import FORMS
    from tests.audits.test_optimized import _decoder

    rows = []
    for name in NAMES:
        for form in FORMS:
            folder = work / f"{name}-{form}"
            folder.mkdir(parents=True)
            model = _decoder(folder, checkpoints[name], form)
            for level in LEVELS:
                start = time.perf_counter()
                result = rx.audit(model, checkpoints[name] / "config.json", optimized=level)
                record = result.optimized
                assert record is not None
                (folder / level).mkdir()
                before, after = _ops(model), _ops(optimize(model, level, folder / level))
                moved = {k: [before[k], after[k]] for k in sorted({*before, *after}) if before[k] != after[k]}
                rows.append({"checkpoint": name, "form": form, "level": level, "verdict": result.verdict,
                             "exported": [s["kind"] for s in result.sites], "optimized_verdict": record["verdict"],
                             "optimized": [s["kind"] for s in record["sites"]],
                             "sites": [record["sites_before"], record["sites_after"]], "changed": record["changed"],
                             "text": record["text"], "findings": [f["name"] for f in record["findings"]],
                             "ops_changed": moved, "seconds": round(time.perf_counter() - start, 1)})  # fmt: skip
                print(f"{name} {form} {level}: {record['verdict']}; {record['text']}", flush=True)
    return rows


def planted_rows(work: Path, checkpoints: dict[str, Path]) -> list[dict[str, Any]]:
    """(3): the fusion planted into each checkpoint's gqa form, dropping ``interleaved`` and carrying it over."""
    import ropeexport as rx
    from tests.audits.test_optimized import _planted

    rows = []
    for name in PLANTED:
        for carry in (False, True):
            folder = work / f"planted-{name}-{carry}"
            folder.mkdir(parents=True)
            model, planted = _planted(folder, checkpoints[name], carry)
            result = rx.audit(model, checkpoints[name] / "config.json", optimized_model=planted)
            record = result.optimized
            assert record is not None
            rows.append({"checkpoint": name, "interleaved_carried": carry, "verdict": result.verdict,
                         "gate_passed": result.gate["passed"], "changed": record["changed"],
                         "text": record["text"],
                         "findings": [{"name": f["name"], "level": f["severity"]["level"],
                                       "relative": (f.get("effect") or {}).get("relative"), "text": f["text"]}
                                      for f in record["findings"]]})  # fmt: skip
            print(f"planted {name} carried={carry}: {result.verdict}; {record['text']}", flush=True)
    return rows


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    """Every run's tables, the newest version last."""
    lines = ["# What ONNX Runtime's optimizer does to ropeexport's rotations", "",
             "Each run: `" + "`, `".join(r["command"] for r in runs.values()) + "`. Tiny random checkpoints "
             "(`tests/decoder/tiny.py`; the planted rows' `-d16` / `-d32` shapes: `tests/audits/test_optimized.py`), "
             "fp32; the CPU provider (this machine has no GPU: a GPU provider's own fusions are not seen). The same "
             "cases are asserted by `pytest tests/audits/test_optimized.py`.", ""]  # fmt: skip
    for version, run in sorted(runs.items(), key=lambda kv: tuple(int(x) for x in kv[0].split(".")[:3])):
        lines += [f"## onnxruntime {version}", "", f"*{run['machine']}; load average (1, 5, 15 min) before "
                  f"{', '.join(f'{x:g}' for x in run['load_average']['before'])}, after "
                  f"{', '.join(f'{x:g}' for x in run['load_average']['after'])}.*", "",
                  "### Does the CPU provider fuse RotaryEmbedding into GroupQueryAttention?", "",
                  "| RotaryEmbedding domain | interleaved | fused into do_rotary at level all "
                  "| RotaryEmbedding after |",
                  "|---|---:|---|---:|"]  # fmt: skip
        for r in run["probe"]:
            lines.append(f"| {r['domain']} | {r['interleaved']} | {'yes' if r['fused'] else 'no'} | "
                         f"{r['rotary_embedding_after']} |")  # fmt: skip
        lines += ["", "### Every form, every level: `ropeexport audit MODEL --hf-config CONFIG --optimized LEVEL`", "",
                  "| checkpoint | form | level | sites before -> after | what the optimizer did | optimized graph | "
                  "audit |", "|---|---|---|---:|---|---|---|"]  # fmt: skip
        for r in run["forms"]:
            kinds = ", ".join(sorted(set(r["optimized"])))
            did = r["text"].replace("|", "\\|")
            lines.append(f"| {NAMES[r['checkpoint']]} | {r['form']} | {r['level']} | {r['sites'][0]} -> "
                         f"{r['sites'][1]} | {did} | {kinds}: {r['optimized_verdict']} | {r['verdict']} |")
        lines += ["", "### PR #29261's first revision of the fusion, planted into the CPU provider's level-all graph "
                  "of the gqa form: `ropeexport audit MODEL --hf-config CONFIG --optimized-model PLANTED`", "",
                  "| checkpoint | interleaved | what the optimizer did | the optimized graph's findings "
                  "| audit, gate |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for r in run["planted"]:
            found = "<br>".join(f"`{f['name']}` ({f['level']}"
                                + (f", {f['relative']:.2g} of the logit scale" if f["relative"] is not None else "")
                                + ")" for f in r["findings"]) or "none"  # fmt: skip
            did = r["text"].replace("|", "\\|")
            lines.append(f"| {r['checkpoint']} | {'carried over' if r['interleaved_carried'] else 'dropped'} | "
                         f"{did} | {found} | {r['verdict']}, {'passed' if r['gate_passed'] else 'FAILED'} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure under this interpreter's onnxruntime; merge into the figures; write both files."""
    import onnxruntime

    from tests.audits.test_optimized import MORE
    from tests.decoder.tiny import CONFIGS, checkpoint

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder for optimized-rotations.json and .md")
    args = parser.parse_args(argv)
    load_before = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="optimized-rotations-") as folder, patch.dict(CONFIGS, MORE):
        work = Path(folder)
        checkpoints = {n: checkpoint(work / "checkpoints" / n, n) for n in {*NAMES, *PLANTED}}
        run = {"probe": fusion_probe(work), "forms": form_rows(work, checkpoints),
               "planted": planted_rows(work, checkpoints)}  # fmt: skip
    exe = "python" if Path(sys.executable).parent == ROOT / ".venv" / "bin" else f"PYTHONPATH=. {sys.executable}"
    run |= {"command": f"{exe} tools/optimized_rotations.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "onnxruntime": onnxruntime.__version__, "platform": platform.platform(),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            "load_average": {"before": load_before, "after": list(os.getloadavg())}}  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "optimized-rotations.json"
    runs = json.loads(path.read_text())["runs"] if path.is_file() else {}
    runs[onnxruntime.__version__] = run
    machines = sorted({r["machine"] for r in runs.values()})
    loads = {f"{v} {when}": r["load_average"][when] for v, r in runs.items() for when in ("before", "after")}
    path.write_text(json.dumps({"machine": "; ".join(machines), "load_average": loads, "runs": runs}, indent=2) + "\n")
    (out / "optimized-rotations.md").write_text(markdown(runs))
    exact = all(r["optimized_verdict"] == "exact" and not r["changed"] for r in run["forms"])
    return 0 if exact and not any(r["fused"] for r in run["probe"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
