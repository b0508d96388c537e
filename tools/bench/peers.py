"""The peers: the paths people use today, against which ropeexport's artifacts are timed.

A Hugging Face-style RoPE module (``HFRotary``) exported with ``torch.onnx.export`` and run in ORT with the same
options and binding (``peer``), run eagerly in PyTorch (``eager``), and through ``torch.compile``.

``HFRotary`` is written here so that transformers is not needed. ropeexport's own eager references (ALiBi,
sinusoidal) run through ``torch_entries`` too, as correctness oracles rather than serving paths.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from .timing import Entry, failed


class HFRotary(nn.Module):
    """Hugging Face-style RoPE (``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``, transformers 4.3x).

    ``forward(q, k, position_ids) -> (q_out, k_out)``: q [b, heads, s, d], k [b, kv_heads, s, d], position_ids int64
    [b, s]. As HF does: ``inv_freq`` = 1 / theta^(2i/d) in float32, the cos/sin cache [max_positions, d] built once in
    the module from ``torch.outer(t, inv_freq)`` duplicated to full width with ``cat``, cast to the input dtype per
    call, indexed by ``position_ids`` and rotated with ``rotate_half``.
    """

    cos_cached: torch.Tensor  # [max_positions, d] float32
    sin_cached: torch.Tensor

    def __init__(self, head_dim: int, max_positions: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        t = torch.arange(max_positions, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)  # [P, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [P, d]
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        """[x1, x2] -> [-x2, x1] over the last axis."""
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Rotate q and k by their positions (shapes in the class docstring)."""
        cos = self.cos_cached.to(q.dtype)[position_ids].unsqueeze(1)  # [b, 1, s, d]
        sin = self.sin_cached.to(q.dtype)[position_ids].unsqueeze(1)
        return q * cos + self.rotate_half(q) * sin, k * cos + self.rotate_half(k) * sin


def export_peer(module: HFRotary, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """``torch.onnx.export(dynamo=True)`` of ``module`` on query, key, position_ids, dynamic batch and sequence."""
    args = tuple(torch.from_numpy(feeds[n]) for n in ("query", "key", "position_ids"))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            verbose=False,
            input_names=["query", "key", "position_ids"],
            output_names=["query_out", "key_out"],
            dynamic_shapes=({0: batch, 2: seq}, {0: batch, 2: seq}, {0: batch, 1: seq}),
        )
    return program.model_proto


def torch_entries(
    args: argparse.Namespace, module: nn.Module, feeds: dict[str, np.ndarray], compile_too: bool
) -> list[Entry]:
    """``eager`` (and ``torch_compile``) of ``module(*feeds)`` under inference_mode, outputs allocated per call."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in feeds.values()]
    holder: dict[str, Any] = {}

    def runner(fn: Callable) -> Callable[[], None]:
        def call() -> None:
            with torch.inference_mode():
                holder[fn] = fn(*tensors)

        return call

    def outs(fn: Callable) -> Callable[[], list[np.ndarray]]:
        def get() -> list[np.ndarray]:
            result = holder[fn]
            result = result if isinstance(result, (tuple, list)) else [result]
            return [t.float().numpy() for t in result]

        return get

    entries = [Entry("eager", f"PyTorch eager {type(module).__name__}", runner(module), outputs=outs(module))]
    if not compile_too:
        return entries
    what = f"torch.compile({type(module).__name__}) (inductor, dynamic=False)"
    if args.no_compile:
        entries.append(Entry("torch_compile", what, error="skipped: --no-compile"))
        return entries
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(module, dynamic=False)
            with torch.inference_mode():
                compiled(*tensors)  # compiles now, so the first timed call does not
    except Exception as exc:
        entries.append(failed("torch_compile", what, exc))
        return entries
    info = {"compile_s": round(time.perf_counter() - start, 2)}
    entries.append(Entry("torch_compile", what, runner(compiled), info=info, outputs=outs(compiled)))
    return entries
