"""Tiny random transformers models saved as checkpoints: what the decoder tests build from (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) builds the tiny models")
torch = pytest.importorskip("torch")

_SMALL = {"vocab_size": 96, "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 48,
          "num_attention_heads": 4}  # fmt: skip
_LONGROPE = {"type": "longrope", "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [2.0, 3.0, 4.0, 5.0]}
# name -> (model_type, config fields): every architecture, each schedule, the structural variants.
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {**_SMALL, "num_key_value_heads": 2}),
    # head_dim 16: GroupQueryAttention rotates decode steps itself in the gqa form (``attention.graph._kernel_rotary``)
    "llama-d16": ("llama", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16}),
    "llama-biases": ("llama", {**_SMALL, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}),
    "llama-llama3": ("llama", {**_SMALL, "num_key_value_heads": 1, "max_position_embeddings": 512,
                               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    "llama-dynamic": ("llama", {**_SMALL, "max_position_embeddings": 128,
                                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "mistral-window": ("mistral", {**_SMALL, "num_key_value_heads": 2, "sliding_window": 6}),
    "mistral-window-d16": ("mistral", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 6}),
    "qwen2-yarn": ("qwen2", {**_SMALL, "num_key_value_heads": 2, "max_position_embeddings": 256,
                             "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 64}}),
    "phi3-longrope": ("phi3", {**_SMALL, "num_key_value_heads": 2, "pad_token_id": 0, "max_position_embeddings": 256,
                               "original_max_position_embeddings": 64, "rope_scaling": _LONGROPE}),
    "phi3-longrope-d16": ("phi3", {**_SMALL, "hidden_size": 64, "num_key_value_heads": 2, "pad_token_id": 0,
                                   "max_position_embeddings": 256, "original_max_position_embeddings": 64,
                                   "rope_scaling": {"type": "longrope",
                                                    "short_factor": [1.0 + i / 10 for i in range(8)],
                                                    "long_factor": [2.0 + i for i in range(8)]}}),
    # Phi-4-mini's shape: partial rotary 0.75 (12 of 16 channels) under LongRoPE, KV heads 12 wide in the cache.
    "phi3-partial-longrope": ("phi3", {**_SMALL, "hidden_size": 64, "num_key_value_heads": 2, "pad_token_id": 0,
                                       "partial_rotary_factor": 0.75, "max_position_embeddings": 256,
                                       "original_max_position_embeddings": 64,
                                       "rope_scaling": {"type": "longrope",
                                                        "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
                                                        "long_factor": [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}}),
    "gpt_neox": ("gpt_neox", {**_SMALL, "rotary_pct": 0.5}),
    "gpt_neox-sequential": ("gpt_neox", {**_SMALL, "use_parallel_residual": False}),
    "gptj": ("gptj", {"vocab_size": 96, "n_layer": 2, "n_embd": 32, "n_head": 4, "rotary_dim": 4,
                      "n_positions": 256}),
    "bloom": ("bloom", {"vocab_size": 96, "n_layer": 2, "hidden_size": 32, "n_head": 4}),
    "qwen3": ("qwen3", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512}),
    "qwen3-yarn": ("qwen3", {**_SMALL, "num_key_value_heads": 1, "max_position_embeddings": 256,
                             "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                                 "original_max_position_embeddings": 64}}),
    # Gemma 3: layers 0, 1, 3, 4 slide over 6 slots at theta 10000, layer 2 (and 5) global at 1e6 with linear x8.
    "gemma3": ("gemma3_text", {**_SMALL, "num_hidden_layers": 6, "num_key_value_heads": 2, "head_dim": 16,
                               "sliding_window": 6, "sliding_window_pattern": 3, "query_pre_attn_scalar": 24,
                               "max_position_embeddings": 512, "pad_token_id": 0,
                               "layer_types": ["sliding_attention"] * 2 + ["full_attention"] + ["sliding_attention"]
                               * 2 + ["full_attention"],
                               "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                   "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                      "rope_theta": 1e6}}}),
    # Gemma 2: soft caps on attention and output logits, even layers sliding.
    "gemma2": ("gemma2", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8,
                          "sliding_window": 6, "query_pre_attn_scalar": 12, "max_position_embeddings": 512,
                          "pad_token_id": 0, "attn_logit_softcapping": 3.0, "final_logit_softcapping": 5.0}),
    # No RoPE on layers 1 and 3 (SmolLM3 writes 1 = RoPE), windows of 6 slots on the sliding layers 2 and 3.
    "smollm3-nope": ("smollm3", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "pad_token_id": 0,
                                 "no_rope_layers": [1, 0, 1, 0],
                                 "use_sliding_window": True, "sliding_window": 6,
                                 "layer_types": ["full_attention"] * 2 + ["sliding_attention"] * 2}),
    # gpt-oss: 4 experts, 2 per token (clamped SwiGLU), attention biases and sinks, layers 0 and 2 sliding over 6 slots,
    # YaRN x4 untruncated as gpt-oss ships it (its real factor 32 over 4096 positions, here over 64).
    "gpt_oss": ("gpt_oss", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8,
                            "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 6,
                            "max_position_embeddings": 256, "pad_token_id": 0,
                            "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                                                "beta_slow": 1.0, "truncate": False, "rope_theta": 150000.0,
                                                "original_max_position_embeddings": 64}}),
    # Cohere 2: layers 0-2 slide over 6 slots with interleaved RoPE, layer 3 global without RoPE (every 4th); one
    # LayerNorm per layer read by attention and MLP (the shared residual); logits times 0.25; the head tied.
    "cohere2": ("cohere2", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 6,
                            "max_position_embeddings": 256, "logit_scale": 0.25, "pad_token_id": 0,
                            "bos_token_id": 1, "eos_token_id": 2}),
    # GLM-4: its four RMSNorms a layer (the sandwich), q/k/v biases, fused gate_up, interleaved RoPE pairs on the first
    # 8 of each head's 16 channels (partial_rotary_factor 0.5 by default), GQA.
    "glm4": ("glm4", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256,
                      "pad_token_id": 0, "eos_token_id": 2}),
    # EXAONE 4 ("LLLG"): layers 0-2 local over 6 slots with RoPE, layer 3 global without; norms after attention and
    # after the MLP only; q/k RMSNorms per head.
    "exaone4": ("exaone4", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 6,
                            "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}),
    # OLMo 3: layers 0-2 slide over 6 slots, unscaled at theta 500000; layer 3 full with YaRN x4 (over 64 positions)
    # at theta 1e4 (its 4.x rope_scaling and rope_theta, which transformers gives the full layers only); norms after
    # attention and MLP only, q/k norms over the whole projections, each RMSNorm times its weight in float32.
    "olmo3": ("olmo3", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 6,
                        "max_position_embeddings": 256, "rope_theta": 1e4, "pad_token_id": 0, "eos_token_id": 2,
                        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}),
    # Qwen3-MoE: 4 experts 24 wide, 2 per token, weighed by the softmax over all 4 as it is (norm_topk_prob false, the
    # config class's default); layers 1 and 3 sparse (decoder_sparse_step 2), 0 dense by the step and 2 by
    # mlp_only_layers (the dense MLP 48 wide); q/k RMSNorms per head, GQA.
    "qwen3_moe": ("qwen3_moe", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16,
                                "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                "decoder_sparse_step": 2, "mlp_only_layers": [2], "max_position_embeddings": 256}),
    # Qwen3-MoE as released (Qwen3-30B-A3B): every layer sparse, the k weights renormalized (norm_topk_prob true).
    "qwen3_moe-norm": ("qwen3_moe", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4,
                                     "num_experts_per_tok": 2, "moe_intermediate_size": 24, "norm_topk_prob": True,
                                     "max_position_embeddings": 256}),
    # Ministral 3: YaRN x4 over 64 positions (its real x16 over 16384) and the query times 1 + 0.1 * log(1 +
    # floor(pos / 64)): steps at 64, 128 and 192 of its 256 positions; a window of 6 slots on every layer (Mistral's).
    "ministral3": ("ministral3", {**_SMALL, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256,
                                  "sliding_window": 6, "pad_token_id": 0, "eos_token_id": 2,
                                  "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                                      "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                                      "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                      "max_position_embeddings": 256,
                                                      "llama_4_scaling_beta": 0.1}}),
    # Gemma 4: layers 0 and 2 slide over 6 slots (default RoPE, theta 1e4, head_dim 8), layers 1 and 3 full with
    # their own head_dim 16 (global_head_dim, saved as per_layer_config) and proportional RoPE (2 real pairs of 8, theta
    # 1e6), keys as values with one key/value head there (attention_k_eq_v, num_global_key_value_heads); the values
    # RMS-normed, logits scaled 1.0, each layer's output times its layer_scalar, the output logits soft-capped.
    "gemma4": ("gemma4_text", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8,
                               "global_head_dim": 16, "attention_k_eq_v": True, "num_global_key_value_heads": 1,
                               "sliding_window": 6, "max_position_embeddings": 256, "pad_token_id": 0,
                               "hidden_size_per_layer_input": 0, "final_logit_softcapping": 5.0,
                               "layer_types": ["sliding_attention", "full_attention"] * 2}),
    # DeepSeek V3 / Kimi K2 (model_type deepseek_v3): latent attention (query LoRA 16, latent 16, keys 8 nope + 8 rope
    # wide, values 8), interleaved RoPE pairs on the rope slice only, YaRN x4 over 64 positions with mscale pairs as V3
    # ships them (its real x40 over 4096); layer 0 dense (first_k_dense_replace 1), layer 1 DeepSeek's mixture: 8
    # experts in 2 groups, the best group kept, 2 experts a token, one shared expert, routed weights times 2.5.
    "deepseek_v3": ("deepseek_v3", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                                    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                                    "first_k_dense_replace": 1, "q_lora_rank": 16, "kv_lora_rank": 16,
                                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "head_dim": 8,
                                    "max_position_embeddings": 256, "pad_token_id": 0,
                                    "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                                        "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                                        "beta_slow": 1.0, "mscale": 0.707,
                                                        "mscale_all_dim": 0.707}}),
    # DeepSeek V3.2 (model_type deepseek_v32): deepseek_v3's layers (plain RoPE: YaRN is deepseek_v3's row) with
    # DeepSeek Sparse Attention's indexer on each: 8 heads 16 wide (its first 8 dims rotated, half-split pairs), each
    # query keeping its best 4 keys, so the selection bites from the 5th token on, in prefill and in decode (with 2
    # heads relu leaves exact-zero scores at most keys: ties torch.topk breaks otherwise than ONNX's TopK)
    "deepseek_v32": ("deepseek_v32", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                                      "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                                      "first_k_dense_replace": 1, "q_lora_rank": 16, "kv_lora_rank": 16,
                                      "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                                      "index_topk": 4, "index_head_dim": 16, "index_n_heads": 8,
                                      "max_position_embeddings": 128, "pad_token_id": 0,
                                      "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    # GLM-5 (model_type glm_moe_dsa): deepseek_v32's with its indexer's RoPE interleaved and 3 layers, the middle one
    # "shared" (the first layer's selection reused: no indexer, no key cache of its own); layer 0 dense
    "glm_moe_dsa": ("glm_moe_dsa", {**_SMALL, "num_hidden_layers": 3, "num_key_value_heads": 4,
                                    "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
                                    "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "q_lora_rank": 16,
                                    "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                                    "v_head_dim": 12, "index_topk": 4, "index_head_dim": 16, "index_n_heads": 8,
                                    "indexer_types": ["full", "shared", "full"], "max_position_embeddings": 128,
                                    "pad_token_id": 0,
                                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}),
    # GLM-4.7-Flash (model_type glm4_moe_lite): DeepSeek V3's layers with GLM's keys; its pattern from mlp_layer_types
    # (one first_k_dense_replace cannot say: layer 0 the mixture, layer 1 dense); query LoRA 16, latent 16, keys 8
    # nope + 8 rope, values 12 (wider than the nope part, as GLM's 256 over 192);
    # plain RoPE (theta 1e6, no scaling); 8 experts in one group, 2 a token, times 1.8, one shared expert.
    "glm4_moe_lite": ("glm4_moe_lite", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                                        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 1,
                                        "topk_group": 1, "routed_scaling_factor": 1.8,
                                        "mlp_layer_types": ["sparse", "dense"], "q_lora_rank": 16,
                                        "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                                        "v_head_dim": 12, "max_position_embeddings": 128, "pad_token_id": 0,
                                        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
    # Mistral Small 4 (model_type mistral4): DeepSeek V3's latent attention (query LoRA 16, latent 16, keys 8 nope + 8
    # rope, values 8) with YaRN x2 over 64 positions (mscale pair 1.0, as the config class fills in; its real x128 over
    # 8192) and the whole query times 1 + 0.1 * log(1 + floor(pos / 64)): a step at 64 of its 128 positions, crossed by
    # the YaRN switch's scenarios; layer 0 dense (first_k_dense_replace 1), layer 1 the softmax grouped router: 8
    # experts in 2 groups, the best group kept, 2 a token renormalized, times 2.0, one shared expert
    "mistral4": ("mistral4", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                              "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
                              "routed_scaling_factor": 2.0, "first_k_dense_replace": 1, "q_lora_rank": 16,
                              "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8,
                              "max_position_embeddings": 128, "pad_token_id": 0,
                              "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                                                  "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                                  "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                  "max_position_embeddings": 128, "llama_4_scaling_beta": 0.1}}),
    # DeepSeek-V2 (model_type deepseek_v2): latent attention as deepseek_v3's (a plain q_proj, as V2-Lite's; latent 16,
    # keys 8 nope + 8 rope, values 8) rotated in complex form, YaRN x2 over 64 (128 positions) with V2's mscale pair
    # 0.707 under the 4.x key "type" (as V2-Lite's config.json says it); layer 0 dense, layer 1 V2's router: softmax
    # over 8 experts in 4 groups each scored by its best, 2 groups kept, 3 experts a token, not renormalized, times 16
    # (DeepSeek-V2's), two shared experts
    "deepseek_v2": ("deepseek_v2", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                                    "n_routed_experts": 8, "num_experts_per_tok": 3, "n_group": 4, "topk_group": 2,
                                    "topk_method": "group_limited_greedy", "routed_scaling_factor": 16.0,
                                    "n_shared_experts": 2, "first_k_dense_replace": 1, "q_lora_rank": None,
                                    "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                                    "v_head_dim": 8, "max_position_embeddings": 128, "pad_token_id": 0,
                                    "rope_scaling": {"type": "yarn", "factor": 2.0, "rope_theta": 10000.0,
                                                     "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                                     "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}}),
    # Llama 4: layers 0-2 chunked over 8 slots with RoPE (llama3 x8 over 64, interleaved pairs) and the L2 q/k norm,
    # layer 3 NoPE with the temperature q * (log(floor((pos + 1) / 4) + 1) * 0.1 + 1): a step every 4 positions;
    # layers 1 and 3 a mixture of 4 experts 24 wide, top-1 by sigmoid, beside a shared expert; 0 and 2 dense, 48 wide.
    "llama4": ("llama4_text", {**_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16,
                               "intermediate_size": 24, "intermediate_size_mlp": 48, "num_local_experts": 4,
                               "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "attention_chunk_size": 8,
                               "floor_scale": 4, "attn_scale": 0.1, "max_position_embeddings": 256,
                               "pad_token_id": 0, "eos_token_id": 2,
                               "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                   "original_max_position_embeddings": 64}}),
}  # fmt: skip


# Variants of a CONFIGS architecture built by one or two tests only (not in the every-decoder loops over CONFIGS: their
# sites and layers are their architecture's row's).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # Kimi K2's shape, shrunk: no query LoRA (q_lora_rank null: a plain q_proj, as DeepSeek-V2-Lite), one group, 3 of
    # 8 experts a token weighed times 2.827, YaRN x4 with K2's mscale pair 1.0; no dense layer; values 12 wide
    "deepseek_v3-kimi": ("deepseek_v3", {**_SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                                         "n_routed_experts": 8, "num_experts_per_tok": 3, "n_group": 1,
                                         "topk_group": 1, "routed_scaling_factor": 2.827,
                                         "first_k_dense_replace": 0, "q_lora_rank": None, "kv_lora_rank": 16,
                                         "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 12,
                                         "head_dim": 8, "max_position_embeddings": 256, "pad_token_id": 0,
                                         "rope_parameters": {"rope_type": "yarn", "factor": 4.0,
                                                             "rope_theta": 50000.0,
                                                             "original_max_position_embeddings": 64,
                                                             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                                             "mscale_all_dim": 1.0}}),
    # DeepSeek V3 with three groups of 4 experts, the best group kept, 2 experts a token: room for a tie between two
    # groups that a third beats at every token but one (tests/decoder/test_routing.py)
    "deepseek_v3-groups": ("deepseek_v3", {**CONFIGS["deepseek_v3"][1], "n_routed_experts": 12, "n_group": 3}),
    # Qwen3-MoE whose int4 experts QMoE holds (transformers.js's int4 rows): qwen3_moe-norm's 2 sparse layers with
    # experts 32 wide (blocks of 16 and 32 divide both widths, qmoe.fits), weighed by the softmax over all 4
    # (norm_topk_prob false: the weights QMoE is handed as router_weights)
    "qwen3_moe-qmoe": ("qwen3_moe", {**CONFIGS["qwen3_moe-norm"][1], "moe_intermediate_size": 32,
                                     "norm_topk_prob": False}),
    # Gemma 4 with shared key/value layers (E2B / E4B's num_kv_shared_layers, shrunk): layers 2 (sliding) and 3 (full)
    # read the keys and values of layers 0 and 1, the last earlier layer of their type; their MLPs twice as wide
    # (use_double_wide_mlp); the full layers' values off their keys (attention_k_eq_v) on layer 1
    "gemma4-shared": ("gemma4_text", {**CONFIGS["gemma4"][1], "num_kv_shared_layers": 2, "use_double_wide_mlp": True}),
    # Gemma 4 E2B / E4B's shape, shrunk: gemma4-shared with per-layer input embeddings (4 wide per layer, a table of
    # the 96 tokens)
    "gemma4-ple": ("gemma4_text", {**CONFIGS["gemma4"][1], "num_kv_shared_layers": 2, "use_double_wide_mlp": True,
                                   "hidden_size_per_layer_input": 4, "vocab_size_per_layer_input": 96}),
    # Gemma 4 26B-A4B's shape, shrunk: gemma4 with the mixture beside every layer's MLP (enable_moe_block): 4 experts
    # 16 wide, 2 a token (the MLP 48 wide: 3 x 16, as 26B-A4B's 2112 is 3 x 704)
    "gemma4-moe": ("gemma4_text", {**CONFIGS["gemma4"][1], "enable_moe_block": True, "num_experts": 4,
                                   "top_k_experts": 2, "moe_intermediate_size": 16}),
}  # fmt: skip


# Multimodal wrappers around a text model of CONFIGS or VL_CONFIGS (Gemma 3 4B-27B ship as gemma3: the text model's
# weights under language_model., a vision tower beside): name -> (wrapper model_type, its text model's name there,
# wrapper fields).
# Mistral Large 4's text model (mistral_large4_text), apart from CONFIGS: transformers has no causal LM of it alone,
# only the mistral_large4 wrapper's (WRAPPED). 4 layers: latent attention without a query LoRA (latent 16, keys 8 nope +
# 8 rope, values 8), LeRoPE over YaRN x4 (alpha, the query scale and bias set away from their identity init by
# ``checkpoint``), layer 3 NoPE, kv_source_layers [0, 1, 0, 3]: layer 2 reads layer 0's latent (transformers' reading
# too, tests/architectures/test_mistral_large4.py ``_reads``); layer 0 dense, 1-3 the softmax grouped router over 4
# experts in 2 groups, 2 a token, times 1.5, one shared expert; DSA's indexer (16 heads 16 wide) keeping 4 keys of each
# query: layer 1 shared (layer 0's selection), layer 2 its own indexer and key cache over layer 0's latent, layer 3's
# without RoPE.
LATENT_TEXT: dict[str, tuple[str, dict[str, Any]]] = {
    "mistral_large4": ("mistral_large4_text", {
        **_SMALL, "num_hidden_layers": 4, "num_key_value_heads": 4, "moe_intermediate_size": 16,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "routed_scaling_factor": 1.5,
        "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"], "kv_lora_rank": 16, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8, "v_head_dim": 8, "index_topk": 4, "index_head_dim": 16, "index_n_heads": 16,
        "indexer_types": ["full", "shared", "full", "full"], "no_rope_layers": [1, 1, 1, 0],
        "kv_source_layers": [0, 1, 0, 3], "max_position_embeddings": 128,
        "pad_token_id": 0, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                               "original_max_position_embeddings": 32, "beta_fast": 32.0,
                                               "beta_slow": 1.0, "attention_factor": 1.0}}),
}  # fmt: skip
# Its twin with no shared latent cache (kv_source_layers [0, 1, 2, 3], MistralLarge4TextConfig's default: each layer its
# own), every other field and the seed the same: the expanded-cache forms, which a reusing layer refuses, build on it
LATENT_TEXT["mistral_large4-unshared"] = ("mistral_large4_text", {**LATENT_TEXT["mistral_large4"][1],
                                                                  "kv_source_layers": [0, 1, 2, 3]})  # fmt: skip
_PIXTRAL_L4 = {"vision_config": {"model_type": "pixtral", "hidden_size": 16, "intermediate_size": 32,
                                 "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 8, "image_size": 28,
                                 "patch_size": 14}}  # fmt: skip
WRAPPED: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Mistral Large 4: Mistral's own checkpoint format (transformers 5.23 saves it so), a one-layer Pixtral tower
    "mistral_large4": ("mistral_large4", "mistral_large4", _PIXTRAL_L4),
    "mistral_large4-unshared": ("mistral_large4", "mistral_large4-unshared", _PIXTRAL_L4),
    "gemma3-multimodal": ("gemma3", "gemma3", {
        "vision_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1,
                          "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
        "mm_tokens_per_image": 4, "image_token_index": 95, "boi_token_index": 93, "eoi_token_index": 94}),
    # Mistral 3 (Ministral 3 8B's release): a Pixtral vision tower and projector beside the ministral3 text model
    "mistral3-multimodal": ("mistral3", "ministral3", {
        "vision_config": {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16, "image_size": 28,
                          "patch_size": 14},
        "image_token_index": 95, "tie_word_embeddings": False}),
    # Mistral Small 4 as a mistral3 checkpoint (Mistral3ForConditionalGeneration over a mistral4 text model): the same
    # Pixtral tower beside it
    "mistral3-mistral4": ("mistral3", "mistral4", {
        "vision_config": {"model_type": "pixtral", "hidden_size": 32, "intermediate_size": 48,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 16, "image_size": 28,
                          "patch_size": 14},
        "image_token_index": 95, "tie_word_embeddings": False}),
    # Gemma 4 (its released sizes ship as gemma4): a vision tower of one layer and its projection beside the text model
    # (model.language_model.), no audio tower
    "gemma4-multimodal": ("gemma4", "gemma4", {
        "vision_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
                          "num_key_value_heads": 2, "head_dim": 16, "patch_size": 4, "position_embedding_size": 64},
        "audio_config": None}),
    # Qwen-VL: a vision tower of one block beside (passed over by the decoder); mrope_section covers head_dim 16's 8
    # pairs (chunked 2 + 3 + 3; Qwen3-VL interleaved 3 + 3 + 2: pairs 1, 4, 7 height, 2, 5 width, the rest time)
    "qwen2_5_vl": ("qwen2_5_vl", "qwen2_5_vl", {
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
                          "out_hidden_size": 64, "fullatt_block_indexes": [0]}}),
    "qwen2_vl": ("qwen2_vl", "qwen2_vl", {
        "vision_config": {"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2}}),
    "qwen3_vl": ("qwen3_vl", "qwen3_vl", {
        "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2,
                          "out_hidden_size": 64, "deepstack_visual_indexes": [0]}}),
}  # fmt: skip
# The text models of WRAPPED's Qwen-VL checkpoints (hidden 64, head_dim 16: 8 frequency pairs for three axes), apart
# from CONFIGS: the tests that go over every CONFIGS decoder (audit, onnxruntime-genai) refuse M-RoPE by design.
_VL_TEXT = {**_SMALL, "hidden_size": 64, "num_key_value_heads": 2, "max_position_embeddings": 256}
_CHUNKED = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}
VL_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2_vl": ("qwen2_vl_text", {**_VL_TEXT, "rope_parameters": _CHUNKED}),
    "qwen2_5_vl": ("qwen2_5_vl_text", {**_VL_TEXT, "rope_parameters": _CHUNKED}),
    "qwen3_vl": ("qwen3_vl_text", {**_VL_TEXT, "head_dim": 16, "rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [3, 3, 2], "mrope_interleaved": True}}),
}  # fmt: skip


def hf_config(name: str) -> Any:
    if name in WRAPPED:
        wrapper, text, fields = WRAPPED[name]
        if text in VL_CONFIGS:  # Qwen-VL: its config class names its text model's type itself
            return transformers.AutoConfig.for_model(wrapper, text_config=VL_CONFIGS[text][1], **fields)
        text_type, text_fields = (CONFIGS | LATENT_TEXT)[text]  # named: a wrapper's default text type may differ
        return transformers.AutoConfig.for_model(wrapper, text_config={"model_type": text_type, **text_fields},
                                                 **fields)  # fmt: skip
    model_type, fields = CONFIGS[name] if name in CONFIGS else VARIANTS[name]
    return transformers.AutoConfig.for_model(model_type, **fields)


def checkpoint(folder: Path, name: str, seed: int = 0, max_shard_size: str | None = None,
               vision: dict[str, Any] | None = None) -> Path:
    """A random model of CONFIGS[name] saved with save_pretrained into ``folder``; weights spread (std ~0.2) so the
    logits have a scale of order one and a wrong position shows. ``vision``: fields of its vision_config changed.
    """  # noqa: D205
    torch.manual_seed(seed)
    # Mistral 3, Gemma 4 and Qwen-VL: their ForConditionalGeneration, as their checkpoints are saved
    whole = ("mistral3-multimodal", "mistral3-mistral4", "gemma4-multimodal", "mistral_large4",
             "mistral_large4-unshared")  # fmt: skip
    auto = transformers.AutoModelForImageTextToText if name in whole or name in VL_CONFIGS else (
        transformers.AutoModelForCausalLM)  # fmt: skip
    config = hf_config(name)
    for key, value in (vision or {}).items():
        setattr(config.vision_config, key, value)
    if config.model_type == "mistral4":  # transformers 5.23's AutoModelForCausalLM has no mistral4 entry: its class
        model = transformers.Mistral4ForCausalLM._from_config(config, attn_implementation="eager")
    else:
        model = auto.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        for buffer_name, b in model.named_buffers():  # Gemma 4's learned layer_scalar (a saved buffer): away from 1;
            # DeepSeek's router correction is a buffer too (zeros as made)
            # Mistral Large 4's LeRoPE alpha (zeros as made: exp(alpha) 1) too
            if buffer_name.endswith(("layer_scalar", "e_score_correction_bias", "rotary_emb.alpha")):
                b.add_(torch.randn_like(b) * 0.2)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(folder, **kwargs)
    return folder
