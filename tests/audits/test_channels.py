"""``audits.channels``: a rotation's output read as x's channels moved (transformers' DeepSeek V3 writes interleaved
pairs back as halves), and the Transpose of pairs that ``rotations.root`` follows.
"""  # noqa: D205

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from ropeexport.audits.channels import moved, pair_swap

X = np.random.default_rng(0).standard_normal((2, 3, 8))
HALVES = np.concatenate([X[..., 0::2], X[..., 1::2]], -1)  # interleaved pairs written as halves
# (case, y, the order that puts y's channels back where x has them, or None)
MOVES = [
    ("pairs-as-halves", HALVES, [0, 4, 1, 5, 2, 6, 3, 7]),
    ("not-moved", X, None),  # x as it is: nothing to put back
    ("negated", -X, None),  # a value changed is no move
    ("one-channel-twice", np.concatenate([X[..., :1], X[..., :7]], -1), None),
]


@pytest.mark.fast
@pytest.mark.parametrize(("case", "y", "order"), MOVES, ids=[m[0] for m in MOVES])
def test_a_rotations_output_is_read_back_only_when_it_moves_xs_channels(case: str, y: np.ndarray,
                                                                        order: list[int] | None) -> None:  # fmt: skip
    got = moved(X, y)
    assert (got is None) == (order is None), (case, got)
    if order is not None:
        assert got is not None and got.tolist() == order and np.array_equal(y[..., got], X)


PERMS = [([0, 1, 2, 4, 3], True), ([0, 2, 1, 3], False), ([1, 0], True), ([0, 1, 2, 3], False)]


@pytest.mark.fast
@pytest.mark.parametrize(("perm", "swaps"), PERMS, ids=[str(p) for p, _ in PERMS])
def test_only_a_transpose_of_the_last_two_axes_is_a_pair_swap(perm: list[int], swaps: bool) -> None:
    x = ir.Value(name="x")
    node = ir.node("Transpose", [x], attributes={"perm": perm})
    assert pair_swap(node) is swaps
