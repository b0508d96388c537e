"""``ropeexport build --artifact decoder`` and ``--artifact block --checkpoint DIR``: the model-level builds.

``--artifact decoder``: a whole decoder from a config (and checkpoint), verified by generation. ``--artifact block
--checkpoint DIR --layer N``: one layer's attention, its weights read from the checkpoint.

  ropeexport build --hf-config config.json --artifact decoder --num-layers 2 --hidden-size 256
  ropeexport build --checkpoint ./tiny-llama --artifact decoder --graph decomposed
  ropeexport build --preset llama-3.1-8b --artifact decoder --num-layers 2 --hidden-size 256 --vocab-size 512
  ropeexport build --checkpoint ./tiny-llama --artifact block --layer 3 --graph gqa
  ropeexport build --checkpoint ./tiny-llama --artifact decoder --weight-format int4 --block-size 128

Writes ``<out>/<name>/`` (``decoder.build`` module doc); exit 0 when every call of every scenario passed, 1 when one
failed, 2 on bad input (nothing written).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ropeexport.cli.options import ascii_int, resolved_lines, runtimes_of, skipped_exit
from ropeexport.components.linear import BLOCK_SIZES, DEFAULT_BLOCK_SIZE
from ropeexport.decoder.request import DecoderRequest
from ropeexport.decoder.scenarios import scenarios
from ropeexport.errors import SpecError
from ropeexport.report.words import error
from ropeexport.runtimes.capabilities import form_for

# Flags the decoder path reads; any other spec-field flag is refused rather than ignored.
READ = {"artifact", "dtype", "graph", "max_positions", "name"}
WEIGHT_FLAGS = ("weight_format", "block_size", "accuracy_level", "symmetric")  # how a decoder's projections are stored


def add_flags(p: argparse.ArgumentParser) -> None:
    """The decoder's own flags on ``build``."""
    group = p.add_argument_group("decoder (with --artifact decoder)")
    group.add_argument("--checkpoint", metavar="DIR", help="a local checkpoint folder: config.json + *.safetensors")
    group.add_argument("--num-layers", dest="num_layers", metavar="N", help="keep N layers (seeded weights only)")
    group.add_argument("--hidden-size", dest="hidden_size", metavar="N", help="width N, head_dim kept (seeded only)")
    group.add_argument("--vocab-size", dest="vocab_size", metavar="N", help="vocabulary N (seeded weights only)")
    group.add_argument("--no-eager", dest="eager", action="store_false", help="skip the transformers reference")
    group.add_argument("--layer", metavar="N", help="with --artifact block --checkpoint: the layer whose weights")
    group.add_argument("--weight-format", dest="weight_format", metavar="FORMAT",
                       help="int4: the projections as MatMulNBits blocks (ONNX Runtime's quantizer); default: "
                       "in --dtype")  # fmt: skip
    group.add_argument("--block-size", dest="block_size", metavar="N",
                       help=f"int4 block size: one of {', '.join(map(str, BLOCK_SIZES))} (default "
                       f"{DEFAULT_BLOCK_SIZE})")  # fmt: skip
    group.add_argument("--accuracy-level", dest="accuracy_level", metavar="N",
                       help="int4 MatMulNBits accuracy_level 0-4 (default 0: fp32 arithmetic; 4: int8 activations, "
                       "onnxruntime-genai's CPU default, judged by a wider bound)")  # fmt: skip
    group.add_argument("--symmetric", dest="symmetric", action=argparse.BooleanOptionalAction, default=None,
                       help="int4 zero point 8 (default) or, with --no-symmetric, one per block")  # fmt: skip
    group.add_argument("--latent-cache", dest="latent_cache", action="store_true",
                       help="latent attention (deepseek_v3) caches its latent and rotated rope key, kv_b_proj "
                       "absorbed (decomposed form), not the expanded keys and values")  # fmt: skip


def wants_layer_block(args: argparse.Namespace) -> bool:
    """True when a checkpoint layer's block is asked for: --artifact block --checkpoint DIR (--layer N)."""
    if getattr(args, "checkpoint", None) is None or list(dict.fromkeys(args.artifact or [])) != ["block"]:
        if getattr(args, "layer", None) is not None:
            raise SpecError("layer", "picks a checkpoint layer: give --artifact block --checkpoint DIR")
        return False
    return True


def run_layer_block(args: argparse.Namespace, spec_fields: dict[str, str], line: Callable[..., str]) -> int:
    """Build the block of one checkpoint layer per --dtype x --graph (``line``: build's summary line); exit 0
    verified, 1 failed.
    """  # noqa: D205
    from ropeexport.api import build_layer_block

    for field in spec_fields:
        if field not in READ - {"max_positions"} and getattr(args, field, None) is not None:
            raise SpecError(field, "is not read with --checkpoint (the checkpoint's config sets it)")
    for flag in ("num_layers", "hidden_size", "vocab_size"):
        if getattr(args, flag) is not None:
            raise SpecError(flag, "is a decoder flag (seeded weights only), not for a checkpoint layer's block")
    for flag in WEIGHT_FLAGS:
        if getattr(args, flag) is not None:
            raise SpecError(flag, "is a decoder flag (--artifact decoder); a checkpoint layer's block keeps its "
                            "weights in --dtype")  # fmt: skip
    if args.spec or args.all_presets or args.preset:
        raise SpecError("checkpoint", "takes its config from the folder (or --hf-config), not a preset or spec file")
    layer = _int("layer", args.layer) or 0
    failed, built = 0, []
    for dtype in dict.fromkeys(args.dtype or ["fp32"]):
        for graph in dict.fromkeys(args.graph or ["fused"]):
            began = time.perf_counter()
            result = build_layer_block(args.checkpoint, args.out, layer, dtype, graph, args.runtime,
                                       replace=args.replace, hf_config=args.hf_config,
                                       name=getattr(args, "name", None))  # fmt: skip
            failed += not result.passed
            built.append({"path": str(result.path), "passed": result.passed})
            if args.quiet:
                print(result.path)
            elif not args.json:
                print(line(result.report, result.path, time.perf_counter() - began, result.kept))
    if args.json:
        print(json.dumps({"out": str(Path(args.out).resolve()), "built": built}, indent=2))
    elif not args.quiet:
        print(f"index: {Path(args.out) / 'index.html'}")
    return 1 if failed else 0


def wants_decoder(args: argparse.Namespace) -> bool:
    """True when --artifact decoder is asked for (it must then be the only artifact)."""
    asked = list(args.artifact or [])
    if "decoder" not in asked:
        for flag in ("checkpoint", "num_layers", "hidden_size", "vocab_size", *WEIGHT_FLAGS):
            if getattr(args, flag, None) is not None:
                raise SpecError(flag, "is a decoder flag: add --artifact decoder")
        return False
    if len(set(asked)) > 1:
        raise SpecError("artifact", "decoder is built on its own: give --artifact decoder alone")
    return True


def _int(field: str, value: Any) -> int | None:
    return None if value is None else ascii_int(value, field)


def _block_size(value: Any) -> int:
    """--block-size as given (0 when absent: the request's default); a given 0 is refused, not read as the default."""
    size = _int("block_size", value)
    if size == 0:
        raise SpecError("block_size", f"must be one of {', '.join(map(str, BLOCK_SIZES))}; got 0 (omit --block-size "
                        f"for {DEFAULT_BLOCK_SIZE})")  # fmt: skip
    return size or 0


def _default_graph(args: argparse.Namespace) -> str:
    """The form without --graph: the one the first --runtime runs best (its capability record), else fused."""
    return form_for(runtimes_of(args)[0]) if args.runtime else "fused"


def request_of(args: argparse.Namespace) -> DecoderRequest:
    """The decoder build the flags ask for, at the first --dtype and --graph: the one place a build flag becomes a
    ``DecoderRequest`` field (a new build option is a flag in ``add_flags`` and a line here). Each --dtype x --graph
    build is this request with those two replaced.
    """  # noqa: D205
    return DecoderRequest(
        hf_config=args.hf_config,
        checkpoint=args.checkpoint,
        preset=args.preset[0] if args.preset else None,
        dtype=(args.dtype or ["fp32"])[0],
        graph=(args.graph or [_default_graph(args)])[0],
        num_layers=_int("num_layers", args.num_layers),
        hidden_size=_int("hidden_size", args.hidden_size),
        vocab_size=_int("vocab_size", args.vocab_size),
        max_positions=_int("max_positions", getattr(args, "max_positions", None)),
        name=getattr(args, "name", None),
        weight_format=args.weight_format or "",
        block_size=_block_size(args.block_size),
        accuracy_level=_int("accuracy_level", args.accuracy_level) or 0,
        symmetric=True if args.symmetric is None else args.symmetric,
        eager=args.eager,
        runtimes=tuple(runtimes_of(args)),
        latent_cache=bool(getattr(args, "latent_cache", False)),
    )


def _plan(args: argparse.Namespace, requests: list[DecoderRequest]) -> int:
    """``--dry-run``: each decoder resolved and validated, where it would go and its scenarios; nothing written."""
    from ropeexport.api import resolve_decoder
    from ropeexport.decoder.weights import describe
    from ropeexport.store import Store
    from ropeexport.tree import check_tree

    plan: list[dict[str, Any]] = []
    for request in requests:
        spec = resolve_decoder(request)
        check_tree(Path(args.out))  # --out as the build checks it
        weights = {"weights": describe(None if args.checkpoint is None else Path(args.checkpoint))}
        Store(Path(args.out)).check(spec.name, spec.to_dict(), args.replace, identity=weights)
        given = {"dtype": args.dtype, "graph": args.graph, "name": getattr(args, "name", None)}
        chosen = {k: f"--{k}" if v else f"ropeexport default (no --{k})" for k, v in given.items()}
        chosen["model_type"] = spec.sources.get("model_type", "model_type")
        for key in ("num_layers", "hidden_size", "vocab_size", "max_positions"):  # a flag over the config's value
            if getattr(args, key, None) is not None:
                where = "position.max_positions" if key == "max_positions" else key
                chosen[where] = f"--{key.replace('_', '-')} (over the config's {spec.sources.get(where, key)})"
        plan.append({"name": spec.name, "path": str(Path(args.out) / spec.name), "spec": spec.to_dict(),
                     "sources": dict(spec.sources) | chosen,
                     "scenarios": [s.name for s in scenarios(spec)]})  # fmt: skip
    if args.json:
        print(json.dumps({"decoders": plan}, indent=2))
    else:
        for item in plan:
            print(f"{item['path']}: {', '.join(item['scenarios'])}")
            print("\n".join(resolved_lines(item["spec"], item["sources"])))  # each value and where it came from
        print(f"{len(plan)} decoder(s) (dry run: nothing written)")
    return 0


def run(args: argparse.Namespace, spec_fields: dict[str, str]) -> int:
    """Build the decoder the flags describe; the exit code of the module doc."""
    from ropeexport.api import build_decoder
    from ropeexport.cli.progress import BuildProgress

    for field in spec_fields:
        if field not in READ and getattr(args, field, None) is not None:
            raise SpecError(field, "is not read with --artifact decoder (the config sets it); allowed: "
                            "--dtype, --graph, --max-positions, --name and the decoder flags")  # fmt: skip
    if args.spec or args.all_presets or len(args.preset) > 1:
        raise SpecError("artifact", "decoder takes one source: --hf-config, --checkpoint or one --preset")
    refused = {"--scaling-param": args.scaling_param, "--atol": args.atol, "--rtol": args.rtol,
               "--jobs": args.jobs != "1"}  # fmt: skip
    for flag, given in refused.items():
        if given:
            raise SpecError(flag, "is not read with --artifact decoder (it verifies with its own bound per dtype); see "
                            "'ropeexport build --help'")  # fmt: skip
    dtypes = list(dict.fromkeys(args.dtype or ["fp32"]))
    graphs = list(dict.fromkeys(args.graph or [_default_graph(args)]))
    if getattr(args, "name", None) is not None and len(dtypes) * len(graphs) > 1:
        raise SpecError("name", "names one folder: give one --dtype and one --graph with it")
    first = request_of(args)
    requests = [dataclasses.replace(first, dtype=dtype, graph=graph) for dtype in dtypes for graph in graphs]
    talk = not (args.quiet or args.json)
    if args.dry_run:
        return _plan(args, requests)
    names: list[str] = []  # each build's folder name, for its progress lines
    if talk:  # every decoder resolved and checked before the first "building" line: bad input is its one line alone
        from ropeexport.api import resolve_decoder

        names = [resolve_decoder(request).name for request in requests]

    def shown(result: dict[str, Any]) -> None:
        if talk:
            s = result["summary"]
            kept = ""
            if "regime_cost_rel" in s:  # the keep policy's stale calls: reported, never judged
                kept = (f"; kept cache: {s['regime_cost_calls']} calls not judged, up to "
                        f"{error(s['regime_cost_rel'])} (the regime's cost)")  # fmt: skip
            if "cost_rel" in s:  # an int4 decoder's second figure: reported apart, never judged
                kept += (f"; quantization cost {error(s['cost_rel'])} (agreement {s['cost_agreement']}, not "
                         "judged)")  # fmt: skip
            print(f"  {result['name']:<27} {'ok  ' if result['passed'] else 'FAIL'} worst "
                  f"{error(s['worst_rel'])} of the logit scale, agreement {s['agreement']}, positions "
                  f"{s['positions'][0]}-{s['positions'][1]}{kept}", flush=True)  # fmt: skip

    failed, built, results = 0, [], []
    for index, request in enumerate(requests):
        if talk:
            what = f"{request.dtype} {request.weight_format + ' ' if request.weight_format else ''}{request.graph}"
            print(f"building {what} decoder into {args.out} (every scenario against float64"
                  f"{' and transformers' if request.eager else ''}):", flush=True)  # fmt: skip

        label = names[index] if names else f"{request.dtype} {request.graph} decoder"
        with BuildProgress(1, enabled=talk) as progress:  # a real size is minutes of export, then of float64
            result = build_decoder(request, args.out, replace=args.replace, on_scenario=shown,
                                   on_stage=functools.partial(progress.stage, label))  # fmt: skip
            progress.done(label, None)
        failed += not result.passed
        results.append(result)
        built.append({"path": str(result.path), "passed": result.passed})
        if args.quiet:
            print(result.path)
        elif not args.json:
            verdict = "verified" if result.passed else "FAILED"
            print(f"{verdict}: {result.path} (report.html there; index: {Path(args.out) / 'index.html'})"
                  f"{_cost_line(result.report)}")  # fmt: skip
            if result.kept is not None:
                print(f"  a verified decoder was there: it stays at {result.kept}; this failed build is kept "
                      f"apart at {result.path}")  # fmt: skip
    if args.json:
        print(json.dumps({"out": str(Path(args.out).resolve()), "built": built}, indent=2))
    if failed and not args.quiet:
        print(f"{failed} decoder(s) FAILED verification", file=sys.stderr)
        return 1
    return skipped_exit(results, args.runtime, args.allow_skip)


def _cost_line(report: dict[str, Any]) -> str:
    """An int4 decoder's quantization cost for its result line ("" for weights in the dtype)."""
    costs = [s["summary"]["cost_rel"] for s in report.get("scenarios", []) if "cost_rel" in s.get("summary", {})]
    if not costs:
        return ""
    return f"; quantization cost (not judged): worst {error(max(costs))} of the logit scale (the weights unquantized)"
