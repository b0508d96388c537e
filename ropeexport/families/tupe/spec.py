"""TUPE: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.families.t5.buckets import max_exact
from ropeexport.learned import Tensor, load_weights, require_weights_path
from ropeexport.specs import MAX_TABLE_ENTRIES, MAX_TABLE_POSITIONS, require_bool, require_int

MAX_BUCKETS = 4096


@dataclass(frozen=True)
class TupeSpec(BiasSpec):
    """TUPE untied positional correlation plus a T5 relative bias (Ke et al. 2021); an encoder method.

    ``d_model``: width of the position embeddings, 0 for num_heads * head_dim. ``num_buckets``, ``max_distance``,
    ``bidirectional``: the T5 buckets of the relative bias. ``causal`` (default false, as TUPE's BERT-style encoder)
    masks keys after the query. ``weights``: "" for seeded, else a .safetensors file with the four tensors of the
    module docstring; ``position_embeddings`` must have max_positions rows. Read during validation.
    """

    encoding: ClassVar[str] = "tupe"
    artifacts: ClassVar[tuple[str, ...]] = ("scores",)

    causal: bool = False
    d_model: int = 0  # 0 (or null): num_heads * head_dim
    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True
    weights: str = ""
    seed: int = 0

    def _validate_method(self) -> None:
        put = self._put
        width = self.num_heads * self.head_dim
        put("d_model", width if self.d_model in (None, 0) else require_int("d_model", self.d_model, 1, 65536))
        bidirectional = require_bool("bidirectional", self.bidirectional)
        put("bidirectional", bidirectional)
        buckets = require_int("num_buckets", self.num_buckets, 4 if bidirectional else 2, MAX_BUCKETS)
        if bidirectional and buckets % 2:
            raise SpecError("num_buckets", f"must be even when bidirectional (half for each direction), got {buckets}")
        put("num_buckets", buckets)
        exact = max_exact(buckets, bidirectional)
        # log(max_distance / max_exact) divides the bucket formula: it must be positive.
        put("max_distance", require_int("max_distance", self.max_distance, exact + 1, MAX_TABLE_POSITIONS))
        entries = self.max_positions * (self.d_model + 2 * width)
        if entries > MAX_TABLE_ENTRIES:
            raise SpecError(
                "max_positions",
                f"the position embeddings and the two projected tables would hold {entries} entries "
                f"(max_positions x (d_model + 2 x num_heads x head_dim)), over the limit of {MAX_TABLE_ENTRIES} (2^27)",
            )
        put("weights", require_weights_path(self.weights))
        put("seed", require_int("seed", self.seed, 0, 2**63 - 1))
        load_weights(tuple(tupe_tensors(self)), self.weights, self.seed)


def tupe_tensors(spec: TupeSpec) -> list[Tensor]:
    """The learned tensors and the std of their seeded initialisation.

    Seeded p ~ N(0, 1) (an embedding's usual init) and U ~ N(0, 1/d_model) give p U of unit variance, so each term
    of the logits is of order one: verification must be able to see an error in any of them.
    """
    width = spec.num_heads * spec.head_dim
    return [
        Tensor("position_embeddings", (spec.max_positions, spec.d_model), 1.0),
        Tensor("pos_query", (spec.d_model, width), 1.0 / math.sqrt(spec.d_model)),
        Tensor("pos_key", (spec.d_model, width), 1.0 / math.sqrt(spec.d_model)),
        Tensor("relative_bias", (spec.num_buckets, spec.num_heads), 0.5),
    ]


SPEC = TupeSpec  # what the catalog reads
