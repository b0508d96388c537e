"""A random-weight checkpoint of a real model's config, written straight to safetensors shards, one tensor at a time.

    python tools/write_checkpoint.py llama-3.2-1b /tmp/ckpt/llama-3.2-1b
    python tools/write_checkpoint.py llama-3.1-8b /tmp/ckpt/llama-3.1-8b --layers 2
    python tools/write_checkpoint.py qwen3-30b-a3b /tmp/ckpt/qwen3-30b-a3b --layers 6   # all 128 experts a layer
    python tools/write_checkpoint.py qwen3-4b /tmp/ckpt/q --set hidden_size=64 --set vocab_size=300   # tiny (tests)
    python tools/write_checkpoint.py qwen3-vl-4b /tmp/ckpt/vl --set vision_config.depth=1   # a wrapper: --set and
        --layers name its text model's fields; vision_config.FIELD its vision tower's

What a benchmark needs instead of a download: the real sizes (``MODELS``: the config fields of the released
config.json, made into a config by transformers' ``AutoConfig.for_model`` and saved as it writes it), bf16 tensors
under the names and shapes transformers' own model of that config has (read from the model built on the meta
device: no memory), sharded as transformers shards (``model-0000i-of-0000n.safetensors`` past ``--shard-gb``, with
``model.safetensors.index.json``), and a small word-level tokenizer (the onnxruntime-genai builder saves one; ids
past its words decode to nothing).

Values: norm weights (and Gemma 4's layer scalars) 1, everything else normal with std 0.02 (the models'
``initializer_range``: activations stay of unit scale through any depth), drawn per tensor by torch's generator seeded
with (seed, tensor index) in blocks of rows and rounded once to bf16 (to nearest even): the same seed writes the same
bytes. Memory: one block of rows (64 MiB of float32) at a time, whatever the model's size.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}  # fmt: skip
# name -> (model_type, the released config.json's fields that matter)
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-3.2-1b": ("llama", {
        "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_parameters": {**_LLAMA3, "factor": 32.0}, "tie_word_embeddings": True,
        "bos_token_id": 128000, "eos_token_id": 128001}),
    "llama-3.1-8b": ("llama", {
        "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_parameters": {**_LLAMA3, "factor": 8.0}, "tie_word_embeddings": False,
        "bos_token_id": 128000, "eos_token_id": 128001}),
    "qwen3-4b": ("qwen3", {
        "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "tie_word_embeddings": True, "bos_token_id": 151643, "eos_token_id": 151645, "use_sliding_window": False}),
    # Qwen3-VL-4B-Instruct as released (a qwen3_vl wrapper): the text model under text_config (transformers 5.23 reads
    # its rope_scaling and rope_theta as rope_parameters), the whole vision tower beside it (ropeexport passes it
    # over; the builder's qwen3_vl text model too). Qwen3VLTextConfig's defaults are the 8B-like 4096/32-layer
    # ones, so every text field is given.
    "qwen3-vl-4b": ("qwen3_vl", {
        "text_config": {
            "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                "mrope_interleaved": True},
            "bos_token_id": 151643, "eos_token_id": 151645},
        "vision_config": {
            "depth": 24, "hidden_size": 1024, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4096,
            "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
            "out_hidden_size": 2560, "num_position_embeddings": 2304, "deepstack_visual_indexes": [5, 11, 17]},
        "tie_word_embeddings": True, "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_end_token_id": 151653}),
    # Gemma 4 31B as released (a gemma4 wrapper, Gemma4ForConditionalGeneration: onnxruntime-genai's builder takes
    # Gemma 4 by that class alone): the text model under text_config (models/gemma-4-31b.toml: its released
    # text_config), 5 sliding layers then 1 full, ten times, the full ones of head_dim 512, 4 key/value heads, values
    # off the keys; beside it a vision tower of Gemma4VisionConfig's defaults (not the 31B's own: ropeexport and the
    # builder pass it over) and no audio tower (the 31B has none). Gemma's ids (bos 2, eos 1, pad 0:
    # Gemma4TextConfig's defaults). ``--layers N`` keeps the first N layer types (N a multiple of 6 ends on a full
    # layer, as transformers forces the last one).
    "gemma-4-31b": ("gemma4", {
        "text_config": {
            "vocab_size": 262144, "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 60,
            "num_attention_heads": 32, "num_key_value_heads": 16, "num_global_key_value_heads": 4, "head_dim": 256,
            "global_head_dim": 512, "attention_k_eq_v": True, "sliding_window": 1024,
            "max_position_embeddings": 262144,
            "layer_types": ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(60)],
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                   "rope_theta": 1000000.0}},
            "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "final_logit_softcapping": 30.0,
            "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "enable_moe_block": False,
            "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0},
        "vision_config": {}, "audio_config": None, "tie_word_embeddings": True}),
    # Qwen3-30B-A3B's released config.json (transformers 5.23 reads num_experts as num_local_experts and defaults
    # norm_topk_prob to false and theta to 1e4: both given; intermediate_size is its dense layers', none here).
    "qwen3-30b-a3b": ("qwen3_moe", {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "tie_word_embeddings": False,
        "bos_token_id": 151643, "eos_token_id": 151645, "use_sliding_window": False}),
    # DeepSeek-V2-Lite's released config.json (deepseek-ai/DeepSeek-V2-Lite), its keys as it says them (rope_scaling
    # under the 4.x key "type", rope_theta at the top; its remote code's keys transformers does not read kept):
    # latent attention without a query LoRA, YaRN x40 with mscale 0.707 pairs, V2's router (softmax over 64 experts,
    # greedy top-6, not renormalized), two shared experts, layer 0 dense.
    "deepseek-v2-lite": ("deepseek_v2", {
        "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
        "q_lora_rank": None, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "n_group": 1, "topk_group": 1,
        "topk_method": "greedy", "routed_scaling_factor": 1.0, "norm_topk_prob": False, "first_k_dense_replace": 1,
        "moe_layer_freq": 1, "scoring_func": "softmax", "aux_loss_alpha": 0.001, "seq_aux": True,
        "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
        "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                         "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1},
        "tie_word_embeddings": False, "bos_token_id": 100000, "eos_token_id": 100001}),
    # DeepSeek-V2-Lite's widths at deepseek_v3 (kept from before deepseek_v2 was built: its figures in
    # tools/figures/sizes.md): latent attention (no query LoRA), YaRN and shared experts as V2-Lite's, V3's router
    # (sigmoid scores plus a correction bias, here one group: plain top-6) in place of V2's.
    "deepseek-v2-lite-v3": ("deepseek_v3", {
        "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
        "q_lora_rank": None, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "n_group": 1, "topk_group": 1,
        "routed_scaling_factor": 1.0, "norm_topk_prob": False, "first_k_dense_replace": 1,
        "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_interleave": True,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "mscale": 0.707,
                            "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                            "beta_slow": 1.0},
        "tie_word_embeddings": False, "bos_token_id": 100000, "eos_token_id": 100001}),
}  # fmt: skip
STD = 0.02
BLOCK_BYTES = 64 * 2**20  # float32 bytes drawn at once
WORDS = 256  # the tokenizer's words (ids 0-255 read as "t0".."t255"; bos/eos are the config's ids when below)


def config_of(model: str, layers: int | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """transformers' config of ``model`` (``MODELS``), ``layers`` deep, other fields replaced by ``overrides``."""
    import transformers

    if model not in MODELS:
        raise SystemExit(f"model: must be one of {', '.join(MODELS)}, got {model!r}")
    model_type, fields = MODELS[model]
    fields = {**fields}
    wrapped = "text_config" in fields  # a wrapper (qwen3_vl): depth and overrides are its text model's
    text = fields
    if wrapped:
        text = fields["text_config"] = {**fields["text_config"]}
    for key, value in (overrides or {}).items():  # "vision_config.depth=1": a field of a sub-config
        sub, _, name = key.rpartition(".")
        if sub:
            fields[sub] = {**fields.get(sub, {}), name: value}
        else:
            (fields if key in fields else text)[key] = value
    if layers is not None:
        text["num_hidden_layers"] = layers
        if "layer_types" in text:  # one type a layer (Gemma 4): the first ``layers``
            text["layer_types"] = text["layer_types"][:layers]
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):  # a shrunk vocabulary (a tiny model) has no such ids
        if text.get(key) is not None and text[key] >= text["vocab_size"]:
            text[key] = None
    return transformers.AutoConfig.for_model(model_type, **fields, dtype="bfloat16")


def _text(config: Any) -> Any:
    """The text model's config: a wrapper's ``text_config`` (a sub-config of its class), else ``config`` (a text
    config's own ``text_config``, where it has one, is itself or a view of it).
    """  # noqa: D205
    return config.text_config if "text_config" in (getattr(config, "sub_configs", None) or {}) else config


def tensors_of(config: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor transformers saves for ``config``, in its state dict's order (no memory: the
    model is built on the meta device). The tied head is not saved, as save_pretrained leaves it out. Sets the
    config's ``architectures`` to the model's class, as a saved model's config.json has it.
    """  # noqa: D205
    import torch
    import transformers

    auto = (transformers.AutoModelForImageTextToText if _text(config) is not config else
            transformers.AutoModelForCausalLM)  # a wrapper: its ForConditionalGeneration, as it is saved  # fmt: skip
    with torch.device("meta"):
        model = auto.from_config(config)
    config.architectures = [type(model).__name__]  # as a saved model's config.json names it (the builder reads it)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    out: list[tuple[str, tuple[int, ...]]] = []
    for name, t in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        out += _saved(name, tuple(t.shape))
    return out


def _saved(name: str, shape: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) as save_pretrained writes the tensor: transformers 5 fuses a mixture's experts in memory only
    (``experts.gate_up_proj`` [E, 2 x inner, hidden], ``experts.down_proj`` [E, hidden, inner]) and saves each
    expert's gate, up and down apart (``experts.{e}.gate_proj.weight`` [inner, hidden], read from a tiny qwen3_moe and
    deepseek_v3 saved by 5.23); every other tensor as it is.
    """  # noqa: D205
    prefix, _, last = name.rpartition(".")
    if not prefix.endswith(".experts") or last not in ("gate_up_proj", "down_proj") or len(shape) != 3:
        return [(name, shape)]
    experts, rows, cols = shape
    if last == "down_proj":
        return [(f"{prefix}.{e}.down_proj.weight", (rows, cols)) for e in range(experts)]
    return [(f"{prefix}.{e}.{part}_proj.weight", (rows // 2, cols)) for e in range(experts) for part in ("gate", "up")]


def _values(name: str, shape: tuple[int, ...], seed: int) -> Iterator[bytes]:
    """bf16 bytes of one tensor, in blocks of rows (module doc: norms 1, else N(0, 0.02^2))."""
    import torch

    if name.endswith(("norm.weight", "layer_scalar")):  # Gemma 4's scalar of a layer's residual stream: 1 as a norm
        yield torch.ones(shape, dtype=torch.bfloat16).view(torch.int16).numpy().tobytes()
        return
    generator = torch.Generator().manual_seed(seed)
    row = math.prod(shape[1:]) if len(shape) > 1 else 1
    rows = shape[0] if shape else 1
    step = max(1, BLOCK_BYTES // (4 * row))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        block = torch.randn((n, row), generator=generator, dtype=torch.float32).mul_(STD).to(torch.bfloat16)
        yield block.view(torch.int16).numpy().tobytes()


def write_checkpoint(model: str, folder: Path, layers: int | None = None, overrides: dict[str, Any] | None = None,
                     seed: int = 0, shard_gb: float = 5.0, tokenizer: bool = True) -> dict[str, Any]:  # fmt: skip
    """Write the checkpoint (module doc) into ``folder`` (created; must not hold one); what was written."""
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.glob("*.safetensors")) or (folder / "config.json").exists():
        raise SystemExit(f"folder: {str(folder)!r} holds a checkpoint already; give an empty folder")
    config = config_of(model, layers, overrides)
    tensors = tensors_of(config)
    limit = int(shard_gb * 1e9)
    shards: list[list[tuple[int, str, tuple[int, ...]]]] = [[]]
    size = 0
    for index, (name, shape) in enumerate(tensors):
        nbytes = 2 * math.prod(shape)
        if shards[-1] and size + nbytes > limit:
            shards.append([])
            size = 0
        shards[-1].append((index, name, shape))
        size += nbytes
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])  # fmt: skip
    weight_map, total = {}, 0
    for file, shard in zip(names, shards, strict=True):
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for _, name, shape in shard:
            nbytes = 2 * math.prod(shape)
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # safetensors pads its header to 8 bytes
        with open(folder / file, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for index, name, shape in shard:
                for block in _values(name, shape, seed * 1_000_003 + index):
                    f.write(block)
        total += offset
    if len(shards) > 1:
        index_text = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index_text, indent=2) + "\n")
    config.save_pretrained(folder)
    if tokenizer:
        _tokenizer(config, folder)
    parameters = sum(math.prod(shape) for _, shape in tensors)
    return {"model": model, "folder": str(folder), "parameters": parameters, "bytes": total, "files": names,
            "layers": _text(config).num_hidden_layers}  # fmt: skip


def _tokenizer(config: Any, folder: Path) -> None:
    """A word-level tokenizer of ``WORDS`` words (module doc), saved as transformers saves a fast tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(min(WORDS, _text(config).vocab_size))}
    unk = next(iter(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=unk)
    fast.save_pretrained(str(folder))


def main(argv: list[str] | None = None) -> int:
    """Command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("model", help=f"one of {', '.join(MODELS)}")
    p.add_argument("folder", type=Path)
    p.add_argument("--layers", type=int, help="keep this many layers (default: the model's)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="replace a config field (JSON)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shard-gb", type=float, default=5.0, help="largest shard, in GB (10^9 bytes)")
    p.add_argument("--no-tokenizer", dest="tokenizer", action="store_false")
    args = p.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value
    written = write_checkpoint(args.model, args.folder, args.layers, overrides, args.seed, args.shard_gb,
                               args.tokenizer)  # fmt: skip
    print(json.dumps(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
