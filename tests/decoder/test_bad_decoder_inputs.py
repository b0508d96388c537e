"""Bad decoder input: each row runs the real CLI and requires exit 2, one stderr line naming the key or tensor, no
traceback, no warning beside it, and nothing written (``--out`` absent). Every row runs under
ROPEEXPORT_MEMORY_LIMIT=8G (``MEMORY``) so the memory rows refuse alike on every machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from ropeexport.cli import main  # noqa: E402
from ropeexport.report.views import DecoderReport, read_report
from tests.decoder.tiny import checkpoint

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402

DECODER = ["build", "--artifact", "decoder"]


def _edit(folder: Path, change: Callable[[dict], None]) -> None:
    tensors = load_file(str(folder / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _ckpt(tmp: Path, change: Callable[[dict], None] | None = None) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama")
    if change is not None:
        _edit(folder, change)
    return ["--checkpoint", str(folder)]


def _sharded(tmp: Path, rewrite: Callable[[dict], None]) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama", max_shard_size="20KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    rewrite(index["weight_map"])
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return ["--checkpoint", str(folder)]


def _config(tmp: Path, **fields: object) -> list[str]:
    config = {"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 1,
              "intermediate_size": 48, "vocab_size": 64, "max_position_embeddings": 128}  # fmt: skip
    path = tmp / "config.json"
    path.write_text(json.dumps(config | fields))
    return ["--hf-config", str(path)]


# A tiny Gemma 4 text config's own keys (with _config's sizes: one full layer, its head_dim 16 of global_head_dim)
GEMMA4 = {"model_type": "gemma4_text", "num_key_value_heads": 2, "head_dim": 8, "global_head_dim": 16,
          "sliding_window": 4, "hidden_size_per_layer_input": 0, "layer_types": ["full_attention"],
          "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                              "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                 "rope_theta": 1e6}}}  # fmt: skip
GEMMA4_MOE = {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 16}
GEMMA4_TWO = {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "global_head_dim": None}
# A tiny Mistral Large 4 text config's own keys (with _config's sizes, 2 dense layers): no query LoRA, index_topk 128
LARGE4 = {"model_type": "mistral_large4_text", "num_hidden_layers": 2, "num_key_value_heads": 4, "kv_lora_rank": 16,
          "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 4,
          "num_experts_per_tok": 2, "moe_intermediate_size": 16, "index_topk": 128,
          "mlp_layer_types": ["dense", "dense"], "no_rope_layers": [1, 1],
          "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                              "original_max_position_embeddings": 32, "attention_factor": 1.0}}  # fmt: skip
# A tiny DeepSeek V3 config's own keys (with _config's sizes): 8 experts in 2 groups, 2 a token, a query LoRA.
DEEPSEEK = {"model_type": "deepseek_v3", "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 16,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": 8,
            "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 0,
            "moe_intermediate_size": 16}  # fmt: skip
# DeepSeek V3.2's: DeepSeek V3's with its indexer (2 heads 16 wide, the best 4 keys)
DEEPSEEK_V32 = {**DEEPSEEK, "model_type": "deepseek_v32", "index_topk": 4, "index_head_dim": 16, "index_n_heads": 2}
# A tiny gpt-oss config's own keys (with _config's sizes): 4 experts, 2 a token, its YaRN written out.
OSS = {"model_type": "gpt_oss", "num_local_experts": 4, "num_experts_per_tok": 2, "num_key_value_heads": 2,
       "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 150000.0,
                           "original_max_position_embeddings": 32}}  # fmt: skip


# A tiny Qwen3-MoE config's own keys (with _config's sizes): 4 experts 24 wide, 2 a token.
QMOE = {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
        "num_key_value_heads": 2}  # fmt: skip
# A tiny Ministral 3 config (with _config's sizes): YaRN x4 over 32 positions, the query scale's beta 0.1.
MINISTRAL3 = {"model_type": "ministral3", "rope_parameters": {
    "rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6, "original_max_position_embeddings": 32,
    "llama_4_scaling_beta": 0.1}}  # fmt: skip


def _ministral3(tmp: Path, **params: object) -> list[str]:
    rope = {k: v for k, v in {**MINISTRAL3["rope_parameters"], **params}.items() if v is not None}  # type: ignore[dict-item]
    return _config(tmp, **(MINISTRAL3 | {"rope_parameters": rope}))


# A tiny Llama 4 text config (tests/decoder/tiny.py's "llama4" sizes): chunked RoPE layers, a NoPE one, experts.
LLAMA4 = {"model_type": "llama4_text", "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8,
          "intermediate_size_mlp": 48, "num_local_experts": 4, "num_experts_per_tok": 1,
          "interleave_moe_layer_step": 2, "attention_chunk_size": 8, "floor_scale": 4, "attn_scale": 0.1}  # fmt: skip


def _llama4(tmp: Path, **fields: object) -> list[str]:
    return _config(tmp, **{k: v for k, v in (LLAMA4 | fields).items() if v is not None})


def _no_config(tmp: Path) -> str:
    (tmp / "empty").mkdir()
    return str(tmp / "empty")


def _without_weights(tmp: Path) -> str:
    (tmp / "ckpt" / "model.safetensors").unlink()
    return str(tmp / "ckpt")


def _pop(key: str) -> Callable[[dict], None]:
    return lambda t: t.pop(key)


REV = "0123456789abcdef0123456789abcdef01234567"


def _cache(tmp: Path, shards: bool = True) -> Path:
    """The checkpoint as the transformers cache lays it out: ``models--org--tiny/snapshots/REV/<file>`` are relative
    links to ``../../blobs/<sha256>``; the snapshot folder.
    """  # noqa: D205
    folder = checkpoint(tmp / "saved", "llama", max_shard_size="20KB" if shards else None)
    repo = tmp / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / REV
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in folder.iterdir():
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        shutil.copyfile(file, repo / "blobs" / digest)
        (snapshot / file.name).symlink_to(Path("../../blobs") / digest)
    return snapshot


SHARD = "model-00002-of-00005.safetensors"


def _relinked(tmp: Path, target: Callable[[Path], Path], name: str = SHARD, shards: bool = True) -> list[str]:
    """The cache layout with one file's link replaced by a link to ``target(tmp)``."""
    snapshot = _cache(tmp, shards)
    (snapshot / name).unlink(missing_ok=True)
    (snapshot / name).symlink_to(target(tmp))
    return ["--checkpoint", str(snapshot)]


def _elsewhere(tmp: Path) -> Path:
    """A valid shard outside the repository folder, reached by a relative link (``../../../../elsewhere``)."""
    (tmp / "elsewhere").mkdir()
    shutil.copyfile(tmp / "saved" / SHARD, tmp / "elsewhere" / SHARD)
    return Path("../../../../elsewhere") / SHARD


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "hub" / "models--org--tiny" / "blobs" / "fifo")
    return Path("../../blobs/fifo")


def _shard_bytes(tmp: Path, data: Callable[[bytes], bytes]) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama", max_shard_size="20KB")
    shard = folder / SHARD
    shard.write_bytes(data(shard.read_bytes()))
    return ["--checkpoint", str(folder)]


def _index_text(tmp: Path, text: str) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama", max_shard_size="20KB")
    (folder / "model.safetensors.index.json").write_text(text)
    return ["--checkpoint", str(folder)]


def _ckpt_config(tmp: Path, **fields: object) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | fields))
    return ["--checkpoint", str(folder)]


def _tokenizer(tmp: Path, text: str) -> list[str]:
    folder = checkpoint(tmp / "ckpt", "llama")
    (folder / "tokenizer.json").write_text(text)
    return ["--checkpoint", str(folder)]


MEMORY = "8G"
LIMITS = {"checkpoint past the memory limit": "100M", "memory limit not a size": "lots"}
LLAMA_8B = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}  # fmt: skip


Q0 = "model.layers.0.self_attn.q_proj.weight"
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("missing tensor", lambda t: _ckpt(t, _pop("model.layers.1.mlp.up_proj.weight")),
     "checkpoint: tensor 'model.layers.1.mlp.up_proj.weight' is missing"),
    ("extra tensor", lambda t: _ckpt(t, lambda x: x.update({"model.layers.0.adapter.weight": torch.ones(2)})),
     "checkpoint: tensor 'model.layers.0.adapter.weight' is not a weight"),
    ("mis-shaped tensor", lambda t: _ckpt(t, lambda x: x.update({Q0: torch.ones(32, 31)})),
     f"checkpoint: tensor '{Q0}' has shape [32, 31], the config implies [32, 32]"),
    ("non-finite tensor", lambda t: _ckpt(t, lambda x: x[Q0].__setitem__((0, 0), float("nan"))),
     f"checkpoint: tensor '{Q0}' holds 1 non-finite value"),
    ("integer tensor", lambda t: _ckpt(t, lambda x: x.update({Q0: torch.ones(32, 32, dtype=torch.int32)})),
     f"checkpoint: tensor '{Q0}' is torch.int32"),
    ("shard outside the folder", lambda t: _sharded(t, lambda m: m.update({Q0: "../../etc/passwd"})),
     "checkpoint: model.safetensors.index.json: weight_map['model.layers.0.self_attn.q_proj.weight'] = "
     "'../../etc/passwd' points outside"),
    ("shard file absent", lambda t: _sharded(t, lambda m: m.update({Q0: "model-9.safetensors"})),
     "no such file in the folder"),
    ("no weights file", lambda t: _ckpt(t)[:1] + [_without_weights(t)], "holds neither model.safetensors"),
    ("sizes with a checkpoint", lambda t: [*_ckpt(t), "--num-layers", "1"], "--num-layers: size overrides"),
    ("unknown architecture", lambda t: _config(t, model_type="falcon"), "model_type: 'falcon' has no decoder"),
    ("mixture of experts", lambda t: _config(t, num_local_experts=8), "num_local_experts: is not supported"),
    ("gpt-oss without its expert count", lambda t: _config(t, **(OSS | {"num_local_experts": None})),
     "num_local_experts: missing: a mixture of experts needs num_local_experts or num_experts"),
    ("gpt-oss choosing more experts than it has", lambda t: _config(t, **(OSS | {"num_experts_per_tok": 5})),
     "num_experts_per_tok: must be at most the experts (4), got 5"),
    ("gpt-oss with a negative clamp", lambda t: _config(t, **OSS, swiglu_limit=-7.0),
     "swiglu_limit: must be a positive number, got -7.0"),
    ("DeepSeek V3's kv_lora_rank without qk_rope_head_dim",
     lambda t: _config(t, **(DEEPSEEK | {"qk_rope_head_dim": None})), "config.json: qk_rope_head_dim: missing"),
    ("DeepSeek V3's n_group not dividing its experts", lambda t: _config(t, **(DEEPSEEK | {"n_group": 3})),
     "config.json: n_group: must divide n_routed_experts (8), got 3"),
    ("DeepSeek V3 in the tensorrt form (latent attention's keys and values differ in width)",
     lambda t: [*_config(t, **DEEPSEEK), "--graph", "tensorrt"],
     "graph: the tensorrt form is not built for latent attention"),
    ("DeepSeek V3 in the gqa form with keys 12 wide",
     lambda t: [*_config(t, **(DEEPSEEK | {"qk_nope_head_dim": 4})), "--graph", "gqa"],
     "graph: the gqa form needs qk_nope_head_dim + qk_rope_head_dim a multiple of 8 (GroupQueryAttention's head "
     "size), got 12; use fused or decomposed"),
    ("the latent cache of a model without latent attention", lambda t: [*_config(t), "--latent-cache"],
     "latent_cache: is latent attention's cache; llama's layers have none"),
    ("DeepSeek V3's latent cache in the fused form",
     lambda t: [*_config(t, **DEEPSEEK), "--latent-cache", "--graph", "fused"],
     "latent_cache: is built in the decomposed form with weights in the dtype"),
    ("Mistral Large 4's kv_source_layers pointing forward", lambda t: _config(t, **LARGE4, kv_source_layers=[1, 1]),
     "config.json: kv_source_layers: entry 0 must name layer 0 or an earlier layer that owns its cache"),
    ("Mistral Large 4's no_rope_layers not one per layer", lambda t: _config(t, **(LARGE4 | {"no_rope_layers": [1]})),
     "config.json: no_rope_layers: holds 1 entries, the model has 2 layers"),
    ("Mistral Large 4's NoPE layer sharing with no NoPE layer before it (a KeyError in transformers)",
     lambda t: _config(t, **(LARGE4 | {"no_rope_layers": [1, 0]}), kv_source_layers=[0, 0]),
     "config.json: kv_source_layers: entry 1 (0): transformers reads the last earlier storing NoPE layer's cache"),
    ("Mistral Large 4's first indexer layer shared (no selection before it: transformers raises at run time)",
     lambda t: _config(t, **(LARGE4 | {"indexer_types": ["shared", "full"]})),
     "config.json: indexer_types: layer 0 is 'shared': a shared layer reuses the previous full indexer layer's"),
    ("Mistral Large 4 with a query LoRA", lambda t: _config(t, **LARGE4, q_lora_rank=16),
     "config.json: q_lora_rank: must be absent or null for mistral_large4_text"),
    ("DeepSeek V3.2's index_topk 0", lambda t: _config(t, **(DEEPSEEK_V32 | {"index_topk": 0})),
     "config.json: index_topk: must be an integer >= 1, got 0"),
    ("DeepSeek V3.2's indexer narrower than its rotated dims",
     lambda t: _config(t, **(DEEPSEEK_V32 | {"index_head_dim": 4})),
     "config.json: index_head_dim: must be at least qk_rope_head_dim (8): the indexer rotates its first"),
    ("DeepSeek V3.2 without the query LoRA its indexer reads",
     lambda t: _config(t, **(DEEPSEEK_V32 | {"q_lora_rank": None})), "config.json: q_lora_rank: null is not built"),
    ("DeepSeek V3.2 in the gqa form (GroupQueryAttention takes no mask to narrow)",
     lambda t: [*_config(t, **DEEPSEEK_V32), "--graph", "gqa"], "graph: the gqa form is not built with the indexer"),
    ("DeepSeek V3 without shared experts", lambda t: _config(t, **DEEPSEEK, n_shared_experts=0),
     "n_shared_experts"),
    ("gpt-oss's MXFP4 experts", lambda t: _config(t, **OSS, quantization_config={"quant_method": "mxfp4"}),
     "quantization_config: is not supported by the decoder artifact: quantized weights (gpt-oss ships MXFP4"),
    ("Qwen3-MoE choosing more experts than it has", lambda t: _config(t, **(QMOE | {"num_experts_per_tok": 5})),
     "num_experts_per_tok: must be at most the experts (4), got 5"),
    ("Qwen3-MoE with two expert counts", lambda t: _config(t, **QMOE, num_local_experts=8),
     "num_experts: contradicts num_local_experts (4 vs 8): give one expert count"),
    ("Qwen3-MoE's dense layer outside the model", lambda t: _config(t, **QMOE, mlp_only_layers=[0, 3]),
     "mlp_only_layers: names layer 3, outside the 1 layers (0 to 0)"),
    ("Qwen3-MoE's sparse step 0", lambda t: _config(t, **QMOE, decoder_sparse_step=0),
     "decoder_sparse_step: must be a positive integer, got 0"),
    ("Qwen3-MoE's norm_topk_prob not a flag", lambda t: _config(t, **QMOE, norm_topk_prob="yes"),
     "norm_topk_prob: must be true or false, got 'yes'"),
    ("Qwen3-MoE sliding on every layer", lambda t: _config(t, **QMOE, use_sliding_window=True, sliding_window=4),
     "use_sliding_window: is not built for qwen3_moe"),
    ("Gemma 4's per-layer input width not a number", lambda t: _config(t, **(GEMMA4 | {
        "hidden_size_per_layer_input": "wide"})), "hidden_size_per_layer_input: must be a whole number >= 1"),
    ("Gemma 4's per-layer table of no rows", lambda t: _config(t, **(GEMMA4 | {
        "hidden_size_per_layer_input": 4, "vocab_size_per_layer_input": 0})),
     "vocab_size_per_layer_input: must be a whole number >= 1"),
    ("Gemma 4's key/value shared by every layer", lambda t: _config(t, **GEMMA4, num_kv_shared_layers=1),
     "num_kv_shared_layers: must be a whole number from 0 to 0"),
    ("Gemma 4's shared full layer with no full layer before it",
     lambda t: _config(t, **(GEMMA4 | GEMMA4_TWO), num_kv_shared_layers=1),
     "num_kv_shared_layers: 1 leaves no layer before layer 1 of type 'full_attention'"),
    ("Gemma 4's experts without their count", lambda t: _config(t, **(GEMMA4 | GEMMA4_MOE | {"num_experts": None})),
     "num_experts: must be a whole number >= 1 with enable_moe_block, got None"),
    ("Gemma 4 choosing more experts than it has", lambda t: _config(t, **(GEMMA4 | GEMMA4_MOE | {"top_k_experts": 5})),
     "top_k_experts: must be at most num_experts (4), got 5"),
    ("Gemma 4's MLP not a whole number of experts wide",
     lambda t: _config(t, **(GEMMA4 | GEMMA4_MOE | {"moe_intermediate_size": 20})),
     "intermediate_size: 48 is not a multiple of moe_intermediate_size (20)"),
    ("Gemma 4's global_head_dim against per_layer_config",
     lambda t: _config(t, **(GEMMA4 | {"global_head_dim": 32}), per_layer_config={"0": {"head_dim": 16}}),
     "global_head_dim: (32) contradicts per_layer_config's full layers' head_dim (16)"),
    ("Gemma 4's per_layer_config on a sliding layer",
     lambda t: _config(t, **(GEMMA4 | GEMMA4_TWO), per_layer_config={"0": {"head_dim": 16}, "1": {"head_dim": 16}}),
     "per_layer_config.0: overrides sliding layer 0 ({'head_dim': 16})"),
    ("Gemma 4's last layer sliding", lambda t: _config(t, **(GEMMA4 | GEMMA4_TWO | {"layer_types": [
        "full_attention", "sliding_attention"]})), "layer_types: ends with 'sliding_attention': transformers' Gemma 4"),
    ("Ministral 3's query scale without its original length",
     lambda t: _ministral3(t, original_max_position_embeddings=None),
     "rope_parameters.original_max_position_embeddings: missing: rope_parameters.llama_4_scaling_beta (0.1) scales"),
    ("Ministral 3 without its query scale's beta", lambda t: _ministral3(t, llama_4_scaling_beta=None),
     "rope_parameters.llama_4_scaling_beta: missing: transformers' ministral3 attention multiplies the query"),
    ("Ministral 3 with a negative beta", lambda t: _ministral3(t, llama_4_scaling_beta=-0.1),
     "rope_parameters.llama_4_scaling_beta: must be a finite number >= 0 (0: no query scale), got -0.1"),
    ("Llama 4 with a chunk of 0 slots", lambda t: _llama4(t, attention_chunk_size=0),
     "attention_chunk_size: must be a positive integer, got 0"),
    ("Llama 4 with more experts a token than it has", lambda t: _llama4(t, num_experts_per_tok=5),
     "num_experts_per_tok: must be at most the experts (4), got 5"),
    ("Llama 4's chunked layers without a chunk size", lambda t: _config(t, **(LLAMA4 | {"attention_chunk_size": None})),
     "attention_chunk_size: is null while layer_types has chunked_attention layers"),
    ("Ministral 3's two context lengths disagree", lambda t: _ministral3(t, max_position_embeddings=64),
     "rope_parameters.max_position_embeddings: (64) contradicts max_position_embeddings (128)"),
    ("layer types not one per layer", lambda t: _config(t, model_type="qwen2", layer_types=["full_attention"] * 2),
     "layer_types: holds 2 entries, the model has 1 layers"),
    ("chunked attention layers", lambda t: _config(t, model_type="qwen2", layer_types=["chunked_attention"]),
     "layer_types[0]: 'chunked_attention' is not built: Llama 4's chunked attention"),
    ("no-RoPE flags not one per layer", lambda t: _config(t, model_type="smollm3", no_rope_layers=[1, 0, 1]),
     "no_rope_layers: holds 3 entries, the model has 1 layers"),
    ("layer types transformers does not read", lambda t: _config(t, layer_types=["sliding_attention"],
                                                                 sliding_window=4),
     "layer_types: not imported for 'llama' (ropeexport reads layer types for cohere2"),
    ("Cohere 2's logit scale negative", lambda t: _config(t, model_type="cohere2", sliding_window=4,
                                                          logit_scale=-0.0625),
     "logit_scale: must be a positive finite number, got -0.0625"),
    ("Cohere 2's head_dim not its width per head", lambda t: _config(t, model_type="cohere2", sliding_window=4,
                                                                     head_dim=16),
     "head_dim: (16) is not hidden_size / num_attention_heads (8): transformers' cohere2 config sets head_dim"),
    ("latent attention", lambda t: _config(t, kv_lora_rank=64), "kv_lora_rank: is not supported"),
    ("unknown activation", lambda t: _config(t, hidden_act="gelu_10"), "hidden_act: activation 'gelu_10'"),
    ("missing size", lambda t: _config(t, intermediate_size=None), "intermediate_size: missing"),
    ("width not a head multiple", lambda t: [*_config(t), "--hidden-size", "20"], "--hidden-size: must be a multiple"),
    ("decoder flag alone", lambda t: ["--checkpoint", str(t)], "--checkpoint: is a decoder flag"),
    ("another spec flag", lambda t: [*_config(t), "--theta", "5"], "theta: is not read with --artifact decoder"),
    ("bf16", lambda t: [*_config(t), "--dtype", "bf16"], "dtype: must be one of fp32, fp16"),
    # onnxruntime-genai's builder takes `-p int4`: the refusal names the flag that builds int4 (issue 43, item 13)
    ("int4 as a dtype", lambda t: [*_config(t), "--dtype", "int4"],
     "dtype: must be one of fp32, fp16; got 'int4': int4 is how the projections are stored, not a dtype: give "
     "--weight-format int4"),
    # 0 is the request's default (32), not a size a user asks for (issue 43, item 6: it built block size 32, exit 0)
    ("int4 block size 0", lambda t: [*_config(t), "--weight-format", "int4", "--block-size", "0"],
     "block_size: must be one of 16, 32, 64, 128, 256; got 0 (omit --block-size for 32)"),
    ("static-cache form", lambda t: [*_config(t), "--graph", "static-cache"], "graph: must be one of fused"),
    # a runtime asked for must run the form and the weights (its capability record): refused before anything is built
    ("a form the runtime does not run", lambda t: [*_config(t), "--runtime", "onnx-reference", "--graph", "gqa"],
     "runtime: onnx-reference does not run the gqa form"),
    ("int4 on a runtime without contrib ops", lambda t: [*_config(t), "--runtime", "trt", "--graph", "decomposed",
                                                         "--weight-format", "int4"],
     "runtime: trt does not run int4 weights"),
    ("a tolerance", lambda t: [*_config(t), "--atol", "1"], "--atol: is not read with --artifact decoder"),
    ("two artifacts", lambda t: [*_config(t), "--artifact", "block"], "artifact: decoder is built on its own"),
    ("two presets", lambda t: ["--preset", "llama-2-7b", "--preset", "mistral-7b"], "artifact: decoder takes one"),
    ("a spec-only preset", lambda t: ["--preset", "sandwich"], "--preset: 'sandwich' is a spec card"),
    ("a preset and a checkpoint", lambda t: [*_ckpt(t), "--preset", "llama-2-7b"],
     "--preset: cannot be combined with --checkpoint"),
    ("a checkpoint without config.json", lambda t: ["--checkpoint", _no_config(t)], "--checkpoint: "),
    ("a name for two builds", lambda t: [*_config(t), "--name", "mine", "--graph", "gqa", "--graph", "fused"],
     "name: names one folder"),
    # checkpoint files: read inside the checks, never by a parser that can crash or hang
    ("index nested 100000 deep", lambda t: _index_text(t, '{"weight_map": ' + "[" * 100_000 + "]" * 100_000 + "}"),
     "--checkpoint: model.safetensors.index.json: is not usable JSON: nested deeper than 64 levels"),
    ("truncated shard", lambda t: _shard_bytes(t, lambda b: b[:100]),
     f"--checkpoint: {SHARD} is not a safetensors file (Error while deserializing header"),
    ("garbage shard", lambda t: _shard_bytes(t, lambda b: bytes(range(256)) * 20),
     f"--checkpoint: {SHARD} is not a safetensors file"),
    ("shard cut short after its header", lambda t: _shard_bytes(t, lambda b: b[: len(b) - 8]),
     f"--checkpoint: {SHARD} is not a safetensors file"),
    ("NUL in a shard name", lambda t: _sharded(t, lambda m: m.update({Q0: "model-0000\x002.safetensors"})),
     "holds a NUL byte: give a file name inside the checkpoint folder"),
    ("shard name not a string", lambda t: _sharded(t, lambda m: m.update({Q0: ["model-00002-of-00005.safetensors"]})),
     "is not a string: give a file name"),
    ("model_type a list", lambda t: _ckpt_config(t, model_type=["llama"]),
     "config.json: model_type: must be a string naming the architecture, got ['llama']"),
    ("hidden_act a list", lambda t: _ckpt_config(t, hidden_act=["silu"]), "hidden_act: activation ['silu']"),
    # links in the transformers cache layout: followed inside models--org--tiny, refused when they leave it
    ("cached shard linked to /etc/passwd", lambda t: _relinked(t, lambda _: Path("/etc/passwd")),
     "points outside the checkpoint folder (to '/etc/passwd'"),
    ("cached shard linked to ../../elsewhere", lambda t: _relinked(t, _elsewhere), "points outside the checkpoint"),
    ("cached shard linked to /dev/zero", lambda t: _relinked(t, lambda _: Path("/dev/zero")),
     "points outside the checkpoint folder (to '/dev/zero'"),
    ("cached shard a FIFO in blobs", lambda t: _relinked(t, _fifo), "is not a regular file (a folder, FIFO"),
    ("cached single file linked to /etc/passwd",
     lambda t: _relinked(t, lambda _: Path("/etc/passwd"), "model.safetensors", shards=False),
     "--checkpoint: model.safetensors points outside the checkpoint folder"),
    ("tokenizer.json linked outside", lambda t: _relinked(t, lambda _: Path("/etc/hostname"), "tokenizer.json"),
     "--checkpoint: tokenizer.json points outside the checkpoint folder"),
    # weights past the dtype: one line naming the tensor and its value, not numpy warnings and a FAILED artifact
    ("weight past fp16", lambda t: [*_ckpt(t, lambda x: x[Q0].__setitem__((3, 5), 1e6)), "--dtype", "fp16"],
     f"--checkpoint: tensor '{Q0}' holds 1e+06 at [3, 5], past fp16's largest value 65504: give --dtype fp32"),
    # memory: estimated before anything is allocated (decoder.memory), under ROPEEXPORT_MEMORY_LIMIT
    ("an 8B config with seeded weights", lambda t: _config(t, **LLAMA_8B),
     "--hf-config: building this decoder needs about 207 GiB (8.03e+09 parameters x 24 bytes"),
    ("a 2^17-wide config", lambda t: _config(t, hidden_size=2**17, num_attention_heads=1024, intermediate_size=4096),
     "TiB"),
    ("an 8B preset in fp16", lambda t: ["--preset", "llama-3.1-8b", "--dtype", "fp16"],
     "--preset: building this decoder needs about 224 GiB (8.03e+09 parameters x 26 bytes"),
    ("checkpoint past the memory limit", lambda t: _ckpt(t), "--checkpoint: building this decoder needs about"),
    ("memory limit not a size", lambda t: _config(t), "ROPEEXPORT_MEMORY_LIMIT: must be a size such as 8G"),
    # checked at spec time, not found after the whole build
    ("max positions below the scenarios", lambda t: [*_config(t), "--max-positions", "10"],
     "max_positions: 10 is fewer than the 76 positions the decoder is verified over (decode-64"),
    ("max positions below the scenarios, dry run", lambda t: [*_config(t), "--max-positions", "75", "--dry-run"],
     "give --max-positions 76 or more"),
    ("config's max positions below the scenarios", lambda t: _config(t, max_position_embeddings=64),
     "max_positions: 64 (the config's max_position_embeddings) is fewer than the 76 positions"),
    ("malformed tokenizer.json", lambda t: _tokenizer(t, '{"version": "1.0", "model": {"type": "BPE", "vocab": 5}}'),
     "--checkpoint: tokenizer.json: cannot be read by tokenizers"),
    ("tokenizer.json not JSON", lambda t: _tokenizer(t, "[" * 100_000), "--checkpoint: tokenizer.json: cannot be read"),
    ("Arabic-Indic digits", lambda t: [*_config(t), "--num-layers", "\u0662"],
     "--num-layers: must be an integer in ASCII digits (0-9), got '\u0662'"),
]  # fmt: skip


# Faults in a tensor's values, found as the build reads it (after the "building ..." line: the checkpoint is read
# while exporting, a tensor at a time); names, shapes and shards are checked from the headers before anything prints.
PROGRESS = re.compile(r"^\[ *\d+s\] ")
BUILDING = {"non-finite tensor", "integer tensor", "weight past fp16"}


@pytest.mark.parametrize(("label", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_decoder_input_exits_2_and_writes_nothing(
    label: str,
    args: Callable[[Path], list[str]],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROPEEXPORT_MEMORY_LIMIT", LIMITS.get(label, MEMORY))
    argv = [*(DECODER if label != "decoder flag alone" else ["build"]), *args(tmp_path)]
    out = tmp_path / "out"
    capsys.readouterr()  # the setup's own output (transformers' progress bars)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        code = main([*argv, "--out", str(out)])
    captured = capsys.readouterr()
    # A fault found while building follows the build's progress lines (``[  3s] NAME: export (1/2)``, stderr off a
    # terminal); the error itself is one line, and input checked before building comes alone.
    progress = [line for line in captured.err.splitlines() if PROGRESS.match(line)]
    err = "\n".join(line for line in captured.err.splitlines() if not PROGRESS.match(line)).strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert label in BUILDING or (captured.out == "" and not progress), captured  # checked before "building ..."
    assert message in err, err
    assert not seen, [str(w.message) for w in seen]  # the one line alone: no numpy overflow warnings beside it
    assert not out.exists()


def test_dry_run_resolves_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main([*DECODER, *_config(tmp_path), "--graph", "gqa", "--graph", "fused", "--dry-run", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and not out.exists()
    assert "-decoder-fp32-gqa: decode-64, chunked-prefill, left-padded, far-positions" in text
    assert "2 decoder(s) (dry run: nothing written)" in text


def test_out_that_is_not_a_tree_is_refused_also_in_a_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for extra in ([], ["--dry-run"]):
        capsys.readouterr()
        assert main([*DECODER, *_config(tmp_path), *extra, "--out", str(mine)]) == 2
        assert "--out: " in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_json_is_one_document_and_quiet_prints_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    args = [*DECODER, *_config(tmp_path), "--graph", "gqa", "--graph", "fused", "--no-eager", "--out", str(out)]
    assert main([*args, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [b["path"].rsplit("-", 2)[-2:] for b in document["built"]] == [["fp32", "gqa"], ["fp32", "fused"]]
    assert all(b["passed"] for b in document["built"])
    assert main([*args, "--quiet"]) == 0  # the same specs again: rebuilt in place, nothing refused
    assert capsys.readouterr().out.split() == [b["path"] for b in document["built"]]


@pytest.mark.parametrize("shards", [True, False], ids=["sharded", "single-file"])
def test_a_checkpoint_in_the_transformers_cache_layout_builds(shards: bool, tmp_path: Path) -> None:
    """Every file of a cache snapshot is a link into ``models--org--tiny/blobs/``: followed, sharded or not, the
    tokenizer's too (``decoder.checkpoint.own_tree``).
    """  # noqa: D205
    from tokenizers import Tokenizer, models

    snapshot = _cache(tmp_path, shards)
    blob = tmp_path / "hub" / "models--org--tiny" / "blobs" / "tokenizer-blob"
    Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")).save(str(blob))
    (snapshot / "tokenizer.json").symlink_to(Path("../../blobs") / blob.name)
    out = tmp_path / "out"
    assert main([*DECODER, "--checkpoint", str(snapshot), "--out", str(out), "--quiet"]) == 0
    folder = out / "tiny-decoder-fp32-fused"  # the model's name from the cache path (models--org--tiny)
    assert (folder / "tokenizer.json").read_bytes() == blob.read_bytes()
    report = read_report(folder, DecoderReport)
    assert report.passed and report.references.transformers.startswith("transformers")


@pytest.mark.parametrize("dry_run", [False, True], ids=["build", "dry run"])
def test_the_memory_check_before_building_takes_no_eager(
    dry_run: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A limit between the two estimates: with the transformers reference the checkpoint does not fit, without it it
    # does, so --no-eager must reach the build (the check before the "building" line once judged every build eager).
    from ropeexport.api import resolve_decoder
    from ropeexport.decoder.memory import estimate

    args = _ckpt(tmp_path)
    monkeypatch.setenv("ROPEEXPORT_MEMORY_LIMIT", "100T")
    spec = resolve_decoder(checkpoint=args[1])
    lean, eager = estimate(spec, seeded=False, eager=False).total, estimate(spec, seeded=False).total
    assert lean < eager
    monkeypatch.setenv("ROPEEXPORT_MEMORY_LIMIT", str((lean + eager) // 2))
    extra = ["--dry-run"] if dry_run else []
    capsys.readouterr()
    assert main([*DECODER, *args, *extra, "--out", str(tmp_path / "eager")]) == 2
    assert "building this decoder needs" in capsys.readouterr().err
    assert main([*DECODER, *args, *extra, "--no-eager", "--out", str(tmp_path / "lean")]) == 0
    assert (tmp_path / "lean").exists() != dry_run
