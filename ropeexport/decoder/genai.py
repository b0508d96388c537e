"""The onnxruntime-genai package of a decoder: ``genai_config.json`` beside the model, and the checkpoint's tokenizer.

onnxruntime-genai (0.18, ``og.Model(folder)``) reads the model's I/O names from the config: ours are the Optimum /
onnxruntime-genai ones (``decoder.export``), so the exported graph loads as it is. Its ``type`` is the model type
where onnxruntime-genai knows it (llama, mistral, qwen2, phi3) and its generic ``decoder`` otherwise (gpt_neox,
gptj, bloom): the graph computes every position itself from ``position_ids``, which onnxruntime-genai feeds as
cumsum(attention_mask) - 1. In the ``gqa`` form past and present are one buffer of max_length slots
(``past_present_share_buffer`` true: GroupQueryAttention writes the new keys in place, and the graph reads the cached
length from the mask); in the ``fused``, ``decomposed`` and ``tensorrt`` forms the cache grows by concatenation into
a separate present (false).

M-RoPE decoders (the Qwen-VL text models, position_ids [3, batch, seq]): onnxruntime-genai's generic ``decoder``
feeds [batch, seq] (ONNX Runtime: "Invalid rank for input: position_ids Got: 2 Expected: 3"), and its ``qwen2_5_vl``
type without a pipeline is its multimodal model, which wants vision and embedding models beside. Its Qwen-VL pipeline
model does feed [3, batch, seq] (``Qwen2VLPositionInputs``: text takes the same position on the three axes, decode
steps add rope_deltas): the config names the type (``MROPE_TYPES``) and the model as the pipeline's one stage, with no
vision pipeline, so a prompt is text only (measured with 0.18.0: the same greedy tokens as ``ropeexport generate``).

The checkpoint's tokenizer files are checked before anything is written (``check_tokenizer``): ``tokenizer.json``
loaded by the ``tokenizers`` library (what ``ropeexport generate --prompt`` reads it with), the other JSON files
parsed strictly, ``merges.txt`` as UTF-8 text. A file that does not read is a one-line error naming it, not a
package that fails later; links are followed within the checkpoint's own tree only (``checkpoint.checkpoint_file``).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ropeexport.decoder.checkpoint import checkpoint_file
from ropeexport.decoder.export import cache_names
from ropeexport.decoder.spec import DecoderSpec
from ropeexport.decoder.weights import cache_shapes, geometry
from ropeexport.errors import CheckpointError, SpecError
from ropeexport.forms import FORMS
from ropeexport.inputs import check_regular_file, read_json, read_text

CONFIG = "genai_config.json"
KNOWN_TYPES = ("llama", "mistral", "qwen2", "phi3")
# M-RoPE decoders -> the onnxruntime-genai type whose pipeline feeds position_ids [3, batch, seq] (0.18 knows no
# qwen2_vl type; Qwen2-VL's text model rotates as Qwen2.5-VL's, and text-only positions are the same)
MROPE_TYPES = {"qwen2_vl_text": "qwen2_5_vl", "qwen2_5_vl_text": "qwen2_5_vl", "qwen3_vl_text": "qwen3_vl"}
# What onnxruntime-genai's tokenizer reads from a Hugging Face checkpoint, copied when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")  # fmt: skip
JSON_FILES = ("tokenizer_config.json", "special_tokens_map.json", "vocab.json", "added_tokens.json")
# tokenizer.json of a 256k-word vocabulary (Gemma's) is about 34 MB; the other files are smaller.
MAX_TOKENIZER_BYTES = 256 * 2**20


def _token(config: Mapping[str, Any], key: str, vocab: int) -> int | list[int] | None:
    """A special token id from the config when it lies in the vocabulary (a list keeps its valid members)."""
    value = config.get(key)
    if isinstance(value, list):
        kept = [v for v in value if isinstance(v, int) and 0 <= v < vocab]
        return kept or None
    return value if isinstance(value, int) and 0 <= value < vocab else None


def unservable(spec: DecoderSpec) -> str:
    """Why onnxruntime-genai cannot serve this decoder ("" when it can): its genai_config.json says one head
    geometry and one [KV, head_size] cache for every layer (Gemma 4's full layers have their own head_dim; a latent
    layer's cache is keys nope + rope wide, values v_head_dim: allocated wrong, so refused).
    """  # noqa: D205
    # any latent layer by its kind, not only by its widths: they may agree by chance (qk_nope_head_dim 0, values as
    # wide as the rope slice), and onnxruntime-genai was never run on latent attention
    latent = next((i for i, layer in enumerate(spec.layers) if layer.attention.kind == "latent"), None)
    if latent is not None:
        return (f"onnxruntime-genai caches every key and value [KV, head_size] of one width; layer {latent}'s latent "
                "attention caches keys qk_nope_head_dim + qk_rope_head_dim wide and values v_head_dim (or its latent)")
    reading = [i for i, layer in enumerate(spec.layers) if layer.attention.kv_from is not None]
    if reading:  # its past_key_names / present_key_names pattern is fed and fetched for every layer index
        return (f"onnxruntime-genai feeds and fetches a cache pair past_key_values.%d / present.%d for each of "
                f"num_hidden_layers layers; layers {reading[0]}-{reading[-1]} read an earlier layer's keys and values "
                "and have none (Gemma 4's shared key/value layers)")  # fmt: skip
    shapes = {geometry(spec, i) for i in range(spec.num_layers)}  # each layer's own (onnxruntime-genai takes one)
    if len(shapes) != 1:
        return f"onnxruntime-genai takes one head geometry for every layer, got {sorted(shapes)}"
    _, KV, d = shapes.pop()
    odd = next((i for i in range(spec.num_layers) if set(cache_shapes(spec, i)) != {(KV, d)}), None)
    if odd is not None:
        return (f"onnxruntime-genai caches [KV, head_size] = [{KV}, {d}] for every key and value; layer {odd}'s cache "
                f"is (heads, width) {list(cache_shapes(spec, odd))}")
    return ""


def genai_config(spec: DecoderSpec, config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``genai_config.json`` of a decoder: greedy search, its sizes and I/O names, its context length."""
    why = unservable(spec)
    if why:
        raise SpecError("layers", why)
    H, KV, d = geometry(spec, 0)
    past_key, past_value, present_key, present_value = (name.replace("0", "%d") for name in cache_names(0))
    vocab = spec.vocab_size
    eos, pad = _token(config, "eos_token_id", vocab), _token(config, "pad_token_id", vocab)
    bos = _token(config, "bos_token_id", vocab)
    model: dict[str, Any] = {
        **({"bos_token_id": bos} if bos is not None else {}),  # it takes a number or nothing, never null
        "context_length": spec.position_spec().max_positions,
        # onnxruntime-genai requires an eos inside the vocabulary: without one (a shrunk vocabulary), the pad id or 0
        # stands in, and generation stops there
        "eos_token_id": eos if eos is not None else (pad if pad is not None else 0),
        "pad_token_id": pad if pad is not None else 0,
        "type": _genai_type(spec),
        "vocab_size": vocab,
        "decoder": {
            # 0: ONNX Runtime's own count, one thread per physical core. Unset, onnxruntime-genai 0.18 takes half the
            # logical CPUs (at most 16), assuming two hardware threads a core: on a machine without them (this 2-vCPU
            # host) it runs on half the cores: decode about 1.6x and prefill 2x slower (docs/status/speed.md)
            "session_options": {"log_id": "onnxruntime-genai", "provider_options": [], "intra_op_num_threads": 0},
            "filename": "model.onnx",
            "head_size": d,
            "hidden_size": spec.hidden_size,
            "num_attention_heads": H,
            "num_hidden_layers": spec.num_layers,
            "num_key_value_heads": KV,
            "inputs": {
                "input_ids": "input_ids",
                "attention_mask": "attention_mask",
                "position_ids": "position_ids",
                "past_key_names": past_key,
                "past_value_names": past_value,
            },  # fmt: skip
            "outputs": {"logits": "logits", "present_key_names": present_key, "present_value_names": present_value},
        },
    }
    if not spec.positions.one_axis:  # its Qwen-VL pipeline: the model as the one stage (module docstring)
        names = [n for i in range(spec.num_layers) for n in cache_names(i)]
        stage = {"filename": "model.onnx", "run_on_prompt": True, "run_on_token_gen": True,
                 "inputs": ["input_ids", "attention_mask", "position_ids", *(n for n in names if n.startswith("past"))],
                 "outputs": ["logits", *(n for n in names if n.startswith("present"))]}  # fmt: skip
        model["decoder"]["pipeline"] = [{"decoder": stage}]
    shared = FORMS[spec.graph].shared_buffer
    search = {"do_sample": False, "num_beams": 1, "num_return_sequences": 1, "max_length": model["context_length"],
              "min_length": 0, "past_present_share_buffer": shared, "top_k": 1, "top_p": 1.0, "temperature": 1.0,
              "repetition_penalty": 1.0, "length_penalty": 1.0, "no_repeat_ngram_size": 0, "diversity_penalty": 0.0,
              "early_stopping": True}  # fmt: skip
    return {"model": model, "search": search}


def _genai_type(spec: DecoderSpec) -> str:
    """onnxruntime-genai's model type: its own where it knows it, its generic decoder, or its Qwen-VL pipeline's."""
    if spec.positions.one_axis:
        return spec.model_type if spec.model_type in KNOWN_TYPES else "decoder"
    if spec.model_type not in MROPE_TYPES:
        raise SpecError("model_type", f"onnxruntime-genai feeds position_ids [3, batch, seq] only to its Qwen-VL "
                        f"types ({', '.join(MROPE_TYPES)}); {spec.model_type!r} is not one")  # fmt: skip
    return MROPE_TYPES[spec.model_type]


def tokenizer_files(checkpoint: str | Path | None) -> dict[str, Path]:
    """{name: path} of the checkpoint's tokenizer files present (links followed within its tree; a link leaving it or
    a file that is not regular is a CheckpointError naming it).
    """  # noqa: D205
    if checkpoint is None:
        return {}
    found = {name: checkpoint_file(Path(checkpoint), name) for name in TOKENIZER_FILES}
    return {name: path for name, path in found.items() if path is not None}


def check_tokenizer(checkpoint: str | Path | None) -> list[str]:
    """The names of the checkpoint's tokenizer files, after reading each as what it is (module doc); a file that does
    not read is a CheckpointError naming it.
    """  # noqa: D205
    files = tokenizer_files(checkpoint)
    try:
        for name, path in files.items():
            if name == "tokenizer.json":
                _tokenizer_json(read_text(path, name, MAX_TOKENIZER_BYTES))
            elif name in JSON_FILES:
                if not isinstance(read_json(path, name, MAX_TOKENIZER_BYTES), dict):
                    raise SpecError(name, "is not a JSON object")
            elif name == "merges.txt":
                read_text(path, name, MAX_TOKENIZER_BYTES)
            else:  # tokenizer.model: sentencepiece's protobuf, read by onnxruntime-genai only
                check_regular_file(path, name, MAX_TOKENIZER_BYTES)
    except SpecError as error:
        raise CheckpointError(f"{error.field}: {error.message} (fix it, or remove it to build without it)") from None
    return list(files)


def _tokenizer_json(text: str) -> None:
    """SpecError naming tokenizer.json when ``tokenizers`` cannot load it (strict JSON when it is not installed)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the library serving reads it with is absent: at least it must be JSON
        from ropeexport.inputs import loads_json

        loads_json(text, "tokenizer.json")
        return
    try:
        Tokenizer.from_str(text)
    except Exception as exc:  # noqa: BLE001 (tokenizers raises its own exception type for a malformed file)
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SpecError("tokenizer.json", f"cannot be read by tokenizers: {first}") from None


def copy_tokenizer(checkpoint: str | Path | None, folder: Path) -> list[str]:
    """The checkpoint's tokenizer files copied into ``folder`` (``check_tokenizer`` read them first); the names."""
    files = tokenizer_files(checkpoint)
    for name, path in files.items():
        shutil.copyfile(path, folder / name)
    return list(files)
