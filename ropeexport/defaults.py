"""The embedded default build and the feature set.

``DEFAULT_PRESETS``: what ``ropeexport build`` with no arguments builds, one model preset per encoding family.
``FEATURE_SPECS``: one artifact per RoPE feature a serving team meets (layouts, partial rotation, GQA, each kind of
schedule, each table dtype) and one per other encoding family, small enough to build in seconds; the tests build it
(``ropeexport build --spec`` takes the same dicts as ``artifacts = [...]``).
"""

from __future__ import annotations

from typing import Any

DEFAULT_OUT = "ropeexport-out"

# One per encoding family, each at its model's real length (llama-3.1-8b: 131072 positions).
DEFAULT_PRESETS = (
    "llama-3.1-8b",
    "bloom-560m",
    "t5-base",
    "transformer-base",
    "shaw-transformer-base",
    "transformer-xl-wt103",
    "tupe-base",
    "kerple-log-162m",
    "sandwich",
    "pixtral-12b-vision",
)

FEATURE_SPECS: list[dict[str, Any]] = [
    {  # Llama 3.1 8B geometry and scaling, table cut to 16k positions to stay fast.
        "name": "llama3-half-fp32-fused",
        "layout": "half",
        "head_dim": 128,
        "num_heads": 32,
        "num_kv_heads": 8,
        "theta": 500000.0,
        "max_positions": 16384,
        "scaling": "llama3",
        "dtype": "fp32",
        "graph": "fused",
        "scaling_params": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    {  # Meta Llama 2's complex-number form, exported as the equivalent interleaved graph.
        "name": "complex-fp32-decomposed",
        "layout": "complex",
        "head_dim": 128,
        "num_heads": 32,
        "max_positions": 4096,
        "dtype": "fp32",
        "graph": "decomposed",
    },
    {  # GPT-J: interleaved, 64 of 256 channels rotate.
        "name": "gptj-interleaved-fp16-decomposed",
        "layout": "interleaved",
        "head_dim": 256,
        "rotary_dim": 64,
        "num_heads": 16,
        "max_positions": 2048,
        "dtype": "fp16",
        "graph": "decomposed",
    },
    {  # Dynamic NTK: the base follows the call's length past 2048, computed in the graph.
        "name": "dynamic-half-fp16-fused",
        "layout": "half",
        "head_dim": 64,
        "num_heads": 16,
        "num_kv_heads": 4,
        "max_positions": 8192,
        "scaling": "dynamic",
        "dtype": "fp16",
        "graph": "fused",
        "scaling_params": {"factor": 4.0, "original_max_position_embeddings": 2048},
    },
    {  # LongRoPE: short and long factor tables switched on L > 2048.
        "name": "longrope-half-fp32-decomposed",
        "layout": "half",
        "head_dim": 32,
        "num_heads": 8,
        "max_positions": 8192,
        "scaling": "longrope",
        "dtype": "fp32",
        "graph": "decomposed",
        "scaling_params": {
            "original_max_position_embeddings": 2048,
            "short_factor": [1.0 + 0.05 * i for i in range(16)],
            "long_factor": [1.0 + 0.5 * i for i in range(16)],
        },
    },
    {  # YaRN with DeepSeek's mscale pair, bf16 tables (verified by onnx.reference where ORT lacks bf16 kernels).
        "name": "yarn-half-bf16-fused",
        "layout": "half",
        "head_dim": 64,
        "num_heads": 8,
        "max_positions": 4096,
        "scaling": "yarn",
        "dtype": "bf16",
        "graph": "fused",
        "scaling_params": {
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
        },
    },
    {  # ALiBi with 12 heads (the non-power-of-two slope recipe), causal attention through ONNX Attention.
        "encoding": "alibi",
        "name": "alibi12-attention-fp32-fused",
        "artifact": "attention",
        "num_heads": 12,
        "head_dim": 64,
        "max_positions": 8192,
        "dtype": "fp32",
        "graph": "fused",
    },
    {  # The original Transformer's sinusoidal table added to d_model 512 embeddings.
        "encoding": "sinusoidal",
        "name": "sinusoidal-apply-fp32-fused",
        "artifact": "apply",
        "d_model": 512,
        "max_positions": 4096,
        "scale_input": True,
    },
    {  # T5's encoder buckets (32 buckets, max distance 128) with seeded relative_attention_bias.
        "encoding": "t5",
        "name": "t5-bias-fp32-fused",
        "artifact": "bias",
        "num_heads": 12,
        "max_positions": 2048,
    },
    {  # Shaw et al.: clipped relative key and value embeddings, causal attention.
        "encoding": "shaw",
        "name": "shaw-attention-fp16-decomposed",
        "artifact": "attention",
        "num_heads": 8,
        "head_dim": 64,
        "clip": 16,
        "max_positions": 2048,
        "dtype": "fp16",
        "graph": "decomposed",
    },
    {  # Transformer-XL's four-term relative logits.
        "encoding": "transformer-xl",
        "name": "transformer-xl-scores-fp32-fused",
        "num_heads": 8,
        "head_dim": 64,
        "max_positions": 2048,
    },
    {  # TUPE: untied absolute positional correlation plus bucketed relative bias.
        "encoding": "tupe",
        "name": "tupe-scores-fp32-fused",
        "num_heads": 8,
        "head_dim": 64,
        "max_positions": 2048,
    },
    {  # KERPLE's logarithmic kernel.
        "encoding": "kerple",
        "name": "kerple-log-scores-fp32-fused",
        "artifact": "scores",
        "kernel": "log",
        "num_heads": 8,
        "head_dim": 64,
        "max_positions": 2048,
    },
    {  # Sandwich: the inner product of sinusoidal embeddings as a bias.
        "encoding": "sandwich",
        "name": "sandwich-bias-fp32-fused",
        "artifact": "bias",
        "num_heads": 8,
        "max_positions": 2048,
    },
    {  # 2-D vision RoPE: Qwen2.5-VL's ViT rotary (shared frequencies), 64 patches a side.
        "encoding": "vision_rope",
        "name": "vision-rope-shared-fp32-fused",
        "axis_frequencies": "shared",
        "head_dim": 80,
        "num_heads": 16,
        "max_positions": 64,
    },
]
