"""The checkpoints (one Llama-3.1 config, shrunk) and the sizes a run measures.

Every checkpoint keeps models/llama-3.1-8b.toml's positional schedule untouched (theta 5e5, llama3 scaling x8 from
8192, max_position_embeddings 131072) and shrinks the widths: the schedule is what position 100k exercises, the
widths are what this 2-core machine can time.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES = {
    # ~45M parameters: 4 layers, hidden 512, 8 query / 2 KV heads of 64
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2,
              "intermediate_size": 1536, "vocab_size": 32000},
    # ~125M parameters (GPT-2 small's width, Llama's GQA ratio 3:1)
    "100m": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 4,
             "intermediate_size": 2048, "vocab_size": 32000},
    # every code path in seconds (--quick, what the test runs)
    "tiny": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 128, "vocab_size": 512},
}  # fmt: skip


@dataclass(frozen=True)
class Sizes:
    """Token counts of one run: prefill prompts, decode pasts, decode steps timed, the accuracy prompts."""

    prefill: tuple[int, ...]  # prompt lengths whose prefill is timed (tokens/s)
    past: tuple[int, ...]  # cache lengths at which decode is timed (ms/token)
    steps: int  # decode steps timed after each of those prompts (their median is the round's figure)
    near: int  # the "4k" accuracy prompt: real tokens at positions 0 .. near-1
    far: int  # the "100k" accuracy position: a 16-token prompt ending at this position
    tail: int  # positions compared with the float64 truth (the prompt's last ones)
    rounds: int
    warmup: int
    memory_steps: int  # decode steps after the largest prefill in the peak-memory run


FULL = Sizes(prefill=(512, 2048), past=(128, 2048), steps=16, near=4096, far=100_000, tail=16, rounds=9, warmup=1,
             memory_steps=16)  # fmt: skip
QUICK = Sizes(prefill=(32, 64), past=(16, 64), steps=3, near=96, far=100_000, tail=16, rounds=3, warmup=1,
              memory_steps=2)  # fmt: skip
