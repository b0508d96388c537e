"""Shaw relative positions: the spec, validated on construction.

Torch-free: importing it loads neither torch nor onnx (the catalog and the CLI read every spec class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ropeexport.errors import SpecError
from ropeexport.families.bias.spec import BiasSpec
from ropeexport.learned import Tensor, load_weights, require_weights_path
from ropeexport.specs import MAX_TABLE_ENTRIES, require_int

# The tables hold 2k + 1 rows; distances past max_positions - 1 never occur, so a larger clip changes nothing.
MAX_CLIP = 65536
# Seeded tables of std 0.5 make q . a^K / sqrt(d) and the value term of order one, like the content terms: with the
# usual 0.02 an error in either positional term would hide under the fp16 tolerance.
SEEDED_STD = 0.5


@dataclass(frozen=True)
class ShawSpec(BiasSpec):
    """Shaw et al. 2018 relative position representations: ``clip`` (k >= 1), learned a^K and a^V shared by heads.

    ``weights``: "" for a seeded initialisation (``seed``), else a .safetensors file with ``relative_key`` and
    ``relative_value``, each [2 * clip + 1, head_dim]; it is read during validation, so a bad file is a SpecError.
    """

    encoding: ClassVar[str] = "shaw"
    artifacts: ClassVar[tuple[str, ...]] = ("scores", "attention")

    clip: int = 16
    weights: str = ""
    seed: int = 0

    def _validate_method(self) -> None:
        clip = require_int("clip", self.clip, 1, MAX_CLIP)
        if 2 * (2 * clip + 1) * self.head_dim > MAX_TABLE_ENTRIES:
            raise SpecError(
                "clip",
                f"a^K and a^V would hold 2 x (2 x {clip} + 1) x {self.head_dim} entries, over the limit of "
                f"{MAX_TABLE_ENTRIES} (2^27)",
            )
        self._put("clip", clip)
        self._put("weights", require_weights_path(self.weights))
        self._put("seed", require_int("seed", self.seed, 0, 2**63 - 1))
        load_weights(tuple(shaw_tensors(self.head_dim, self.clip)), self.weights, self.seed)


def shaw_tensors(head_dim: int, clip: int) -> list[Tensor]:
    """The learned tensors: a^K and a^V, [2 * clip + 1, head_dim] each (row r + clip for clipped distance r)."""
    rows = 2 * clip + 1
    return [
        Tensor("relative_key", (rows, head_dim), SEEDED_STD),
        Tensor("relative_value", (rows, head_dim), SEEDED_STD),
    ]


SPEC = ShawSpec  # what the catalog reads
