"""T5 relative buckets: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.families.t5.buckets import max_exact
from ropeexport.learned import Tensor, load_weights, rounded
from ropeexport.specs import MAX_TABLE_POSITIONS, require_bool, require_int

TABLE = "relative_attention_bias"  # Hugging Face's name (T5Attention.relative_attention_bias, an Embedding)
# The seeded table is for verification: std 0.5 makes a one-bucket mistake stand out even above fp16 tolerances.
SEED_STD = 0.5
MAX_BUCKETS = 1024  # the graph holds one comparison per log-spaced bucket


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


SPEC = T5Spec  # what the catalog reads
