"""Build one decoder: resolve the spec from a config (and checkpoint), export, run every scenario, write the folder.

``<out>/<name>/`` holds ``model.onnx`` (+ ``model.onnx.data`` past 64 MiB of weights), ``decoder.json`` (the spec,
where each field came from, the config used, the weights' source) and ``report.json`` / ``report.md`` /
``report.html`` (every call of every scenario against the float64 truth and transformers), and the onnxruntime-genai
package: ``genai_config.json`` and the checkpoint's tokenizer files (``decoder.genai``). The folder is written under
a hidden name and renamed into place when complete: a bad input or an interrupted build leaves nothing half-written.
``<out>`` must be absent, empty or a ropeexport tree (``tree.check_tree``, as for every build); its index.json /
index.html are rewritten after, the decoder listed beside the other artifacts.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropeexport.decoder.export import build_decoder_graph
from ropeexport.decoder.genai import CONFIG, copy_tokenizer, genai_config
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.scenarios import scenarios
from ropeexport.decoder.report import write_html, write_markdown
from ropeexport.decoder.spec import DecoderSpec, from_config, shrink
from ropeexport.decoder.verify import TOLERANCE, verify_decoder
from ropeexport.decoder.checkpoint import describe, load_checkpoint, seeded_weights
from ropeexport.errors import RuntimeUnavailable, SpecError
from ropeexport.graph.onnx_io import save_model, sha256
from ropeexport.hf import model_name, read_config
from ropeexport.tree import check_tree, write_index
from ropeexport.version import __version__

GROUPED = ("llama", "mistral", "qwen2", "phi3")  # architectures whose configs carry num_key_value_heads


@dataclass(frozen=True)
class DecoderResult:
    """What ``build_decoder`` wrote: the folder, the report (as report.json holds it) and whether every call passed."""

    path: Path
    report: dict[str, Any]

    @property
    def passed(self) -> bool:
        """True when every call of every scenario passed."""
        return bool(self.report["passed"])


@dataclass(frozen=True)
class DecoderRequest:
    """What a decoder build is asked for, before validation: one source of config (``config``, a preset's; or
    ``hf_config``; or the ``checkpoint``'s config.json), the weights (``checkpoint``, else seeded), the size overrides
    that shrink a seeded model, dtype, graph form, max_positions, and the folder ``name`` as given (else ``base``,
    the preset's or the config's model name, then ``decoder``, the overrides, dtype and graph).
    """  # noqa: D205

    hf_config: str | Path | None = None
    checkpoint: str | Path | None = None
    config: Mapping[str, Any] | None = None
    dtype: str = "fp32"
    graph: str = "fused"
    num_layers: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    max_positions: int | None = None
    name: str | None = None
    base: str | None = None


def resolve(request: DecoderRequest) -> tuple[DecoderSpec, dict[str, Any]]:
    """The spec and the (shrunk) config the request stands for; SpecError names the field or key at fault."""
    hf_config, checkpoint, config, base = request.hf_config, request.checkpoint, request.config, request.base
    num_layers, hidden_size, vocab_size = request.num_layers, request.hidden_size, request.vocab_size
    dtype, graph = request.dtype, request.graph
    if checkpoint is not None and not Path(checkpoint).is_dir():
        raise SpecError("checkpoint", f"{str(checkpoint)!r} is not a folder")
    where = "config"
    if config is None:
        if hf_config is None and checkpoint is None:
            raise SpecError("hf_config", "a decoder needs a transformers config: give `hf_config`, `checkpoint` or "
                            "`preset`")  # fmt: skip
        path = Path(hf_config) if hf_config is not None else Path(checkpoint) / "config.json"
        if hf_config is None and not path.is_file():
            raise SpecError("checkpoint", f"{str(Path(checkpoint))!r} has no config.json (a checkpoint folder holds "
                            "config.json and *.safetensors); give `hf_config` for a config kept elsewhere")  # fmt: skip
        config, where = read_config(path), str(path)
        base = base or model_name(config, path)
    resized = any(v is not None for v in (num_layers, hidden_size, vocab_size))
    if resized and checkpoint is not None:
        raise SpecError("num_layers", "size overrides (--num-layers, --hidden-size, --vocab-size) need seeded weights, "
                        "not a --checkpoint (its tensors have the config's sizes)")  # fmt: skip
    config = shrink(config, num_layers, hidden_size, vocab_size)
    heads = next((config[k] for k in ("num_attention_heads", "n_head") if config.get(k)), None)
    if config.get("model_type") in GROUPED and config.get("num_key_value_heads") is None and heads:
        # Absent means one KV head per query head here (as ropeexport.hf reads it); written out so the transformers
        # reference agrees (Qwen2Config's own default is 32, whatever the head count).
        config["num_key_value_heads"] = heads
    base = base or str(config.get("model_type", "model"))
    label = "-".join(f"{tag}{v}" for tag, v in (("l", num_layers), ("h", hidden_size), ("v", vocab_size)) if v)
    full = request.name or "-".join(x for x in (base, "decoder", label, dtype, graph) if x)
    spec = from_config(config, full, where, dtype=dtype, graph=graph, max_positions=request.max_positions)
    return spec, config


def check_out(out: Path, spec: DecoderSpec, replace: bool) -> Path:
    """``out/NAME``, after checking ``out`` is empty, absent or a ropeexport tree (as every build checks it) and that
    a decoder already there has the same spec (else SpecError naming the first field that differs, unless
    ``replace``).
    """  # noqa: D205
    check_tree(out)
    target = out / spec.name
    if target.exists() and not replace:
        try:
            before = json.loads((target / "decoder.json").read_text())["spec"]
        except (OSError, ValueError, KeyError, TypeError):
            raise SpecError("out_dir", f"{str(target)!r} exists and is not a decoder; give `replace` to overwrite "
                            "it") from None  # fmt: skip
        now = spec.to_dict()
        flat = lambda d: {**{k: v for k, v in d.items() if k != "position"},  # noqa: E731
                          **{f"position.{k}": v for k, v in d.get("position", {}).items()}}  # fmt: skip
        old, new = flat(before), flat(json.loads(json.dumps(now)))
        differ = next((k for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)), None)
        if differ is not None:
            raise SpecError(differ, f"{old.get(differ)!r} in {str(target)!r}, {new.get(differ)!r} now: give `replace` "
                            "to rebuild it from the new spec")  # fmt: skip
    return target


def _verify(spec: DecoderSpec, config: dict[str, Any], weights: Any, checkpoint: Any, model_path: Path,
            eager: bool, on_scenario: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:  # fmt: skip
    from ropeexport.decoder.reference import TransformersReference
    from ropeexport.runtimes.ort import OrtRunner

    pieces = position_pieces(spec)  # each layer's position piece: the float64 truth rotates with its twin
    runner = OrtRunner(model_path, providers=["CPUExecutionProvider"])
    reference, skipped = None, None
    if eager:
        try:
            reference = TransformersReference(spec, config, weights, checkpoint)
        except RuntimeUnavailable as why:
            skipped = str(why)
    else:
        skipped = "not asked for (--no-eager)"
    start = time.perf_counter()
    results = verify_decoder(runner.infer, spec, weights, pieces, reference, on_scenario=on_scenario)
    return {
        "artifact": "decoder",
        "name": spec.name,
        "ropeexport": __version__,
        "spec": spec.to_dict(),
        "weights": describe(checkpoint),
        "runtime": runner.describe(),
        "references": {
            "float64": "no-cache full recompute in float64, exact positions (ropeexport.decoder.oracle)",
            "transformers": reference.describe() if reference is not None else f"skipped: {skipped}",
        },
        "tolerance": {"rel": TOLERANCE[spec.dtype], "of": "max |float64 logit| of the call (the logit scale)"},
        "passed": all(s["passed"] for s in results),
        "seconds": round(time.perf_counter() - start, 2),
        "scenarios": results,
    }


def build_decoder(
    out_dir: str | Path,
    request: DecoderRequest,
    eager: bool = True,
    replace: bool = False,
    on_scenario: Callable[[dict[str, Any]], None] | None = None,
) -> DecoderResult:
    """Resolve, export, verify and write one decoder (module doc); SpecError on bad input, nothing written."""
    spec, used = resolve(request)
    checkpoint = request.checkpoint
    out = Path(out_dir)
    target = check_out(out, spec, replace)
    weights = load_checkpoint(spec, checkpoint) if checkpoint is not None else seeded_weights(spec)
    model = build_decoder_graph(spec, weights, describe(checkpoint))
    work = out / f".building-{spec.name}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        files = save_model(model, work)
        del model
        # The onnxruntime-genai package: its config, and the checkpoint's tokenizer when it has one.
        (work / CONFIG).write_text(json.dumps(genai_config(spec, used), indent=2) + "\n")
        files += [CONFIG, *copy_tokenizer(checkpoint, work)]
        report = _verify(spec, used, weights, checkpoint, work / "model.onnx", eager, on_scenario)
        report["files"] = {f: sha256(work / f) for f in files}
        record = {"spec": spec.to_dict(), "sources": dict(spec.sources), "config": used,
                  "weights": describe(checkpoint),
                  "scenarios": [s.__dict__ for s in scenarios(spec)]}  # fmt: skip
        (work / "decoder.json").write_text(json.dumps(record, indent=2, default=list) + "\n")
        (work / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (work / "report.md").write_text(write_markdown(report))
        (work / "report.html").write_text(write_html(report))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    try:  # the tree's index lists the decoder beside the other artifacts
        write_index(out)
    except OSError as exc:
        raise SpecError(
            "out_dir",
            f"the decoder is built, but {str(out / 'index.json')!r} could not be rewritten ({exc.strerror}); "
            "free space and run 'ropeexport verify' on the tree to index it",
        ) from None
    return DecoderResult(target, report)
