"""``ropeexport audit MODEL.onnx --hf-config config.json``: is this model's RoPE right at every position and layer.

Finds every rotary site of a model built by any tool (onnxruntime-genai's builder, Optimum, torch.onnx.export,
ropeexport): GroupQueryAttention with do_rotary, RotaryEmbedding (com.microsoft or opset 23), tables gathered by
position, cos/sin computed in the graph; in the main graph, inside every If branch and Loop / Scan body, and inside
every model-local function (read inlined where it is called, nested ones too).
Evaluates each site's cos/sin with ONNX Runtime at the schedule's call lengths (max_positions, and original /
original + 1 for LongRoPE and dynamic NTK) and compares every position with the schedule of the layers that read it
(its readers' names say which) in float64; names what differs (scaling ignored, switch not taken, float32 angles,
attention factor, the sliding layers given the global layers' table, a layer without RoPE rotated, channels paired
otherwise, YaRN applied twice, ..) and, where the config says windows per layer type, each layer's attention window
as the graph says it (a mask's window constant, GroupQueryAttention's local_window_size, else the mask ONNX's own
Attention takes, evaluated on one call of window + 1 tokens), and measures what each finding does to the logits
(its sites repaired alone, 8 tokens ending where it is worst), with a severity from it (harmless: within the bound
ropeexport verifies the logits' dtype to, float32 1e-4 of the logit scale; minor: up to 1e-2; wrong: above) and the
next step (graft, graft --trust config, re-export, or nothing). Where no transformers config is at hand, --spec FILE
gives the position spec: one spec's fields (.json or .toml), or per layer
{"layers": ["local", "global", null, ...], "encodings": {"local": {...}, "global": {...}}}. For a config that describes
ALiBi (BLOOM, MPT, ..), finds the bias added to the attention scores instead and checks every head's slope and every
key position's bias against the paper's slopes for the config's head count.

A site that cannot be checked is a finding, never skipped: values that change with a Loop's iteration, a call length
the model refuses (checked at the longest it takes), a GroupQueryAttention ONNX Runtime will not run with its caches.

What runs is not what was exported: an ONNX Runtime session rewrites the graph before it runs it. --optimized
[LEVEL] (basic, extended or all; all by default, ONNX Runtime's own default) saves the graph its CPU provider builds
at that level and audits it too, like any model, saying per layer what the optimizer did to each rotation: nothing,
a new form of the same rotation (a RotaryEmbedding fused into GroupQueryAttention's do_rotary, a pattern fused into
RotaryEmbedding, tables folded into constants, identical sites merged), or another rotation (channels paired
otherwise, another width, other table values, a layer left unrotated). A GPU provider's fusions are not seen here:
a graph such a session saved (optimized_model_filepath) is audited with --optimized-model FILE. The verdict is exact
only when both graphs are, and the gate fails when either's does; a finding only the optimized graph has is the
optimizer's, and says what to do about it.

A CI gate: --fail-on LEVEL (harmless, minor or wrong; default minor) exits 1 on a finding of that level or above,
and on one whose effect is unmeasured (--no-effects, or a model the effect's call cannot run); a model whose findings
all lie below it exits 0 and says so. audit.json carries each finding's level (severity.level) and the gate (gate:
fail_on, passed, failing, passing).

Exit codes: 0 every site exact to its dtype, or every finding below --fail-on, 1 a finding at --fail-on or above, or
unmeasured, 2 bad input (not an ONNX file, no rotary site, a config that does not describe the model, external data
outside the model's folder or not fitting its file, a model ONNX Runtime refuses to load, a place the audit does not
read: a model-local function it cannot inline, an operator's built-in rotary other than GroupQueryAttention's; a
max_positions too few for the rows compared to tell the config's schedule from one with theta or factor 1% off, in the
dtype the tables are stored in: the line says the fewest; with --optimized, an optimized graph ONNX Runtime will not
build or the audit cannot read, named as that graph).

A zoo: --zoo ZOO.toml --out DIR audits every model a manifest lists ([[model]] tables: name, onnx, hf_config or
spec, optional checkpoint; paths relative to ZOO.toml), each into DIR/NAME as one audit --out writes it, and writes
DIR/zoo.json and DIR/zoo.html: one row per model (verdict, exit code, worst finding and its effect), worst first.
A model that cannot be audited is its own row (exit 2); the exit code is the worst row's. --confine refuses a path
outside ZOO.toml's folder tree. A rerun skips the models whose folder holds the audit of the same files. --ray
ADDRESS runs each model as a Ray task (local: a Ray instance started for the run; auto: the cluster running here;
HOST:PORT or ray://HOST:PORT), the folders and tables written here, the same bytes as without it (the cluster
extra: pip install -e ".[cluster]").

MODEL may be a folder published for transformers.js (an onnx-community folder, or ropeexport package's): config.json
beside onnx/model.onnx, model_fp16.onnx, model_q4.onnx (MatMulNBits, GatherBlockQuantized), model_q4f16.onnx,
model_quantized.onnx, ... Each of those models is audited as one file is (one row each, then its sites), against
the folder's config.json unless --hf-config or --spec is given; --variant FILE (or its dtype: fp32, fp16, q4, ...)
audits one; --out writes each variant's report into DIR/<its name>. The exit is the worst of theirs.

Examples:
  ropeexport audit phi3-og/model.onnx --hf-config phi3/config.json
  ropeexport audit onnx-community/Qwen3-0.6B-ONNX
  ropeexport audit onnx-community/Qwen3-0.6B-ONNX --variant q4f16
  ropeexport audit llama/model.onnx --hf-config llama/config.json --out audit-llama --json
  ropeexport audit bloom/model.onnx --hf-config bloom/config.json
  ropeexport audit gemma3/model.onnx --spec gemma3-layers.json
  ropeexport audit big/model.onnx --hf-config big/config.json --no-effects
  ropeexport audit llama/model.onnx --hf-config llama/config.json --fail-on wrong
  ropeexport audit gptj/model.onnx --hf-config gptj/config.json --optimized
  ropeexport audit gptj/model.onnx --hf-config gptj/config.json --optimized-model gptj-cuda-optimized.onnx
  ropeexport audit --zoo hub/zoo.toml --out hub-audit --confine
  ropeexport audit --zoo hub/zoo.toml --out hub-audit --ray local

"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ropeexport.api import audit
from ropeexport.cli import subcommand
from ropeexport.report.words import error


def add_parser(sub: Any) -> None:
    """Register ``audit``."""
    p = subcommand(sub, "audit", __doc__, run)
    p.add_argument("model", metavar="MODEL", nargs="?", help="the ONNX file (its external data beside it), or a folder "
                   "published for transformers.js (config.json, onnx/model*.onnx)")  # fmt: skip
    p.add_argument("--variant", metavar="FILE", help="in a transformers.js folder, the one model to audit: its file "
                   "name in onnx/ (model_q4.onnx) or dtype (fp32, fp16, q4, q4f16, quantized, ...)")  # fmt: skip
    source = p.add_mutually_exclusive_group()
    source.add_argument("--hf-config", metavar="CONFIG", help="the transformers config.json it came from")
    source.add_argument("--spec", metavar="FILE", help="its position spec where no config is at hand (.json or .toml): "
                        "one spec's fields, or {\"layers\": [name or null per layer], \"encodings\": {name: "
                        "fields}}")  # fmt: skip
    p.add_argument("--out", metavar="DIR", help="write audit.json, audit.md and audit.html into DIR")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-effects", dest="effects", action="store_false", help="do not measure each finding's effect "
                   "on the logits (two model runs per finding; the findings are the same; each is then unmeasured, "
                   "and fails the gate)")  # fmt: skip
    p.add_argument("--fail-on", choices=["harmless", "minor", "wrong"], default="minor",
                   help="exit 1 on a finding of this level or above, or of unmeasured effect (default minor: any "
                   "finding beyond the tolerance; harmless ones exit 0 and say so)")  # fmt: skip
    p.add_argument("--zoo", metavar="ZOO.toml", help="audit every model this manifest lists, each into --out/NAME, "
                   "and write --out/zoo.json and zoo.html (no MODEL, --hf-config or --spec then)")  # fmt: skip
    p.add_argument("--confine", action="store_true", help="with --zoo: refuse a path outside ZOO.toml's folder tree")
    p.add_argument("--ray", metavar="ADDRESS", help="with --zoo: each model a Ray task on the cluster at ADDRESS "
                   "(local, auto, HOST:PORT or ray://HOST:PORT); needs the cluster extra")  # fmt: skip
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--optimized", nargs="?", const="all", choices=["basic", "extended", "all"], metavar="LEVEL",
                      help="audit the graph ONNX Runtime runs too: its CPU provider's optimized graph at LEVEL (basic, "
                      "extended or all; default all, ONNX Runtime's own default), and say per layer what the "
                      "optimizer did to each rotation")  # fmt: skip
    runs.add_argument("--optimized-model", metavar="FILE", help="audit this optimized graph too, saved elsewhere by "
                      "an ONNX Runtime session (optimized_model_filepath; a GPU provider's fusions are seen only "
                      "there)")  # fmt: skip


def _usage(args: argparse.Namespace) -> None:
    """SpecError for flags that do not go together: MODEL with a config, or --zoo with --out and neither."""
    from ropeexport.errors import SpecError

    if args.zoo is None:
        for flag, value in (("--confine", args.confine), ("--ray", args.ray)):
            if value:
                raise SpecError(flag, "goes with --zoo only")
        if args.model is None:
            raise SpecError("model", "give the ONNX file to audit (or --zoo ZOO.toml)")
        if args.variant is not None and not Path(args.model).is_dir():
            raise SpecError("variant", f"names a model inside a transformers.js folder; {args.model!r} is not a folder")
        if args.hf_config is None and args.spec is None and not Path(args.model).is_dir():
            raise SpecError("hf_config", "give --hf-config (the transformers config the model came from) or --spec; "
                            "only a transformers.js folder's own config.json is read without one")  # fmt: skip
        return
    given = [flag for flag, value in (("MODEL", args.model), ("--hf-config", args.hf_config), ("--spec", args.spec),
             ("--variant", args.variant), ("--optimized", args.optimized),
             ("--optimized-model", args.optimized_model)) if value]  # fmt: skip
    if given:
        raise SpecError("zoo", f"takes each model's files from ZOO.toml; {given[0]} does not go with it")
    if args.out is None:
        raise SpecError("out_dir", "--zoo needs --out DIR: each model's audit folder and zoo.json go there")


def run_zoo(args: argparse.Namespace) -> int:
    """``audit --zoo``: each row printed as it lands, then the table's path; the worst row's exit code."""
    from ropeexport.api import audit_zoo

    def landed(row: dict[str, Any]) -> None:
        if row["error"] is not None:
            said = row["error"]
        else:
            worst = row["worst"]
            said = "no finding" if worst is None else f"worst {worst['level']}: {worst['text']}"
        print(f"  {row['name']}: {row['verdict']} (exit {row['exit']}), {said}", flush=True)

    result = audit_zoo(args.zoo, args.out, args.confine, args.effects, args.fail_on, args.ray,
                       on_row=None if args.json else landed)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        counts = {code: sum(int(r["exit"]) == code for r in result.rows) for code in (0, 1, 2)}
        skipped = f"; {len(result.skipped)} found done by an earlier run" if result.skipped else ""
        print(f"{len(result.rows)} model(s): {counts[0]} passed, {counts[1]} failed the gate, {counts[2]} not "
              f"audited{skipped}; worst first in {result.out / 'zoo.html'}")  # fmt: skip
    return result.exit_code


def run(args: argparse.Namespace) -> int:
    """Audit, print, write; 1 when the gate fails (``--fail-on``)."""
    _usage(args)
    if args.zoo is not None:
        return run_zoo(args)
    if Path(args.model).is_dir():
        return _folder(args)
    result = audit(args.model, args.hf_config, out=args.out, spec_file=args.spec, effects=args.effects,
                   fail_on=args.fail_on, optimized=args.optimized, optimized_model=args.optimized_model)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_audit(result)
    return 0 if result.gate["passed"] else 1


def _folder(args: argparse.Namespace) -> int:
    """A transformers.js folder: every variant (or --variant's) audited, one row each, then each one's lines."""
    from ropeexport.api import audit_folder
    from ropeexport.errors import SpecError

    if args.optimized_model is not None:
        raise SpecError("optimized_model", "is one saved graph, of one model; a folder's variants take --optimized")
    result = audit_folder(args.model, args.hf_config, out=args.out, variant=args.variant, spec_file=args.spec,
                          effects=args.effects, fail_on=args.fail_on, optimized=args.optimized)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0 if result.passed else 1
    print(f"{result.folder}: {len(result.results)} model(s), against {result.config or args.spec}")
    for name, one in result.results.items():
        gate = "passed" if one.gate["passed"] else "FAILED"
        print(f"  {name}: {len(one.sites)} site(s), {one.verdict}, gate {gate}")
    for one in result.results.values():
        print_audit(one)
    return 0 if result.passed else 1


def print_audit(result: Any) -> None:
    """One audit's lines: its sites, its findings by effect, the optimized graph's, the gate."""
    from ropeexport.audits.checks import dtype_of
    from ropeexport.audits.pages import inside

    what = "ALiBi" if result.spec.get("encoding") == "alibi" else "rotary"
    print(f"{result.model}: {len(result.sites)} {what} site(s), {result.verdict}")
    for i, site in enumerate(result.sites):
        worst = max(site["probes"], key=lambda p: p["max_abs"], default=None)
        where = "" if worst is None else f", worst {error(worst['max_abs'])} at position {worst['position']} " \
            f"(L = {worst['length']})"  # fmt: skip
        print(f"  site {i}: {site['kind']}{inside(site)}, {len(site['users'])} reader(s), {dtype_of(site)}: "
              f"{'exact' if site['exact'] else 'findings'}{where}")  # fmt: skip
        for finding in site["findings"]:
            print(f"    - {finding['text']}")
    if result.findings:
        print("  findings by their effect on the logits (max |change| / max |logit|, their sites repaired):")
    for found in result.findings:
        print(f"    - {found['text']}")
        print(f"      {found['severity']['level']}: {found['severity']['text']}")
        print(f"      next: {found['next']['text']}")
    if result.optimized is not None:
        from ropeexport.audits.optimized import lines

        print("\n".join(lines(result.optimized)))
    gate = result.gate
    findings = result.findings or (result.optimized or {}).get("findings")
    if findings and gate["passed"]:
        print(f"  gate (--fail-on {gate['fail_on']}): passed, every finding below {gate['fail_on']} "
              f"({', '.join(f['level'] for f in gate['passing'])}): exit 0")  # fmt: skip
    elif findings:
        failing = ", ".join(f"{f['name']} ({f['level']}{', optimized graph' if f.get('graph') else ''})"
                            for f in gate["failing"])
        print(f"  gate (--fail-on {gate['fail_on']}): failed on {failing}")
