"""A decoder build's request resolved: the spec (and the shrunk config) from a config, checkpoint or preset.

``DecoderRequest`` (``decoder.request``) is what is asked; ``resolve`` turns it into the ``DecoderSpec`` and the
config the build uses, and ``check_buildable`` checks what a build needs beyond a valid spec. The folder itself is
written by the one pipeline (``ropeexport.pipeline.build`` with ``decoder.kind.DecoderKind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropeexport.decoder.config import from_config, shrink
from ropeexport.decoder.genai import check_tokenizer
from ropeexport.decoder.memory import check_memory
from ropeexport.decoder.request import DecoderRequest
from ropeexport.decoder.scenarios import check_positions
from ropeexport.decoder.spec import DecoderSpec, weight_label
from ropeexport.errors import SpecError
from ropeexport.forms import FORMS
from ropeexport.hf import model_name, read_config
from ropeexport.hf.learned_rope import with_learned_rope
from ropeexport.presets import get_preset
from ropeexport.runtimes.capabilities import CAPABILITIES, runs

__all__ = ["GROUPED", "DecoderRequest", "check_buildable", "resolve"]  # DecoderRequest: where it was first imported

GROUPED = ("llama", "mistral", "qwen2", "phi3")  # architectures whose configs carry num_key_value_heads


def resolve(request: DecoderRequest) -> tuple[DecoderSpec, dict[str, Any]]:
    """The spec and the (shrunk) config the request stands for; SpecError names the field or key at fault.

    The folder's name, unless ``request.name``: the preset's or the config's model name, then ``decoder``, the size
    overrides, dtype, the weight format when int4 (``weight_label``) and graph.
    """
    hf_config, checkpoint, base = request.hf_config, request.checkpoint, request.preset
    config: Mapping[str, Any] | None = request.config
    num_layers, hidden_size, vocab_size = request.num_layers, request.hidden_size, request.vocab_size
    dtype, graph = request.dtype, request.graph
    if checkpoint is not None and not Path(checkpoint).is_dir():
        raise SpecError("checkpoint", f"{str(checkpoint)!r} is not a folder")
    where = "config"
    if request.preset is not None:
        card = get_preset(request.preset)
        if card.config is None:
            raise SpecError("preset", f"{request.preset!r} is a spec card without a transformers config; a decoder "
                            "needs one")  # fmt: skip
        config = dict(card.config)
    if config is None:
        if hf_config is not None:
            path = Path(hf_config)
        elif checkpoint is not None:
            path = Path(checkpoint) / "config.json"
        else:
            raise SpecError("hf_config", "a decoder needs a transformers config: give `hf_config`, `checkpoint` or "
                            "`preset`")  # fmt: skip
        if hf_config is None and not path.is_file():
            raise SpecError("checkpoint", f"{str(path.parent)!r} has no config.json (a checkpoint folder holds "
                            "config.json and *.safetensors); give `hf_config` for a config kept elsewhere")  # fmt: skip
        config, where = read_config(path), str(path)
        base = base or model_name(config, path)
    resized = any(v is not None for v in (num_layers, hidden_size, vocab_size))
    if resized and checkpoint is not None:
        raise SpecError("num_layers", "size overrides (--num-layers, --hidden-size, --vocab-size) need seeded weights, "
                        "not a --checkpoint (its tensors have the config's sizes)")  # fmt: skip
    used = dict(with_learned_rope(shrink(config, num_layers, hidden_size, vocab_size), checkpoint))
    heads = next((used[k] for k in ("num_attention_heads", "n_head") if used.get(k)), None)
    if used.get("model_type") in GROUPED and used.get("num_key_value_heads") is None and heads:
        # Absent means one KV head per query head here (as ropeexport.hf reads it); written out so the transformers
        # reference agrees (Qwen2Config's own default is 32, whatever the head count).
        used["num_key_value_heads"] = heads
    base = base or str(used.get("model_type", "model"))
    label = "-".join(f"{tag}{v}" for tag, v in (("l", num_layers), ("h", hidden_size), ("v", vocab_size)) if v)
    weights = {"weight_format": request.weight_format, "block_size": request.block_size,
               "accuracy_level": request.accuracy_level, "symmetric": request.symmetric}  # fmt: skip
    full = request.name or "-".join(x for x in (base, "decoder", label, dtype, graph) if x)
    spec = from_config(used, full, where, dtype=dtype, graph=graph, max_positions=request.max_positions,
                       weights=weights)  # fmt: skip
    if spec.storage.format == "int4" and spec.tie_embeddings:  # the head in int4 too, the embedding gathered from its
        spec = spec.replace(tied_head_int4=True, tied_embedding_int4=True)  # bytes (``DecoderSpec.tied_head_int4``)
    if request.latent_cache:  # latent layers' latent cache (``DecoderSpec.latent_cache``), named in the folder
        spec = spec.replace(latent_cache=True, **({} if request.name else {"name": f"{spec.name}-latent"}))
    if request.name is None and spec.storage.format:  # the name carries the weight format (validated, defaults set)
        name = "-".join(x for x in (base, "decoder", label, dtype, weight_label(spec.to_dict()), graph) if x)
        spec = spec.replace(name=name)
    return spec, used


def check_buildable(spec: DecoderSpec, request: DecoderRequest) -> None:
    """What a build needs beyond a valid spec, checked before anything is allocated or written (a dry run checks it
    too): room for every scenario in max_positions, memory for the weights (``decoder.memory``: the estimate against
    this machine's; ``request.eager``: with the transformers reference), a checkpoint's tokenizer files that read,
    and its tensors as the headers give them (``CheckpointWeights``: names, shapes, shards; values are checked as
    read); every runtime asked for runs the spec's form and weights (``runtimes.capabilities``).
    SpecError / CheckpointError name the field.
    """  # noqa: D205
    for runtime in request.runtimes:
        why = runs(runtime, spec.graph, spec.storage.format == "int4")
        if why is not None:
            forms = [f for f in CAPABILITIES[runtime].forms if FORMS[f].decoder]
            raise SpecError("runtime", f"{why}; build a decoder for it with --graph {' or '.join(forms)}")
    shares = next((i for i, layer in enumerate(spec.layers) if layer.attention.kind == "latent"
                   and layer.attention.kv_from is not None), None)  # fmt: skip
    if shares is not None and not spec.latent_cache:
        raise SpecError("latent_cache", f"must be true: layer {shares} reads another layer's latent "
                        "(kv_source_layers), built over the latent cache only (the expanded cache holds the source's "
                        "keys as its own kv_b_proj made them); build with --latent-cache")  # fmt: skip
    given = request.max_positions is not None
    check_positions(spec, None if given else spec.sources.get("position.max_positions"))
    field = next((f for f in ("checkpoint", "hf_config", "config") if getattr(request, f) is not None), "preset")
    check_memory(spec, seeded=request.checkpoint is None, field=field, eager=request.eager)
    check_tokenizer(request.checkpoint)
    if request.checkpoint is not None:  # its tensors' names, shapes and shards, from the headers alone (no values)
        from ropeexport.decoder.checkpoint import CheckpointWeights

        CheckpointWeights(spec, request.checkpoint)
