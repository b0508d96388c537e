"""The docs' generated parts, committed in each page and rendered afresh by the MkDocs hook.

Each sits between ``<!-- render: WHAT -->`` and ``<!-- end render -->`` (as ``cog`` does, so a page reads whole in
the repository), is rewritten by ``python tools/docs_site.py`` and checked by ``tests/docs/test_generated.py``.

Nothing in these parts is copied by hand. ``cli COMMAND`` is that subcommand's ``--help`` as its argparse parser
prints it (``cli`` alone: the top-level help); ``figure NAME`` is a table rendered from ``tools/figures/NAME.json``
(or the Markdown the tool wrote beside it, ``figure-md NAME``), each headed by the command that reproduces it and
the machine and load the JSON records (or a sentence saying it records none); ``presets`` is the preset cards'
table from ``models/*.toml``; ``pins`` is constraints.txt's direct pins; ``output NAME`` is a tutorial's output
excerpt (``OUTPUTS``) from the run ``tools/tutorial_outputs.py`` recorded. An unknown directive, or a figure whose
file is missing, raises: ``mkdocs build --strict`` fails rather than publish a page with a hole.

Used by ``mkdocs.yml`` (``hooks:``) and by ``tests/docs/test_site.py``, which renders every page through it.

After a change to what a section renders from (a parser's help, a preset card, a figure's JSON, a decoder family's
row), and after a merge: ``python tools/docs_site.py`` rewrites every stale section (``--check``: lists them, exit 1,
writes nothing). A new marker needs no end line: the command adds it.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "tools" / "figures"
DIRECTIVE = re.compile(r"^<!-- render: ([a-z-]+)(?: ([A-Za-z0-9._-]+))? -->$", re.M)
END = "<!-- end render -->"
# A marker and, when committed, the section after it up to its end line (a new marker has none yet).
SECTION = re.compile(r"^(<!-- render: ([a-z-]+)(?: ([A-Za-z0-9._-]+))? -->)$(?:\n.*?^<!-- end render -->$)?",
                     re.M | re.S)  # fmt: skip
COMMAND = "python tools/docs_site.py"  # what rewrites the committed sections (run it from the checkout)


def load_figure(name: str) -> dict[str, Any]:
    """tools/figures/NAME.json, read (a missing file raises, naming it)."""
    path = FIGURES / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"figure {name}: {path} does not exist")
    return json.loads(path.read_text())


def _e(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}e}"


def _load_text(load: Any) -> str:
    """A load average as the JSON has it: [1, 5, 15 min] lists before/after, or one list."""
    if isinstance(load, dict):
        parts = [f"{k} {', '.join(f'{x:g}' for x in v)}" for k, v in load.items() if isinstance(v, list)]
        return "load average (1, 5, 15 min) " + "; ".join(parts)
    if isinstance(load, list):
        return "load average (1, 5, 15 min) " + ", ".join(f"{x:g}" for x in load)
    return ""


def _measured(parts: list[str]) -> str:
    said = [p for p in parts if p]
    if not said:
        return "*Machine and load: the JSON records neither.*"
    return "*Measured on: " + "; ".join(said) + ".*"


def _head(command: str | None, measured: str) -> str:
    lines = []
    if command:
        lines.append(f"Reproduce: `{command}`\n")
    lines.append(measured + "\n")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# The CLI


def cli(command: str | None) -> str:
    """``ropeexport [COMMAND] --help`` as the parser prints it, at a fixed width (the page must not depend on the
    terminal that builds it).
    """  # noqa: D205
    from ropeexport.cli import main

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "116"
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            try:
                main([*([command] if command else []), "--help"])
            except SystemExit as done:
                if done.code not in (0, None):
                    raise ValueError(f"cli {command}: --help exited {done.code}") from None
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    return "```text\n" + out.getvalue().rstrip() + "\n```\n"


def presets(_: str | None) -> str:
    """Every preset card: name, encoding, resolved key parameters, source (``ropeexport list --presets --json``)."""
    from ropeexport.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        main(["list", "--presets", "--json"])
    cards = json.loads(out.getvalue())
    lines = ["| preset | resolved parameters | builds | summary | source |", "|---|---|---|---|---|"]
    for name, card in cards.items():
        params = ", ".join(f"{k} {v}" for k, v in card["parameters"].items())
        b = card["builds"]
        builds = f"{' '.join(b['artifacts'])} {' '.join(b['dtypes'])} {' '.join(b['graphs'])}"
        source = card["source"]
        link = f"[{source.split('/')[-1] or source}]({source})" if source.startswith("https://") else source
        lines.append(f"| `{name}` | {params} | {builds} | {card['summary']} | {link} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# Figures from tools/figures/*.json


def _foundation(_: str | None) -> str:
    data = load_figure("foundation-figures")
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in data["rows"]:
        rows.setdefault((r["layout"], r["scaling"]), {})[(r["graph"], r["dtype"])] = r
    lines = ["| layout | scaling | table max ulp (fp32 / fp16 / bf16) | fused fp32 vs float64 | decomposed fp32 vs "
             "float64 | fused fp16 vs float64 |", "|---|---|---|---|---|---|"]  # fmt: skip
    for (layout, scaling), by in rows.items():
        ulps = " / ".join(f"{by[(g, d)]['table_max_ulp']:.4f}" for g, d in (("fused", "fp32"), ("fused", "fp16"),
                                                                             ("fused", "bf16")) if (g, d) in by)
        cell = [_e(by[k]["max_abs_vs_float64"]) if k in by else "-"
                for k in (("fused", "fp32"), ("decomposed", "fp32"), ("fused", "fp16"))]  # fmt: skip
        lines.append(f"| {layout} | {scaling} | {ulps} | " + " | ".join(cell) + " |")
    s = data["summary"]
    passed = sum(r["passed"] for r in data["rows"])
    lines += ["", f"{passed} of {s['cases']} cases pass at {s['max_positions']} positions; the largest table error is "
              f"{s['table_max_ulp']:.11f} ulp of the table's dtype; the largest fp32 output error against the "
              f"float64 oracle is {s['fp32_max_abs_vs_float64']:.2e}."]  # fmt: skip
    head = _head(f"python tools/foundation_figures.py --max-positions {s['max_positions']} "
                 "--out tools/figures/foundation-figures.json",
                 _measured([f"ONNX Runtime ({data['rows'][0]['runtime']}) CPU; bf16 on onnx.reference; the JSON "
                            "records no machine or load"]))  # fmt: skip
    return head + "\n" + "\n".join(lines) + "\n"


def _encodings(_: str | None) -> str:
    data = load_figure("encoding-figures")
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in data["rows"]:
        by.setdefault((r["encoding"], r["artifact"]), {})[r["dtype"]] = r
    lines = ["| encoding | artifact | fp32: max abs vs eager / float64 | fp16: max abs vs eager / float64 | guards "
             "refused |", "|---|---|---|---|---|"]  # fmt: skip
    for (encoding, artifact), d in sorted(by.items()):
        cells = [f"{_e(d[t]['max_abs_vs_eager'])} / {_e(d[t]['max_abs_vs_float64'])}" if t in d else "-"
                 for t in ("fp32", "fp16")]  # fmt: skip
        guards = "/".join(sorted({d[t]["guards"] for t in d}))
        lines.append(f"| {encoding} | {artifact} | {cells[0]} | {cells[1]} | {guards} |")
    s = data["summary"]
    passed = sum(r["passed"] for r in data["rows"])
    lines += ["", f"{passed} of {s['artifacts']} pass. The ALiBi `bias` artifact's model.onnx: "
              + ", ".join(f"{v} bytes at {k} positions" for k, v in s["alibi_bias_bytes"].items()) + "."]
    head = _head(f"python tools/encoding_figures.py --max-positions {s['max_positions']} "
                 "--out tools/figures/encoding-figures.json",
                 _measured(["ONNX Runtime CPU, 8 heads of 64, fused graphs; the JSON records no machine or load"]))
    return head + "\n" + "\n".join(lines) + "\n"


def _bench_measured(data: dict[str, Any]) -> str:
    c = data["config"]
    return _measured([f"{c['cpu']}, {c['cpu_count']} CPUs", f"ONNX Runtime {c['onnxruntime']}, torch {c['torch']}",
                      _load_text(data.get("load_average")),
                      f"{c['rounds']} alternating rounds"])  # fmt: skip


def _ratio(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("median_us") is None:
        return "-"
    us = entry["median_us"]
    time = f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"
    iqr = entry.get("ratio_iqr") or [None, None]
    spread = f"; {iqr[0]:.2f}-{iqr[1]:.2f}" if None not in iqr else ""
    return f"{entry['ratio']:.2f}x ({time}{spread})"


BENCH_ROWS = [("copy_1t", "copy, 1 thread"), ("copy_mt", "copy, 2 threads"), ("ort_floor", "ORT floor graph"),
              ("fused", "**fused** (ropeexport)"), ("decomposed", "**decomposed** (ropeexport)"),
              ("peer", "peer: `torch.onnx.export` in ORT"), ("eager", "eager PyTorch"),
              ("torch_compile", "torch.compile")]  # fmt: skip


def _bench_table(scenarios: list[str]) -> Callable[[str | None], str]:
    def render(_: str | None) -> str:
        data = load_figure("bench")
        present = [s for s in scenarios if s in data["scenarios"]]
        lines = ["| entry | " + " | ".join(present) + " |", "|---" * (len(present) + 1) + "|"]
        for key, label in BENCH_ROWS:
            if any(key in data["scenarios"][s] for s in present):
                lines.append(f"| {label} | " + " | ".join(_ratio(data["scenarios"][s].get(key)) for s in present)
                             + " |")  # fmt: skip
        note = ("Each cell: the median over rounds of (entry / the copy roofline of the same round), the absolute "
                "median, and the quartiles of the per-round ratio.")
        return _head(data["command"], _bench_measured(data)) + "\n" + "\n".join(lines) + "\n\n" + note + "\n"

    return render


def _targets(_: str | None) -> str:
    data = load_figure("bench")
    lines = ["| target | this run | met? |", "|---|---|---|"]
    for t in data["targets"]:
        met = "met" if t["met"] else "**not met**"
        lines.append(f"| {t['target']} | {t['value']}: {t['detail']} | {met} |")
    return _head(data["command"], _bench_measured(data)) + "\n" + "\n".join(lines) + "\n"


def _guard_cost(_: str | None) -> str:
    data = load_figure("guard-cost")
    lines = ["| scenario | shipped (guarded) | without guards | cost |", "|---|---|---|---|"]
    for name, s in data["scenarios"].items():
        shipped, bare = s.get("fused", {}).get("median_us"), s.get("fused_no_guard", {}).get("median_us")
        if shipped is None or bare is None:
            continue
        cost = f"{shipped - bare:+.1f} us ({(shipped / bare - 1) * 100:+.1f}%)"
        lines.append(f"| {name.removesuffix('-experiments')} | {shipped:.1f} us | {bare:.1f} us | {cost} |")
    return _head(data["command"], _bench_measured(data)) + "\n" + "\n".join(lines) + "\n"


def _build_cost(_: str | None) -> str:
    data = load_figure("build-cost")
    c = data["config"]
    lines = ["| tables | positions x frequencies | float64 + round once (s) | rope_tables (s) | < 0.5 s |",
             "|---|---|---:|---:|---|"]  # fmt: skip
    for r in data["tables"]:
        lines.append(f"| {r['dtype']} | {r['positions']} x {r['frequencies']} | {r['tables_s']:.3f} | "
                     f"{r['initializers_s']:.3f} | {'met' if r['met'] else 'not met'} |")  # fmt: skip
    lines += ["", "| artifact | dtype | max_positions | export (s) | of which tables (s) | save + check (s) "
              "| total (s) | size (MiB) | files |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in data["builds"]:
        regimes = "-" if r["table_regimes_s"] is None else f"{r['table_regimes_s']:.3f}"
        lines.append(f"| {r['artifact']} | {r['dtype']} | {r['max_positions']} | {r['export_s']:.3f} | {regimes} | "
                     f"{r['save_s']:.3f} | {r['total_s']:.3f} | {r['bytes'] / 2**20:.3f} | "
                     f"{', '.join(r['files'])} |")  # fmt: skip
    measured = _measured([f"{c['cpu_count']} CPUs", _load_text(data.get("load_average")),
                          f"median of {c['repeats']} runs"])  # fmt: skip
    return _head(data["command"], measured) + "\n" + "\n".join(lines) + "\n"


def _sizes(_: str | None) -> str:
    """The table and notes tools/bench_sizes.py renders from its JSON (served speed, runs the kernel killed, the
    targets' ratios), under the machine and what else it carried.
    """  # noqa: D205
    import importlib.util

    data = load_figure("sizes")
    m = data["machine"]
    found = importlib.util.spec_from_file_location("bench_sizes", ROOT / "tools" / "bench_sizes.py")
    assert found is not None and found.loader is not None
    tool = importlib.util.module_from_spec(found)
    found.loader.exec_module(tool)
    load = data.get("load_note") or "shared with other work (the JSON records each run's free memory, not the load)"
    measured = _measured([f"{m['platform']}, {m['cpus']} CPUs, {m['mem_total_gib']} GiB", load])
    return _head("python tools/bench_sizes.py --work /tmp/sizes --model llama-3.2-1b --out tools/figures", measured) \
        + "\n" + tool.markdown(data["results"])


def _quantized(_: str | None) -> str:
    data = load_figure("quantized")
    out = [_head("python tools/quantized_figures.py --out tools/figures",
                 _measured([data["machine"], f"ONNX Runtime {data['versions']['onnxruntime']}",
                            "the JSON records no CPU model or load"]))]  # fmt: skip
    for size, block in data["checkpoints"].items():
        c = block["config"]
        out += [f"**{size}** ({block['parameters'] / 1e6:.1f}M parameters: hidden {c['hidden_size']}, "
                f"{c['num_hidden_layers']} layers, vocabulary {c['vocab_size']})", "",
                "| variant | passed | fidelity / its bound | quantization cost (agreement with unquantized) | model | "
                "build + verify |", "|---|---|---|---|---:|---:|"]  # fmt: skip
        for label, r in block["variants"].items():
            cost = f"{r['cost']:.2f} ({r['cost_agreement']})" if "cost" in r else "-"
            out.append(f"| {label} | {r['passed']} | {r['fidelity']:.1e} / {r['tolerance']:g} | {cost} | "
                       f"{r['bytes'] / 2**20:.1f} MiB | {r['seconds']} s |")  # fmt: skip
        out.append("")
    return "\n".join(out)


def _planted(_: str | None) -> str:
    data = load_figure("planted")
    lines = ["| bug | artifact | caught | as expected | worst error |", "|---|---|---|---|---|"]
    for b in data["bugs"]:
        worst = b.get("worst") or {}
        error = worst.get("max_abs", worst.get("error"))
        where = _e(error, 3) if isinstance(error, float) else (str(error) if error is not None else "runtime raised")
        lines.append(f"| `{b['name']}`: {b['summary']} | {b['artifact']} | {b['verdict']} | "
                     f"{'yes' if b['as_expected'] and b['located'] else 'no'} | {where} |")  # fmt: skip
    caught = sum(b["verdict"] == "caught" and b["as_expected"] for b in data["bugs"])
    good = sum(c["passed"] for c in data["correct"])
    env = data["environment"]
    lines += ["", f"{caught}/{len(data['bugs'])} bugs caught by exactly their expected checks; {good}/"
              f"{len(data['correct'])} correct builds pass."]  # fmt: skip
    measured = _measured([f"ONNX Runtime {env['onnxruntime']} CPU, torch {env['torch']}",
                          "the JSON records no machine or load"])  # fmt: skip
    return _head("python tools/planted_bugs.py --out planted.json", measured) + "\n" + "\n".join(lines) + "\n"


def _decoder_peers(_: str | None) -> str:
    data = load_figure("decoder-peers")
    cells: dict[tuple[str, str], dict[int, str]] = {}
    for r in data["rows"]:
        text = "fails to export" if r.get("rel") is None else f"{r['rel']:.1e}"
        cells.setdefault((r["config"], r["row"]), {})[r["position"]] = text
    positions = sorted({r["position"] for r in data["rows"]})
    lines = ["| config | exporter | " + " | ".join(f"@{p}" for p in positions) + " |",
             "|---|---|" + "---|" * len(positions)]  # fmt: skip
    for (config, row), by in cells.items():
        lines.append(f"| {config} | {row} | " + " | ".join(by.get(p, "-") for p in positions) + " |")
    v = data["versions"]
    measured = _measured([data["platform"], f"ONNX Runtime {v['onnxruntime']}, transformers {v['transformers']}, "
                          f"torch {v['torch']}", "the JSON records no load"])  # fmt: skip
    note = (f"Each cell: max |logit error| / max |float64 logit| over {data['tokens']} tokens ending at that "
            f"position, against {data['reference']}.")
    return _head(data["command"], measured) + "\n" + "\n".join(lines) + "\n\n" + note + "\n"


def _cli_startup(_: str | None) -> str:
    data = load_figure("cli-startup")
    trees = list(data["trees"].items())
    name, last = trees[-1]
    lines = ["| command | best (s) | median (s) |", "|---|---:|---:|"]
    for command, t in last.items():
        lines.append(f"| `ropeexport {command}` | {t['best']:.3f} | {t['median']:.3f} |")
    measured = _measured([f"Python {data['python']}, best and median of {data['runs']} runs",
                          "the JSON records no machine or load"])  # fmt: skip
    return _head("python tools/cli_startup.py --tree . --out tools/figures/cli-startup.json", measured) + "\n" \
        + "\n".join(lines) + "\n"


def _zoo_ray(_: str | None) -> str:
    """``audit --zoo`` serial against ``--ray local`` (tools/bench_zoo.py), and Ray's overhead per task."""
    data = load_figure("zoo-ray")
    lines = ["| round | serial (s) | `--ray local` (s) | zoo.json the same bytes |", "|---:|---:|---:|:--|"]
    for i, r in enumerate(data["rounds"]):
        lines.append(f"| {i + 1} | {r['serial']['wall_seconds']:.1f} | {r['local']['wall_seconds']:.1f} | "
                     f"{'yes' if r['same_zoo_json'] else 'no'} |")  # fmt: skip
    o, m = data["overhead"], data["machine"]
    lines += ["", f"{data['models']} models. Ray's own cost: a local instance started in {o['start_seconds']:.1f} s; "
              f"a task that does nothing took {o['per_task_seconds_ray'] * 1e3:.1f} ms on it, warm ({o['tasks']} "
              f"tasks), against {o['per_task_seconds_serial'] * 1e6:.1f} us in one process."]  # fmt: skip
    measured = _measured([f"{m['cpus']} CPUs", f"before: {m['load_before']}", f"after: {m['load_after']}"])
    return _head("python tools/bench_zoo.py --work /tmp/bench-zoo --out tools/figures", measured) + "\n" \
        + "\n".join(lines) + "\n"


def _ray_truth(name: str | None) -> str:
    """A decoder's ``verify`` in one process against ``--ray local`` (tools/bench_ray_truth.py): wall, peak RSS of the
    process tree, load, and whether the two report.json are the same.
    """  # noqa: D205
    data = load_figure(name or "ray-8b-truth")
    lines = ["| run | wall (s) | peak RSS, process tree (GiB) | exit | load average before / after (1, 5, 15 min) |",
             "|---|---:|---:|---:|:--|"]  # fmt: skip
    for r in data["runs"].values():
        loads = [r[k].split("load average:")[-1].strip() for k in ("load_before", "load_after")]
        lines.append(f"| `{r['command'].split(' -m ', 1)[-1]}` | {r['wall_s']:.1f} | {r['peak_rss_gib']:.2f} | "
                     f"{r['exit']} | {loads[0]} / {loads[1]} |")  # fmt: skip
    same = data["same_report"]
    if same:
        said = ("the same bytes" if same["bytes"] else "not the same bytes: the same JSON but the `seconds` fields"
                if same["json_but_seconds"] else "different beyond `seconds`: " + ", ".join(same["differences"]))
        lines += ["", f"The two report.json files: {said} ({len(same['seconds_paths'])} `seconds` fields differ)."]
    measured = _measured([f"{data['machine']['cpus']} CPUs, {data['machine']['mem_total_gib']} GiB",
                          data.get("load_note", "")])  # fmt: skip
    return _head(data["reproduce"], measured) + "\n" + "\n".join(lines) + "\n"


def _suite(_: str | None) -> str:
    """The last fresh-clone CI run's pytest summary line (tools/figures/ci-fresh-venv.log)."""
    log = FIGURES / "ci-fresh-venv.log"
    if not log.is_file():
        raise ValueError(f"figure suite: {log} does not exist")
    summary = [line for line in log.read_text().splitlines() if re.search(r"\d+ passed.* in [\d.]+s", line)]
    if not summary:
        raise ValueError("figure suite: no pytest summary line in ci-fresh-venv.log")
    head = log.read_text().splitlines()[0]
    said = "the project's 2-core CI machine; the log records no load"
    if head.startswith("#"):  # the run's own first line: what was run, when, on which machine and load
        said = head.lstrip("# ").strip()
    return (f"Last recorded fresh-clone `.ci/run` (`tools/figures/ci-fresh-venv.log`): `{summary[-1].strip()}`.\n\n"
            f"*Measured on: {said}.*\n")


def _figure_md(name: str | None) -> str:
    """The Markdown a tool wrote beside its JSON (tables the tool renders from that JSON), headings demoted, under the
    machine and load the JSON records.
    """  # noqa: D205
    path = FIGURES / f"{name}.md"
    if not path.is_file():
        raise ValueError(f"figure-md {name}: {path} does not exist")
    parts: list[str] = []
    data = json.loads((FIGURES / f"{name}.json").read_text()) if (FIGURES / f"{name}.json").is_file() else {}
    machine = data.get("machine")
    if isinstance(machine, dict):
        parts.append(", ".join(str(v) for v in machine.values()))
    elif machine:
        parts.append(str(machine))
    if data.get("cpu"):
        parts.append(f"{data['cpu']}, {data.get('cpu_count', '?')} CPUs")
    if data.get("platform"):
        parts.append(str(data["platform"]))
    for key in ("load_average", "load_average_after"):
        if key in data:
            parts.append(("after the run: " if key.endswith("after") else "") + _load_text(data[key]))
    if not data:
        parts.append("no JSON beside it; the Markdown says what it records")
    elif not any(k in data for k in ("load_average", "load_average_after")):
        parts.append("the JSON records no load")
    text = re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + 2) + " ", path.read_text(), flags=re.M)
    return _measured(parts) + "\n\n" + text.rstrip() + "\n"


def _build_times(_: str | None) -> str:
    data = load_figure("build-times")
    m = data["machine"]
    lines = ["| command | artifacts | wall | CPU (user + system) | load average (1 min) before -> after | exit |",
             "|---|---:|---:|---:|---|---:|"]  # fmt: skip
    for r in data["runs"]:
        load = r["load_average"]
        lines.append(f"| `{r['command']}` | {r['artifacts']} | {r['wall_s']} s | {r['cpu_s']} s | "
                     f"{load['before'][0]} -> {load['after'][0]} | {r['exit']} |")  # fmt: skip
    measured = _measured([f"{m['cpu']}, {m['cpus']} CPUs, {m['platform']}",
                          "the load average of each run is in the table (a machine shared with other work)"])
    return _head(data["command"], measured) + "\n" + "\n".join(lines) + "\n"


FAST_TIER_COMMAND = ("(nproc; grep -m1 'model name' /proc/cpuinfo; uptime; /usr/bin/time -f '%e s wall' "
                     ".venv/bin/python -m pytest -q -p no:cacheprovider -m fast; uptime) > tools/figures/fast-tier.log "
                     "2>&1")


def _fast_tier(_: str | None) -> str:
    """The last recorded ``pytest -m fast`` (tools/figures/fast-tier.log, as ``FAST_TIER_COMMAND`` writes it): its
    summary line, its wall time, the CPUs and the load average before and after.
    """  # noqa: D205
    log = FIGURES / "fast-tier.log"
    if not log.is_file():
        raise ValueError(f"figure fast-tier: {log} does not exist")
    lines = log.read_text().splitlines()
    summary = [line.strip() for line in lines if re.search(r"\d+ passed.* in [\d.]+s", line)]
    wall = [line.strip() for line in lines if re.fullmatch(r"[\d.]+ s wall", line.strip())]
    loads = [re.sub(r".*load average: ", "", line).strip() for line in lines if "load average:" in line]
    if not (summary and wall and len(loads) == 2 and lines[0].strip().isdigit()):
        raise ValueError("figure fast-tier: fast-tier.log lacks the CPU count, a summary line, the wall time or the "
                         "two uptime lines FAST_TIER_COMMAND writes")  # fmt: skip
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "CPU not recorded")
    measured = _measured([f"{lines[0].strip()} CPUs ({cpu})", f"load average (1, 5, 15 min) {loads[0]} before, "
                          f"{loads[1]} after"])  # fmt: skip
    return _head(FAST_TIER_COMMAND, measured) + f"\n`{summary[-1]}`, {wall[-1]} (interpreter start-up included).\n"


TIERS = ("fast", "not slow", "slow")
TIER_COUNTS_COMMAND = ("(git describe --always --dirty; for m in 'fast' 'not slow' 'slow'; do echo \"== $m\"; "
                       ".venv/bin/python -m pytest -q -p no:cacheprovider --collect-only -m \"$m\" | tail -1; done) > "
                       "tools/figures/tier-counts.log 2>&1")  # fmt: skip


def _tier_counts(_: str | None) -> str:
    """How many tests each tier holds, as pytest collected them (tools/figures/tier-counts.log, written by
    ``TIER_COUNTS_COMMAND``): counted by a tool, never typed (issue 43, item 2: a typed count went stale).
    """  # noqa: D205
    log = FIGURES / "tier-counts.log"
    if not log.is_file():
        raise ValueError(f"figure tier-counts: {log} does not exist")
    lines = log.read_text().splitlines()
    counts = {}
    for head, line in zip(lines[1:], lines[2:], strict=False):
        found = re.match(r"(\d+)/(\d+) tests collected", line.strip())
        if head.startswith("== ") and found:
            counts[head[3:]] = (int(found.group(1)), int(found.group(2)))
    if not lines or set(counts) != set(TIERS):
        raise ValueError("figure tier-counts: tier-counts.log lacks the commit or a tier's collection line "
                         "TIER_COUNTS_COMMAND writes")  # fmt: skip
    rows = ["| tier | tests | of all |", "|---|---|---|"]
    rows += [f"| `-m \"{t}\"` | {counts[t][0]:,} | {counts[t][1]:,} |" for t in TIERS]
    counted = _measured([f"pytest's collection at {lines[0].strip()} (-dirty: that commit's working tree); no test "
                         "runs, so the machine and its load do not change the counts"])  # fmt: skip
    head = _head(TIER_COUNTS_COMMAND, counted)
    return head + "\n" + "\n".join(rows) + "\n"


def _pins() -> dict[str, str]:
    """constraints.txt's direct dependencies (the part above "Brought in by those"): {name: pinned version}."""
    direct = (ROOT / "constraints.txt").read_text().split("# Brought in by those:")[0]
    found = (re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip()) for line in direct.splitlines())
    return {m.group(1): m.group(2) for m in found if m}


def pins(_: str | None) -> str:
    """The pins every install of README's commands gets: constraints.txt's direct dependencies, read from it."""
    rows = ["| package | pinned (constraints.txt) |", "|---|---|"]
    rows += [f"| {name} | {pinned} |" for name, pinned in _pins().items()]
    return "\n".join(rows) + "\n"


def _newest_versions(_: str | None) -> str:
    """The newest-versions check (tools/newest_versions.py): what it installed beside the pins, and what passed."""
    data = load_figure("newest-versions")
    pinned = {k.lower(): v for k, v in _pins().items()}
    rows = ["| package | pinned | tested newer |", "|---|---|---|"]
    for name, got in data.get("got", {}).items():
        rows.append(f"| {name} | {pinned.get(name, '-')} | {got if got != pinned.get(name) else '(the pin)'} |")
    build, fast = data.get("default_build", {}), data.get("fast_tier", {})
    counts = ", ".join(f"{n} {w}" for w, n in fast.get("counts", {}).items()) or "not run"
    taken = data.get("torch_taken", {})
    refused = [f"{c['version']} ({c['why']})" for c in data.get("torch_candidates", []) if not c["cpu"]]
    said = [f"`ropeexport build` (the embedded default): exit {build.get('exit')}, {build.get('passed')} of "
            f"{build.get('artifacts')} artifacts verified, {build.get('wall_s')} s wall",
            f"`pytest -m fast`: exit {fast.get('exit')}, {counts}, {fast.get('wall_s')} s wall"
            + "".join(f"; {line.removeprefix('FAILED ')} failed" for line in fast.get("failures", [])),
            f"torch: the newest CPU build reachable, {taken.get('version')} from {taken.get('source')}"
            + (f"; not taken: {', '.join(refused)}" if refused else "") + f"; the CPU index: {data['torch_index']}",
            f"CUDA packages installed: {', '.join(data.get('cuda_packages', [])) or 'none'}"]  # fmt: skip
    loads = [f"{step} load {d['load_average_1min']['before']} -> {d['load_average_1min']['after']}"
             for step, d in (("build", build), ("fast tier", fast)) if d]  # fmt: skip
    m = data["machine"]
    measured = _measured([f"{data['date_utc']} UTC at {data['commit']}", f"{m['cpus']} CPUs, {m['platform']}",
                          f"python {data['python']}", "; ".join(loads)])  # fmt: skip
    verdict = "passed" if data.get("passed") else "FAILED"
    said = [x.replace("*", "\\*").replace("<", "&lt;").replace(">", "&gt;") for x in said]  # tool words, not markup
    return (_head(data["command"], measured) + f"\nThe check {verdict}:\n\n" + "\n".join(f"- {x}" for x in said)
            + "\n\n" + "\n".join(rows) + "\n")  # fmt: skip


# A tutorial's output excerpts: NAME -> (the figure tools/tutorial_outputs.py wrote, the start of the block's text,
# the lines kept, each a regex searched in turn from the last line kept). "  ..." stands where lines were left out.
AUDIT = "ropeexport audit og-llama/model.onnx --hf-config my-llama/config.json --optimized --out"  # one command:
# the exported graph's audit, then the optimized graph's (the page's sections 3 and "The graph ONNX Runtime runs")
OUTPUTS: dict[str, tuple[str, str, list[str]]] = {
    "audit-sites": ("tutorial-audit-and-graft", AUDIT, [r"^og-llama/model\.onnx: ", r"^  site 0: ",
                                                        r"^    - float32 frequencies: "]),
    "audit-effects": ("tutorial-audit-and-graft", AUDIT, [r"findings by their effect", r"^    - float32",
                                                          r"^      harmless: ", r"^      next: "]),
    "audit-optimized": ("tutorial-audit-and-graft", AUDIT, [r"^  optimized graph: ", r"^    optimized site 0: ",
                                                            r"as in the exported graph"]),
    "graft": ("tutorial-audit-and-graft", "ropeexport graft ", [r"^og-llama-grafted/model\.onnx: ",
                                                               r"onnxruntime-genai folder", r"cos_cache / sin_cache",
                                                               r"audit after", r"whole decoder against float64",
                                                               r"last position"]),
}  # fmt: skip


def excerpt(name: str, records: list[dict[str, Any]]) -> str:
    """The excerpt ``name`` of ``OUTPUTS`` from a run's block records (tools/tutorial_outputs.py's ``blocks``)."""
    _, start, wanted = OUTPUTS[name]
    block = next((r for r in records if r["text"].startswith(start)), None)
    if block is None:
        raise ValueError(f"output {name}: no block of the run starts with {start!r}")
    lines, kept, at = block["output"].splitlines(), [], 0
    for pattern in wanted:
        found = next((i for i in range(at, len(lines)) if re.search(pattern, lines[i])), None)
        if found is None:
            raise ValueError(f"output {name}: no line after line {at} of {start!r}'s output matches {pattern!r}")
        if kept and found > at:
            kept.append("  ...")
        kept.append(lines[found].rstrip())
        at = found + 1
    return "```text\n" + "\n".join(kept) + "\n```\n"


def output(name: str | None) -> str:
    """A tutorial's output excerpt as the recorded run printed it (``OUTPUTS``, tools/tutorial_outputs.py)."""
    if name not in OUTPUTS:
        raise ValueError(f"output {name!r}: not one of {', '.join(OUTPUTS)}")
    return excerpt(name, load_figure(OUTPUTS[name][0])["blocks"])


FIGURE_RENDERERS: dict[str, Callable[[str | None], str]] = {
    "tier-counts": _tier_counts,
    "foundation": _foundation,
    "encodings": _encodings,
    "bench-rope": _bench_table(["rope-prefill-fp32", "rope-prefill-fp16", "rope-decode-fp32", "rope-decode-fp16"]),
    "bench-bias": _bench_table(["alibi-bias-fp32", "alibi-bias-fp16", "alibi-scores-fp32", "sinusoidal-apply-fp32",
                                "sinusoidal-apply-fp16"]),
    "bench-targets": _targets,
    "guard-cost": _guard_cost,
    "build-cost": _build_cost,
    "build-times": _build_times,
    "sizes": _sizes,
    "quantized": _quantized,
    "planted": _planted,
    "decoder-peers": _decoder_peers,
    "cli-startup": _cli_startup,
    "suite": _suite,
    "fast-tier": _fast_tier,
    "zoo-ray": _zoo_ray,
    "ray-8b-truth": _ray_truth,
    "newest-versions": _newest_versions,
}


def _figure(name: str | None) -> str:
    if name not in FIGURE_RENDERERS:
        raise ValueError(f"figure {name!r}: not one of {', '.join(FIGURE_RENDERERS)}")
    return FIGURE_RENDERERS[name](name)


DIRECTIVES: dict[str, Callable[[str | None], str]] = {
    "cli": cli,
    "figure": _figure,
    "figure-md": _figure_md,
    "presets": presets,
    "pins": pins,
    "output": output,
}


def _made(what: str, arg: str | None, where: str) -> str:
    if what not in DIRECTIVES:
        raise ValueError(f"{where}: unknown directive {what!r}; one of {', '.join(DIRECTIVES)}")
    return DIRECTIVES[what](arg)


def render(markdown: str, where: str = "") -> str:
    """``markdown`` with every ``<!-- render: WHAT [ARG] -->`` section (the marker, and its committed text up to its
    end line) replaced by what it names, rendered now (module doc): what the site shows.
    """  # noqa: D205
    return SECTION.sub(lambda m: _made(m.group(2), m.group(3), where), markdown)


def regenerate(markdown: str, where: str = "") -> str:
    """``markdown`` with every section's text between its marker and its end line rendered now: what is committed."""
    return SECTION.sub(lambda m: f"{m.group(1)}\n\n{_made(m.group(2), m.group(3), where).rstrip()}\n\n{END}",
                       markdown)  # fmt: skip


def pages() -> list[Path]:
    """Every page that holds a generated section: README and docs/**/*.md."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in found if DIRECTIVE.search(p.read_text())]


def stale() -> dict[Path, str]:
    """{page: its text with every section rendered now} for each page whose committed sections differ."""
    out = {}
    for page in pages():
        text = page.read_text()
        fresh = regenerate(text, str(page.relative_to(ROOT)))
        if fresh != text:
            out[page] = fresh
    return out


def main(argv: list[str]) -> int:
    """``python tools/docs_site.py [--check]``: rewrite the stale sections (module doc); 1 with --check when any."""
    if any(a not in ("--check",) for a in argv):
        print(f"usage: {COMMAND} [--check]", file=sys.stderr)
        return 2
    changed = stale()
    for page, text in changed.items():
        print(f"{'stale' if argv else 'rewrote'}: {page.relative_to(ROOT)}")
        if not argv:
            page.write_text(text)
    return 1 if argv and changed else 0


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the page's sections rendered."""
    return render(markdown, page.file.src_path)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # run as a script from the checkout: ropeexport imported from it
    sys.exit(main(sys.argv[1:]))
