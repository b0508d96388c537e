"""RoPE reference modules in PyTorch (Su et al. 2021, "RoFormer", eq. 13-16 and 34).

Each pair of channels (x_a, x_b) at position m is rotated by the angle m * theta_i:
    x_a' = x_a cos(m theta_i) - x_b sin(m theta_i)
    x_b' = x_b cos(m theta_i) + x_a sin(m theta_i)
``half`` pairs channel i with i + r/2 (GPT-NeoX, Hugging Face ``rotate_half``); ``interleaved`` pairs 2i with 2i+1
(GPT-J, Meta Llama); ``complex`` is Meta Llama's literal form, ``view_as_complex(x) * polar(1, m theta)``, the same
rotation as ``interleaved``.

Precision: angles and their cos/sin are computed in float64 for every call and rounded once to the table dtype. An
fp32 angle m * theta_0 near m = 131072 carries an error of about 0.004 rad, which is what this avoids.

Notation: b batch, h heads (num_heads for query, num_kv_heads for key), s sequence, d head_dim, r rotary_dim.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ropeexport.errors import RuntimeInputError
from ropeexport.families.rope import regimes
from ropeexport.families.rope.schedules import Frequencies, get_schedule
from ropeexport.families.rope.spec import RopeSpec
from ropeexport.numerics import round_once
from ropeexport.tensors import check_positions, to_torch


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the first r channels of x; cos/sin [b, s, r/2] in x's dtype, x [b, h, s, d]."""
    r = 2 * cos.shape[-1]
    cos, sin = cos[:, None], sin[:, None]  # [b, 1, s, r/2]
    rot, tail = x[..., :r], x[..., r:]
    if interleaved:
        xa, xb = rot[..., 0::2], rot[..., 1::2]  # [b, h, s, r/2]
        out = torch.stack((xa * cos - xb * sin, xb * cos + xa * sin), dim=-1).flatten(-2)
    else:
        xa, xb = rot[..., : r // 2], rot[..., r // 2 :]
        out = torch.cat((xa * cos - xb * sin, xb * cos + xa * sin), dim=-1)
    return torch.cat((out, tail), dim=-1)


class RotaryEmbedding(nn.Module):
    """Eager RoPE for any layout and schedule: ``forward(query, key, *, position_ids) -> (query_out, key_out)``.

    query [b, num_heads, s, d], key [b, num_kv_heads, s, d], position_ids int64 [b, s]; outputs keep the input
    shapes and dtype. Length-dependent schedules (dynamic, longrope) use each row's own L_b = max(position_ids[b]) + 1
    (``regimes.row_lengths``): a row's output never depends on the other rows of its batch. M-RoPE specs take
    position_ids [3, b, s] (``mrope_angles``); [b, s] is refused, never broadcast.
    """

    def __init__(self, spec: RopeSpec) -> None:
        super().__init__()
        self.spec = spec
        self.schedule = get_schedule(spec.scaling)

    def frequencies(self, seq_len: int) -> Frequencies:
        """The schedule's frequencies for a call of length ``seq_len`` (float64)."""
        s = self.spec
        return self.schedule.frequencies(s.rotary_dim, s.theta, s.scaling_params, seq_len)

    def angles(
        self, position_ids: torch.Tensor, length: int | np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 angles [b, s, r/2] for these positions, and the attention factor [b, 1, 1] of each row.

        ``length``: L for length-dependent schedules, one for every row or one per row [b] (default each row's own,
        max(position_ids[b]) + 1).
        """
        check_positions(position_ids, self.spec.max_positions)
        if self.spec.mrope_section:
            return self.mrope_angles(position_ids)
        positions = position_ids.numpy()
        b = positions.shape[0]
        lengths = (
            regimes.row_lengths(positions) if length is None else np.broadcast_to(np.asarray(length, np.int64), (b,))
        )
        angles = torch.empty((*positions.shape, self.spec.rotary_dim // 2), dtype=torch.float64)
        factor = torch.empty((b, 1, 1), dtype=torch.float64)
        for value in np.unique(lengths):  # each row at its own L
            freqs = self.frequencies(int(value))
            rows = torch.from_numpy(lengths == value)
            inv_freq = torch.from_numpy(freqs.inv_freq)  # float64 [r/2]
            angles[rows] = position_ids[rows].to(torch.float64)[..., None] * inv_freq
            factor[rows] = freqs.attention_factor
        return angles, factor

    def mrope_angles(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """M-RoPE's float64 angles [b, s, r/2] from position_ids [3, b, s], recomposed as transformers 5.23 does
        (``Qwen2VLRotaryEmbedding`` / ``Qwen3VLTextRotaryEmbedding.recomposition_frequencies``), and the attention
        factor [b, 1, 1] (static schedules: one for every row).
        """  # noqa: D205
        s = self.spec
        if position_ids.dim() != 3 or position_ids.shape[0] != len(s.mrope_section):
            raise RuntimeInputError(
                f"position_ids: expected [{len(s.mrope_section)}, batch, seq] (time, height, width), got "
                f"{list(position_ids.shape)}"
            )
        freqs = self.frequencies(s.max_positions)  # static: any L
        every = position_ids.to(torch.float64)[..., None] * torch.from_numpy(freqs.inv_freq)  # [3, b, s, r/2]
        section = list(s.mrope_section)
        if s.mrope_interleaved:
            angles = every[0].clone()
            for dim, offset in enumerate((1, 2), start=1):  # height, width over time's pairs
                idx = slice(offset, section[dim] * 3, 3)
                angles[..., idx] = every[dim, ..., idx]
        else:
            angles = torch.cat([m[i % 3] for i, m in enumerate(every.split(section, dim=-1))], dim=-1)
        factor = torch.full((position_ids.shape[1], 1, 1), freqs.attention_factor, dtype=torch.float64)
        return angles, factor

    def cos_sin(
        self, position_ids: torch.Tensor, length: int | np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [b, s, r/2] in the spec dtype, each rounded once from float64."""
        angles, attention = self.angles(position_ids, length)
        dtype = self.spec.dtype
        cos = to_torch(round_once((torch.cos(angles) * attention).numpy(), dtype))
        sin = to_torch(round_once((torch.sin(angles) * attention).numpy(), dtype))
        return cos, sin

    def apply_rotation(
        self, x: torch.Tensor, position_ids: torch.Tensor, length: int | np.ndarray | None = None
    ) -> torch.Tensor:
        """x [b, h, s, d] rotated by position_ids [b, s] (M-RoPE [3, b, s]; ``length`` as ``angles`` takes it)."""
        cos, sin = self.cos_sin(position_ids, length)
        return rotate_pairs(x, cos, sin, self.spec.layout != "half")

    def _check(self, query: torch.Tensor, key: torch.Tensor, position_ids: torch.Tensor) -> None:
        s = self.spec
        for name, x, heads in (("query", query, s.num_heads), ("key", key, s.num_kv_heads)):
            if x.dim() != 4 or x.shape[1] != heads or x.shape[3] != s.head_dim:
                raise RuntimeInputError(f"{name}: expected [batch, {heads}, seq, {s.head_dim}], got {list(x.shape)}")
        want = [*([len(s.mrope_section)] if s.mrope_section else []), query.shape[0], query.shape[2]]
        if list(position_ids.shape) != want or key.shape[::2] != query.shape[::2]:
            raise RuntimeInputError(
                f"position_ids: expected {'[3, batch, seq]' if s.mrope_section else '[batch, seq]'} = {want} "
                "matching query and key, "
                f"got {list(position_ids.shape)} (key {list(key.shape)})"
            )

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, *, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate query and key by their positions (shapes in the class docstring)."""
        self._check(query, key, position_ids)
        return self.apply_rotation(query, position_ids), self.apply_rotation(key, position_ids)


class ComplexRotaryEmbedding(RotaryEmbedding):
    """Meta Llama's complex-number RoPE, literally: ``view_as_complex`` and ``polar``.

    As in Meta's code the product is taken in complex64 and rounded to the input dtype at the end; freqs_cis comes
    from float64 angles (``polar`` in complex128, rounded once to complex64) instead of Meta's float32 angles.
    ``torch.onnx.export`` cannot export this module (no ``view_as_complex`` / ``polar``); ropeexport exports the
    equivalent interleaved graph.
    """

    def apply_rotation(
        self, x: torch.Tensor, position_ids: torch.Tensor, length: int | np.ndarray | None = None
    ) -> torch.Tensor:
        """x [b, h, s, d] rotated as complex numbers: view_as_complex(x) * polar(attention, angles)."""
        angles, attention = self.angles(position_ids, length)
        freqs_cis = torch.polar(attention.expand_as(angles).contiguous(), angles).to(torch.complex64)  # [b, s, r/2]
        r = self.spec.rotary_dim
        rot = torch.view_as_complex(x[..., :r].float().reshape(*x.shape[:-1], r // 2, 2))  # [b, h, s, r/2]
        out = torch.view_as_real(rot * freqs_cis[:, None]).flatten(-2).type_as(x)
        return torch.cat((out, x[..., r:]), dim=-1)


def reference_module(spec: RopeSpec) -> RotaryEmbedding:
    """The eager reference for a spec: the complex form for ``layout="complex"``, the real form otherwise."""
    return ComplexRotaryEmbedding(spec) if spec.layout == "complex" else RotaryEmbedding(spec)


def table_regimes(spec: RopeSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """float64 (cos, sin) tables [max_positions, r/2], attention factor applied, one pair per regime.

    Static schedules have one regime; ``longrope`` has two (short, then long); ``dynamic`` stores the default
    regime (used while L <= original_max_position_embeddings) and computes the rest in the graph. Computed in
    ``regimes``, the one home of exact tables.
    """
    return regimes.table_regimes(spec)


def rope_scores(
    module: RotaryEmbedding,
    query: torch.Tensor,
    key: torch.Tensor,
    query_position_ids: torch.Tensor,
    key_position_ids: torch.Tensor,
) -> torch.Tensor:
    """Attention logits of the rotated pair, (R_i q_i) . (R_j k_j) / sqrt(d): [b, num_heads, q_len, k_len].

    query [b, num_heads, q_len, d], key [b, num_kv_heads, k_len, d]; query head h meets key head
    h // (num_heads / num_kv_heads). Row b at its own L_b = max over both position inputs' row b + 1.
    """
    spec = module.spec
    length = regimes.row_lengths(query_position_ids.numpy(), key_position_ids.numpy())
    q = module.apply_rotation(query, query_position_ids, length)
    k = module.apply_rotation(key, key_position_ids, length)
    k = k.repeat_interleave(spec.num_heads // spec.num_kv_heads, dim=1)
    return (q @ k.transpose(-1, -2)) * (1.0 / spec.head_dim**0.5)
