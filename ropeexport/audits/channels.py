"""Channels moved, not computed: what ``rotations`` reads through when a rotation's input or output is x's channels
in another order (transformers' DeepSeek V3 rotates interleaved pairs, de-interleaving them on the way).
"""  # noqa: D205

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def pair_swap(node: ir.Node) -> bool:
    """A Transpose of the last two axes only: interleaved pairs [.., r/2, 2] read as halves [.., 2, r/2] (DeepSeek's
    ``apply_rotary_pos_emb_interleave`` before its rotate_half), a move of channels (``rotations.root`` follows it).
    """  # noqa: D205
    perm = node.attributes.get("perm") if node.op_type == "Transpose" else None
    order = list(perm.value) if perm is not None else []
    return len(order) >= 2 and order == [*range(len(order) - 2), len(order) - 1, len(order) - 2]


def moved(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """The order that puts ``y``'s channels back where ``x`` has them, when ``y`` is x with its channels moved (and
    not as they are); else None.
    """  # noqa: D205
    flat_x, flat_y = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
    where = [np.flatnonzero(np.all(np.isclose(flat_y, flat_x[:, [c]], rtol=1e-6, atol=1e-7), axis=0))
             for c in range(flat_x.shape[-1])]  # fmt: skip
    if any(len(w) != 1 for w in where):
        return None
    order = np.array([int(w[0]) for w in where])
    return order if len(set(order.tolist())) == len(order) and np.any(order != np.arange(len(order))) else None
