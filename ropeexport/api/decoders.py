"""Decoders from the API: ``build_decoder`` (a whole decoder-only model, built and verified by generation against a
float64 recompute), ``resolve_decoder`` (the spec it would build, checked, nothing written), both taking one
``DecoderRequest`` (``rx.DecoderRequest``: what is asked); ``build_layer_block`` (one checkpoint layer's block);
``generate`` / ``open_decoder`` (greedy generation with a built decoder).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ropeexport import pipeline
from ropeexport.api.shared import Tolerance, _encoding_kind, _index, _path
from ropeexport.decoder.kind import DecoderKind
from ropeexport.decoder.request import DecoderRequest, request_from
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import SpecError
from ropeexport.pipeline import BuildResult
from ropeexport.tree import check_tree

if TYPE_CHECKING:  # loaded when first used: ONNX Runtime sessions and transformers stay out of import time
    from ropeexport.decoder.serve import DecoderSession, Generation

OnScenario = Callable[[dict[str, object]], None]


def build_decoder(
    request: DecoderRequest | str | Path | None = None,
    out_dir: str | Path | None = None,
    *,
    replace: bool = False,
    on_scenario: OnScenario | None = None,
    on_stage: pipeline.Stage | None = None,
    **fields: object,
) -> BuildResult:
    """A whole decoder, as ``request`` asks (``rx.DecoderRequest``: its config, weights, sizes, dtype, graph form,
    weight format), built into ``out_dir/NAME`` (``ropeexport.decoder``) and verified by greedy generation against
    a float64 recompute (and transformers, with ``request.eager``).

    Returns a ``BuildResult`` (``.passed``, ``.path``, ``.report``: every scenario of report.json; an int4 decoder's
    also carries each call's quantization cost, reported and not judged). ``replace``: rebuild over a decoder of
    another spec at NAME. ``on_scenario(result)`` sees each scenario as it finishes; ``on_stage(stage, done, total)``
    is told the build's progress: ``export`` per layer, then per scenario its name and its float64 passes per layer.
    The older form, ``build_decoder(out_dir, hf_config=..., dtype=..., eager=..., ...)`` (the request's fields as
    keywords), still works.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request, out_given = _request_and_out(request, out_dir, fields)
    spec, used = resolve(request)
    check_buildable(spec, request)
    out = _path(out_given, "out_dir")
    check_tree(out)
    ckpt = None if request.checkpoint is None else Path(request.checkpoint)
    kind = DecoderKind(config=used, checkpoint=ckpt, eager=request.eager, on_scenario=on_scenario,
                       runtimes=list(request.runtimes))
    result = pipeline.build(kind, spec, out, replace, request.origin(), dict(spec.sources), stage=on_stage)
    _index(out)  # the tree's index lists the decoder beside the other artifacts
    return result


def resolve_decoder(request: DecoderRequest | None = None, **fields: object) -> DecoderSpec:
    """The ``DecoderSpec`` ``build_decoder(request, ...)`` would build, validated, and checked as the build checks it
    first (its scenarios fit max_positions, its memory estimate fits this machine, with the transformers reference
    when ``request.eager``; the checkpoint's tokenizer reads); nothing is exported, run or written.

    The older form, ``resolve_decoder(hf_config=..., dtype=..., ...)`` (the request's fields as keywords), still
    works.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    if request is None:
        request = request_from(fields, "rx.resolve_decoder")
    else:
        _no_fields_beside(request, fields)
    spec = resolve(request)[0]
    check_buildable(spec, request)
    return spec


def _request_and_out(
    request: object, out_dir: str | Path | None, fields: Mapping[str, object]
) -> tuple[DecoderRequest, str | Path]:
    """(request, out_dir) of ``build_decoder``'s arguments: ``(request, out_dir)``, or the older
    ``(out_dir, **fields)``; a mix of the two is a SpecError naming what to change.
    """  # noqa: D205
    if isinstance(request, DecoderRequest):
        _no_fields_beside(request, fields)
        if out_dir is None:
            raise SpecError("out_dir", "is missing: rx.build_decoder(request, out_dir)")
        return request, out_dir
    if request is not None and (out_dir is not None or not isinstance(request, (str, Path))):
        raise SpecError("request", f"must be an rx.DecoderRequest (rx.build_decoder(request, out_dir)), got "
                        f"{type(request).__name__}; the older form takes the output folder first and the rest as "
                        "keywords")  # fmt: skip
    out = request if request is not None else out_dir
    if out is None:
        raise SpecError("out_dir", "is missing: rx.build_decoder(request, out_dir)")
    return request_from(fields, "rx.build_decoder"), out


def _no_fields_beside(request: object, fields: Mapping[str, object]) -> None:
    """A request given whole takes no field beside it (which of the two would hold?); else SpecError."""
    if not isinstance(request, DecoderRequest):
        raise SpecError("request", f"must be an rx.DecoderRequest, got {type(request).__name__}")
    if fields:
        name = sorted(fields)[0]
        raise SpecError(name, f"is given beside a DecoderRequest: put it in the request "
                        f"(dataclasses.replace(request, {name}=...))")  # fmt: skip


def build_layer_block(
    checkpoint: str | Path,
    out_dir: str | Path,
    layer: int = 0,
    dtype: str = "fp32",
    graph: str = "fused",
    runtimes: Sequence[str] | None = None,
    atol: Tolerance = None,
    rtol: Tolerance = None,
    replace: bool = False,
    hf_config: str | Path | None = None,
    name: str | None = None,
) -> BuildResult:
    """The ``block`` artifact of one checkpoint layer (``decoder.layer``): its encoding's block with that layer's
    attention weights, built and verified into ``out_dir/NAME`` like ``build``; the manifest records the checkpoint.
    """  # noqa: D205
    from ropeexport.decoder.layer import LayerBlockKind, layer_block

    out = _path(out_dir, "out_dir")
    check_tree(out)
    hf = None if hf_config is None else _path(hf_config, "hf_config")
    spec, kind, origin = layer_block(_path(checkpoint, "checkpoint"), layer, dtype, graph, name, hf)
    base = _encoding_kind(runtimes, atol, rtol)
    block = LayerBlockKind(base.runtimes, base.atol, base.rtol, recipe_of=lambda _: kind, source=origin["weights"])
    result = pipeline.build(block, spec, out, replace, origin)
    _index(out)  # as the CLI's builds end: the tree lists the new block
    return result


def generate(
    folder: str | Path,
    prompt_ids: Sequence[int] | None = None,
    prompt: str | None = None,
    max_new_tokens: int = 32,
    position_offset: int = 0,
    threads: int | None = None,
    policy: str | None = None,
    stop_at_eos: bool = False,
    engine: str = "ort",
) -> Generation:
    """Greedy generation with a built decoder folder (``ropeexport.decoder.serve``): ONNX Runtime on the CPU, IO
    binding, a cache allocated once. The prompt is token ids or text (read by the folder's tokenizer.json), placed at
    ``position_offset``; every token must stay below max_positions (else SpecError). ``policy``: re-prefill (the
    default) or keep. ``engine`` "onnxruntime-genai": its own loop instead (``decoder.genai_serve``: offset 0, keep,
    stopping at its eos; SpecError naming ``engine`` for a decoder it cannot serve). Returns a ``Generation``
    (``.tokens``, ``.text``, ``.steps`` with each call's kind, positions, RoPE regime and seconds).
    """  # noqa: D205
    from ropeexport.decoder.genai_serve import ENGINES, genai_generate
    from ropeexport.decoder.serve import DecoderSession

    if engine not in ENGINES:
        raise SpecError("engine", f"must be one of {', '.join(ENGINES)}, got {engine!r}")
    session = DecoderSession(_path(folder, "path"), threads, runtime=engine == "ort")
    ids = session.prompt_of(prompt_ids, prompt)
    if engine == "ort":
        return session.generate(ids, max_new_tokens, position_offset, policy or "re-prefill", stop_at_eos)
    return genai_generate(session, ids, max_new_tokens, position_offset, policy)


def open_decoder(folder: str | Path, threads: int | None = None) -> DecoderSession:
    """A ``DecoderSession`` over a built decoder folder, for many generations with one session (``generate``)."""
    from ropeexport.decoder.serve import DecoderSession

    return DecoderSession(_path(folder, "path"), threads)
