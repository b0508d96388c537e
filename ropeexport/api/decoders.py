"""Decoders from the API: ``build_decoder`` (a whole decoder-only model, built and verified by generation against a
float64 recompute), ``resolve_decoder`` (the spec it would build, checked, nothing written), ``build_layer_block``
(one checkpoint layer's block), ``generate`` / ``open_decoder`` (greedy generation with a built decoder).
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ropeexport import pipeline
from ropeexport.api.shared import Tolerance, _encoding_kind, _index, _path
from ropeexport.decoder.kind import DecoderKind
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.errors import SpecError
from ropeexport.pipeline import BuildResult
from ropeexport.tree import check_tree

if TYPE_CHECKING:  # loaded when first used: ONNX Runtime sessions and transformers stay out of import time
    from ropeexport.decoder.build import DecoderRequest
    from ropeexport.decoder.serve import DecoderSession, Generation


def build_decoder(
    out_dir: str | Path,
    hf_config: str | Path | None = None,
    checkpoint: str | Path | None = None,
    preset: str | None = None,
    dtype: str = "fp32",
    graph: str = "fused",
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    max_positions: int | None = None,
    name: str | None = None,
    eager: bool = True,
    replace: bool = False,
    on_scenario: Callable[[dict[str, object]], None] | None = None,
    weight_format: str = "",
    block_size: int = 0,
    accuracy_level: int = 0,
    symmetric: bool = True,
    on_stage: pipeline.Stage | None = None,
) -> BuildResult:
    """A whole decoder into ``OUT/NAME`` (``ropeexport.decoder``), from ``hf_config``, the checkpoint's own
    config.json, or a preset's config; ``num_layers`` / ``hidden_size`` / ``vocab_size`` shrink it (seeded weights).
    ``weight_format`` "int4": the projections as MatMulNBits blocks of ``block_size`` (0: 32), ``symmetric`` or with
    zero points, at ``accuracy_level`` (0-4; ``components.linear``); "" (default): rounded once to ``dtype``.
    Returns a ``BuildResult`` (``.passed``, ``.path``, ``.report``: every scenario of report.json; an int4 decoder's
    also carries each call's quantization cost, reported and not judged). ``on_stage(stage, done, total)`` is told
    the build's progress: ``export`` per layer, then per scenario its name and its float64 passes per layer.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request = _decoder_request(hf_config, checkpoint, preset, (dtype, graph, num_layers, hidden_size, vocab_size,
                                                                max_positions, name),
                               _weights(weight_format, block_size, accuracy_level, symmetric))  # fmt: skip
    spec, used = resolve(request)
    check_buildable(spec, request, eager)
    out = _path(out_dir, "out_dir")
    check_tree(out)
    origin = {k: str(Path(v).resolve()) for k, v in (("hf_config", request.hf_config),
                                                      ("checkpoint", request.checkpoint)) if v is not None}  # fmt: skip
    if preset is not None:
        origin["preset"] = preset
    ckpt = None if request.checkpoint is None else Path(request.checkpoint)
    kind = DecoderKind(config=used, checkpoint=ckpt, eager=eager, on_scenario=on_scenario)
    result = pipeline.build(kind, spec, out, replace, origin, dict(spec.sources), stage=on_stage)
    _index(out)  # the tree's index lists the decoder beside the other artifacts
    return result


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
    block = LayerBlockKind(base.runtimes, base.atol, base.rtol, artifact_kind=lambda _: kind, source=origin["weights"])
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
    policy: str = "re-prefill",
    stop_at_eos: bool = False,
) -> Generation:
    """Greedy generation with a built decoder folder (``ropeexport.decoder.serve``): ONNX Runtime on the CPU, IO
    binding, a cache allocated once. The prompt is token ids or text (read by the folder's tokenizer.json), placed at
    ``position_offset``; every token must stay below max_positions (else SpecError). Returns a ``Generation``
    (``.tokens``, ``.text``, ``.steps`` with each call's kind, positions, RoPE regime and seconds).
    """  # noqa: D205
    from ropeexport.decoder.serve import DecoderSession

    session = DecoderSession(_path(folder, "path"), threads)
    return session.generate(session.prompt_of(prompt_ids, prompt), max_new_tokens, position_offset, policy, stop_at_eos)


def open_decoder(folder: str | Path, threads: int | None = None) -> DecoderSession:
    """A ``DecoderSession`` over a built decoder folder, for many generations with one session (``generate``)."""
    from ropeexport.decoder.serve import DecoderSession

    return DecoderSession(_path(folder, "path"), threads)


# A decoder's form and sizes as the API takes them: dtype, graph, num_layers, hidden_size, vocab_size, max_positions,
# name (``DecoderRequest``'s fields in its order).
_Form = tuple[str, str, int | None, int | None, int | None, int | None, str | None]


def _decoder_request(
    hf_config: str | Path | None,
    checkpoint: str | Path | None,
    preset: str | None,
    sizes_and_form: _Form,
    weights: Mapping[str, Any] | None = None,
) -> DecoderRequest:
    """The ``decoder.build.DecoderRequest`` of the API's arguments: paths checked, a preset's config read from its
    card.
    """  # noqa: D205
    from ropeexport.decoder.build import DecoderRequest
    from ropeexport.presets import get_preset

    config = None
    if preset is not None:
        for other, given in (("hf_config", hf_config), ("checkpoint", checkpoint)):
            if given is not None:  # a checkpoint brings its own config.json: two configs would disagree
                raise SpecError("preset", f"cannot be combined with `{other}`: give one config")
        card = get_preset(preset)
        if card.config is None:
            raise SpecError("preset", f"{preset!r} is a spec card without a transformers config; a decoder needs one")
        config = dict(card.config)
    hf = None if hf_config is None else _path(hf_config, "hf_config")
    ckpt = None if checkpoint is None else _path(checkpoint, "checkpoint")
    return DecoderRequest(hf, ckpt, config, *sizes_and_form, base=preset, **dict(weights or {}))


def _weights(weight_format: str, block_size: int, accuracy_level: int, symmetric: bool) -> dict[str, Any]:
    """How a decoder's projections are stored, as ``DecoderRequest`` takes it (validated by the spec)."""
    return {"weight_format": weight_format, "block_size": block_size, "accuracy_level": accuracy_level,
            "symmetric": symmetric}  # fmt: skip


def resolve_decoder(
    hf_config: str | Path | None = None,
    checkpoint: str | Path | None = None,
    preset: str | None = None,
    dtype: str = "fp32",
    graph: str = "fused",
    num_layers: int | None = None,
    hidden_size: int | None = None,
    vocab_size: int | None = None,
    max_positions: int | None = None,
    name: str | None = None,
    weight_format: str = "",
    block_size: int = 0,
    accuracy_level: int = 0,
    symmetric: bool = True,
    eager: bool = True,
) -> DecoderSpec:
    """The ``DecoderSpec`` ``build_decoder`` would build, validated, and checked as the build checks it first (its
    scenarios fit max_positions, its memory estimate fits this machine, with the transformers reference when
    ``eager``, as ``build_decoder`` takes it; the checkpoint's tokenizer reads); nothing is exported, run or written.
    """  # noqa: D205
    from ropeexport.decoder.build import check_buildable, resolve

    request = _decoder_request(hf_config, checkpoint, preset, (dtype, graph, num_layers, hidden_size, vocab_size,
                                                                max_positions, name),
                               _weights(weight_format, block_size, accuracy_level, symmetric))  # fmt: skip
    spec = resolve(request)[0]
    check_buildable(spec, request, eager)
    return spec
