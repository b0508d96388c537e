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
with these integer comparisons. tests/families/test_t5.py compares the rule with Hugging Face's float32 formula:
they agree at every distance for T5's own settings (32 buckets, max distance 128) and part only at rare boundaries of
unusual ones (34 buckets with max distance 27, for one).

T5 itself does not scale q . k by 1/sqrt(d) (Mesh TF folds it into the initialisation of W_q); the ``scores`` and
``attention`` artifacts follow this package's contract, q . k / sqrt(head_dim) + bias, so to reproduce a T5
checkpoint's logits multiply the query by sqrt(head_dim) first.

Notation: b batch, h heads, q query length, k key length.
"""

from __future__ import annotations

import numpy as np
import torch

from ropeexport.families.bias.reference import finish_bias
from ropeexport.families.t5.buckets import relative_buckets
from ropeexport.families.t5.spec import T5Spec, t5_table


def t5_buckets(spec: T5Spec, relative_position: torch.Tensor) -> torch.Tensor:
    """Bucket index (int64, same shape) of each relative position r = key - query (``t5.buckets``, exact)."""
    buckets = relative_buckets(relative_position.numpy(), spec.num_buckets, spec.max_distance, spec.bidirectional)
    return torch.from_numpy(buckets)


def t5_bias(spec: T5Spec, query_position_ids: torch.Tensor, key_position_ids: torch.Tensor) -> torch.Tensor:
    """Eager bias [b, num_heads, q_len, k_len] in the spec dtype: a gather of the (dtype-rounded) table, no rounding."""
    relative = key_position_ids[:, None, :] - query_position_ids[:, :, None]  # [b, q, k], r = j - i
    table = torch.from_numpy(t5_table(spec).astype(np.float32))  # exact: the values are dtype-rounded already
    raw = table[t5_buckets(spec, relative)].permute(0, 3, 1, 2)  # [b, q, k, h] -> [b, h, q, k]
    return finish_bias(spec, raw, query_position_ids, key_position_ids)
