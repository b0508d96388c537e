"""A mixture of experts' float64 twin in two steps: the tokens routed (``Mixing``), then each chosen expert applied.

``moe.moe64``, ``moe.shared_moe64`` and ``gemma4_moe.branch64`` route one call's tokens into a ``Mixing`` (its
tokens, each token's chosen experts and their weights, the sum so far), then take every chosen expert in ascending
order, hand it that expert's weights (``add``) and finish (``done``: a shared expert, a norm). Splitting the two
lets a decoder's truth (``decoder.oracle``) route every call of a layer first, then read and dequantize each expert
once for all of them (a real size's experts are read from the checkpoint and quantized again per read: Qwen3-30B-A3B
has 128 a layer), handing it to each call in turn: per call, the same operations on the same arrays in the same order
as the twin alone, so the same bits. The rows an expert multiplies are one call's, never several calls' stacked: a
BLAS product's row depends on how many rows it is computed with (numpy's matmul takes gemv for one row, gemm's
blocking for more), so stacking would change the last bits.

Notation: T tokens of the call (b x s), n hidden, k experts a token.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

# One expert on its rows: x [t, n] and that expert's weights (``Mixing.names``, each expert e's part) -> [t, n]
Expert = Callable[[np.ndarray, Mapping[str, np.ndarray]], np.ndarray]


@dataclass
class Mixing:
    """One call's routed mixture: ``tokens`` [T, n] the experts read, ``chosen`` / ``weights`` [T, k] each token's
    experts and weights, ``out`` [T, n] the sum so far (a shared expert's output already, or zeros). ``expert``
    computes one expert from its weights, read under ``names`` (expert e's part of each [E, ...] weight);
    ``scaled``: the weight scales the expert's input (Llama 4's ``topk_sigmoid``), else its output. ``finish``:
    the sum [T, n] -> the twin's output (shape and what is added after the experts).
    """  # noqa: D205

    tokens: np.ndarray
    chosen: np.ndarray
    weights: np.ndarray
    out: np.ndarray
    expert: Expert
    names: tuple[str, ...]
    finish: Callable[[np.ndarray], np.ndarray]
    scaled: bool = False

    def experts(self) -> list[int]:
        """The experts any token chose, ascending (the order their outputs are summed in)."""
        return [int(e) for e in np.unique(self.chosen)]

    def add(self, e: int, one: Mapping[str, np.ndarray]) -> None:
        """Expert e (its weights ``one``, under ``names``) on the tokens routed to it, weighted, into ``out``."""
        rows, slot = np.nonzero(self.chosen == e)
        if self.scaled:  # the input scaled (``moe``'s module doc)
            self.out[rows] += self.expert(self.weights[rows, slot, None] * self.tokens[rows], one)
        else:
            self.out[rows] += self.weights[rows, slot, None] * self.expert(self.tokens[rows], one)

    def done(self) -> np.ndarray:
        """The twin's output, once every chosen expert is added."""
        return self.finish(self.out)


def part(w: Mapping[str, np.ndarray], names: tuple[str, ...], e: int) -> dict[str, np.ndarray]:
    """Expert e's part of each [E, ...] weight in ``names`` that ``w`` holds (a name it lacks: left out)."""
    return {name: w[name][e] for name in names if name in w}


def mixed(mixing: Mixing, w: Mapping[str, np.ndarray]) -> np.ndarray:
    """The twin's output of one call alone: every chosen expert, ascending, read from ``w``'s [E, ...] weights."""
    for e in mixing.experts():
        mixing.add(e, part(w, mixing.names, e))
    return mixing.done()


def mixed_together(mixings: list[Mixing], read: Callable[[int], Mapping[str, np.ndarray]]) -> list[np.ndarray]:
    """Each call's output (``mixed``'s, bit for bit), each expert read once (``read(e)``: its weights under the
    calls' ``names``) and applied to every call that chose it before the next is read: one expert's weights resident
    at a time.
    """  # noqa: D205
    chosen = [set(m.experts()) for m in mixings]
    for e in sorted(set().union(*chosen)):
        one = read(e)
        for mixing, its in zip(mixings, chosen, strict=True):
            if e in its:
                mixing.add(e, one)
        del one
    return [m.done() for m in mixings]
