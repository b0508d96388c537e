"""The weight mappings that read (convert, dequantize) a weight when asked for answer ``name in weights`` without
reading it: collections.abc.Mapping's own ``__contains__`` calls ``__getitem__``, which made every int4 weight of a
real-size verification dequantized twice a read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from ropeexport.audits.prove import ProofWeights
from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.held import HeldWeights, NBits
from ropeexport.decoder.oracle import Stored64
from ropeexport.decoder.weights import LayerWeights
from tests.decoder.test_planted import LLAMA


class Counted(Mapping[str, np.ndarray]):
    """A mapping of zeros that counts its reads."""

    def __init__(self, names: list[str]) -> None:
        self.names, self.reads = names, 0

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self.names:
            raise KeyError(name)
        self.reads += 1
        return np.zeros((4, 4))

    def __contains__(self, name: object) -> bool:
        return name in self.names  # as a dict's: the source's own membership costs nothing

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def _stored(inner: Counted) -> Mapping[str, np.ndarray]:
    spec, _ = resolve(DecoderRequest(config=LLAMA, name="lazy"))
    return Stored64(spec, inner)


def _held(inner: Counted) -> Mapping[str, np.ndarray]:
    part = NBits("w", "s", "", K=32, N=4, block_size=32, accuracy_level=0)
    return HeldWeights(inner, {"layers.0.q_proj": (part, (0, 4))})


# (mapping over a counted source, a name it holds, a name it does not)
CASES: list[tuple[str, Callable[[Counted], Mapping[str, Any]], str, str]] = [
    ("Stored64", _stored, "layers.0.q_proj", "layers.9.q_proj"),
    ("LayerWeights", lambda inner: LayerWeights(inner, 0), "q_proj", "k_proj"),
    ("HeldWeights", _held, "layers.0.q_proj", "layers.0.k_proj"),
    ("ProofWeights", lambda inner: ProofWeights(inner, Counted([])), "layers.0.q_proj", "lm_head"),
]


@pytest.mark.parametrize(("label", "make", "held", "absent"), CASES, ids=[c[0] for c in CASES])
def test_in_reads_nothing(label: str, make: Callable[[Counted], Mapping[str, Any]], held: str, absent: str) -> None:
    inner = Counted(["layers.0.q_proj", "w", "s"])
    weights = make(inner)
    assert held in weights and absent not in weights
    assert inner.reads == 0, label
