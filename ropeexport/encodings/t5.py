"""T5 relative position buckets: a learned scalar per (bucket, head) added to the attention logits.

Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer" (JMLR),
section 2.1: relative offsets share log-spaced buckets up to a maximum distance, beyond which all share one.

With relative position r = j - i (key minus query) and B buckets, as Mesh TensorFlow and Hugging Face's
``T5Attention._relative_position_bucket`` define them:
- bidirectional (encoder): half the buckets serve keys after the query, offset by B' = B // 2, and n = |r|;
  unidirectional (decoder): B' = B and n = max(-r, 0), so every key after the query shares bucket 0;
- with E = B' // 2 exact buckets and N = B' - E log-spaced ones, bucket(n) = n for n < E, else
  E + floor(N * log(n / E) / log(max_distance / E)), clamped to B' - 1 (every n >= max_distance shares it).
The bias is B[h, i, j] = relative_attention_bias[bucket(i, j), h].

Hugging Face evaluates the log part in float32 and truncates it, so at n where the exact value is an integer (or a
hair off one) float32 can land on the other side. Here the log part is replaced by exact integer boundaries: bucket
E + t starts at the smallest n with (n / E)^N >= (max_distance / E)^t, found from a float64 estimate and settled with
Python integers, and bucket(n) = min(n, E) + #{t : n >= boundary_t}. The eager reference and the graph both bucket
with these integer comparisons. tests/encodings/test_t5.py compares the rule with Hugging Face's float32 formula:
they agree at every distance for T5's own settings (32 buckets, max distance 128) and part only at rare boundaries of
unusual ones (34 buckets with max distance 27, for one).

T5 itself does not scale q . k by 1/sqrt(d) (Mesh TF folds it into the initialisation of W_q); the ``scores`` and
``attention`` artifacts follow this package's contract, q . k / sqrt(head_dim) + bias, so to reproduce a T5
checkpoint's logits multiply the query by sqrt(head_dim) first.

Notation: b batch, h heads, q query length, k key length.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ropeexport.encodings.attention import BiasSpec, finish_bias
from ropeexport.encodings.weights import Tensor, load_weights, rounded
from ropeexport.errors import SpecError
from ropeexport.spec import MAX_TABLE_POSITIONS, register_spec, require_bool, require_int

TABLE = "relative_attention_bias"  # Hugging Face's name (T5Attention.relative_attention_bias, an Embedding)
# The seeded table is for verification: std 0.5 makes a one-bucket mistake stand out even above fp16 tolerances.
SEED_STD = 0.5
MAX_BUCKETS = 1024  # the graph holds one comparison per log-spaced bucket


@register_spec
@dataclass(frozen=True)
class T5Spec(BiasSpec):
    """T5 relative position buckets; defaults are T5's encoder (32 buckets, max distance 128, bidirectional).

    ``causal`` defaults to False here, as in the encoder; a decoder is ``bidirectional=False, causal=True``.
    ``weights`` names a safetensors file holding ``relative_attention_bias`` [num_buckets, num_heads]; without
    one the table is drawn from ``seed``.
    """

    encoding: ClassVar[str] = "t5"

    causal: bool = False
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    weights: str = ""
    seed: int = 0

    def _validate_method(self) -> None:
        put = self._put
        bidirectional = require_bool("bidirectional", self.bidirectional)
        put("bidirectional", bidirectional)
        buckets = require_int("num_buckets", self.num_buckets, 4 if bidirectional else 2, MAX_BUCKETS)
        if bidirectional and buckets % 2:
            raise SpecError("num_buckets", f"must be even when bidirectional (half per direction), got {buckets}")
        put("num_buckets", buckets)
        exact = max_exact(buckets, bidirectional)
        put("max_distance", require_int("max_distance", self.max_distance, exact + 1, MAX_TABLE_POSITIONS))
        if not isinstance(self.weights, str):
            raise SpecError("weights", f"must be a path to a safetensors file (or empty), got {self.weights!r}")
        put("seed", require_int("seed", self.seed, 0, 2**63 - 1))
        t5_table(self)  # a weights file that does not fit is a SpecError now, not at export


def t5_table(spec: T5Spec) -> np.ndarray:
    """relative_attention_bias [num_buckets, num_heads] as float64, rounded once to the spec dtype."""
    tensors = (Tensor(TABLE, (spec.num_buckets, spec.num_heads), SEED_STD),)
    return rounded(load_weights(tensors, spec.weights, spec.seed), spec.dtype)[TABLE]


def max_exact(num_buckets: int, bidirectional: bool) -> int:
    """E: how many buckets per direction hold one distance each."""
    return (num_buckets // 2 if bidirectional else num_buckets) // 2


def bucket_boundaries(num_buckets: int, bidirectional: bool, max_distance: int) -> np.ndarray:
    """int64 [N - 1]: boundary_t (t = 1..N-1) is the first distance n in bucket E + t (module docstring)."""
    return np.array(_boundaries(num_buckets, bidirectional, max_distance), dtype=np.int64)


@functools.lru_cache(maxsize=64)
def _boundaries(num_buckets: int, bidirectional: bool, max_distance: int) -> tuple[int, ...]:
    """The boundaries as Python ints.

    n is in bucket >= E + t iff N log(n / E) >= t log(M / E), i.e. n^N * E^t >= M^t * E^N in integers; the float64
    estimate E (M / E)^(t / N) is within a step of the answer, and the integer test settles it exactly (float64
    alone can miss where the boundary is an exact integer, such as M / E a perfect power).
    """
    half = num_buckets // 2 if bidirectional else num_buckets
    E, M = half // 2, max_distance
    N = half - E
    out = []
    for t in range(1, N):
        inside = lambda n, t=t: n**N * E**t >= M**t * E**N  # noqa: E731
        n = max(E + 1, math.ceil(E * (M / E) ** (t / N)))
        while n > E + 1 and inside(n - 1):
            n -= 1
        while not inside(n):
            n += 1
        out.append(n)
    return tuple(out)


def t5_buckets(spec: T5Spec, relative_position: torch.Tensor) -> torch.Tensor:
    """Bucket index (int64, same shape) of each relative position r = key - query, by integer comparisons."""
    E = max_exact(spec.num_buckets, spec.bidirectional)
    if spec.bidirectional:
        offset = (relative_position > 0).to(torch.int64) * (spec.num_buckets // 2)
        n = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        n = (-relative_position).clamp(min=0)
    bounds = torch.from_numpy(bucket_boundaries(spec.num_buckets, spec.bidirectional, spec.max_distance))
    beyond = (n[..., None] >= bounds).sum(-1)  # how many log-spaced buckets n has passed
    return offset + n.clamp(max=E) + beyond


def t5_bias(spec: T5Spec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype: a gather of the (dtype-rounded) table, no rounding."""
    relative = key_position_ids[:, None, :] - query_position_ids[:, :, None]  # [b, q, k], r = j - i
    table = torch.from_numpy(t5_table(spec).astype(np.float32))  # exact: the values are dtype-rounded already
    raw = table[t5_buckets(spec, relative)].permute(0, 3, 1, 2)  # [b, q, k, h] -> [b, h, q, k]
    return finish_bias(spec, raw, query_position_ids, key_position_ids)
