"""What a decoder build is asked for, resolved: the spec (and the shrunk config) from a config, checkpoint or preset.

The folder itself is written by the one pipeline (``ropeexport.pipeline.build`` with ``decoder.kind.DecoderKind``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ropeexport.decoder.config import from_config, shrink
from ropeexport.decoder.genai import check_tokenizer
from ropeexport.decoder.memory import check_memory
from ropeexport.decoder.scenarios import check_positions
from ropeexport.decoder.spec import DecoderSpec, weight_label
from ropeexport.errors import SpecError
from ropeexport.hf import model_name, read_config

GROUPED = ("llama", "mistral", "qwen2", "phi3")  # architectures whose configs carry num_key_value_heads


@dataclass(frozen=True)
class DecoderRequest:
    """What a decoder build is asked for, before validation: one source of config (``config``, a preset's; or
    ``hf_config``; or the ``checkpoint``'s config.json), the weights (``checkpoint``, else seeded), the size overrides
    that shrink a seeded model, dtype, graph form, max_positions, and the folder ``name`` as given (else ``base``,
    the preset's or the config's model name, then ``decoder``, the overrides, dtype, the weight format when int4
    (``weight_label``) and graph). ``weight_format``, ``block_size``, ``accuracy_level``, ``symmetric``: how the
    projections are stored (``DecoderSpec``'s fields of those names).
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
    weight_format: str = ""
    block_size: int = 0
    accuracy_level: int = 0
    symmetric: bool = True



def resolve(request: DecoderRequest) -> tuple[DecoderSpec, dict[str, Any]]:
    """The spec and the (shrunk) config the request stands for; SpecError names the field or key at fault."""
    hf_config, checkpoint, config, base = request.hf_config, request.checkpoint, request.config, request.base
    num_layers, hidden_size, vocab_size = request.num_layers, request.hidden_size, request.vocab_size
    dtype, graph = request.dtype, request.graph
    if checkpoint is not None and not Path(checkpoint).is_dir():
        raise SpecError("checkpoint", f"{str(checkpoint)!r} is not a folder")
    where = "config"
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
    config = shrink(config, num_layers, hidden_size, vocab_size)
    heads = next((config[k] for k in ("num_attention_heads", "n_head") if config.get(k)), None)
    if config.get("model_type") in GROUPED and config.get("num_key_value_heads") is None and heads:
        # Absent means one KV head per query head here (as ropeexport.hf reads it); written out so the transformers
        # reference agrees (Qwen2Config's own default is 32, whatever the head count).
        config["num_key_value_heads"] = heads
    base = base or str(config.get("model_type", "model"))
    label = "-".join(f"{tag}{v}" for tag, v in (("l", num_layers), ("h", hidden_size), ("v", vocab_size)) if v)
    weights = {"weight_format": request.weight_format, "block_size": request.block_size,
               "accuracy_level": request.accuracy_level, "symmetric": request.symmetric}  # fmt: skip
    full = request.name or "-".join(x for x in (base, "decoder", label, dtype, graph) if x)
    spec = from_config(config, full, where, dtype=dtype, graph=graph, max_positions=request.max_positions,
                       weights=weights)  # fmt: skip
    if spec.storage.format == "int4" and spec.tie_embeddings:  # the head in int4 too, the embedding gathered from its
        spec = spec.replace(tied_head_int4=True, tied_embedding_int4=True)  # bytes (``DecoderSpec.tied_head_int4``)
    if request.name is None and spec.storage.format:  # the name carries the weight format (validated, defaults set)
        name = "-".join(x for x in (base, "decoder", label, dtype, weight_label(spec.to_dict()), graph) if x)
        spec = spec.replace(name=name)
    return spec, config


def check_buildable(spec: DecoderSpec, request: DecoderRequest, eager: bool = True) -> None:
    """What a build needs beyond a valid spec, checked before anything is allocated or written (a dry run checks it
    too): room for every scenario in max_positions, memory for the weights (``decoder.memory``: the estimate against
    this machine's; ``eager``: with the transformers reference), a checkpoint's tokenizer files that read, and its
    tensors as the headers give them (``CheckpointWeights``: names, shapes, shards; values are checked as read).
    SpecError / CheckpointError name the field.
    """  # noqa: D205
    given = request.max_positions is not None
    check_positions(spec, None if given else spec.sources.get("position.max_positions"))
    field = "checkpoint" if request.checkpoint is not None else "hf_config" if request.hf_config else "preset"
    check_memory(spec, seeded=request.checkpoint is None, field=field, eager=eager)
    check_tokenizer(request.checkpoint)
    if request.checkpoint is not None:  # its tensors' names, shapes and shards, from the headers alone (no values)
        from ropeexport.decoder.checkpoint import CheckpointWeights

        CheckpointWeights(spec, request.checkpoint)
