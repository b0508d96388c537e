"""State inputs of hybrid decoders: the convolution and recurrent states of the layers that are not attention (LFM2's
short convolutions, Granite 4's Mamba layers, Qwen3.5's linear attention), as exporters name them: mobius-onnx
writes ``past_key_values.{i}.conv_state``, ``.ssm_state`` and ``.recurrent_state``, [batch, fixed axes..], and gives
each back as ``present.{i}.<same tail>``.

An input is a state when its name's last part says a convolution, SSM or recurrent state (``STATE_WORDS``) and every
axis but the first (the batch) is fixed: it is then fed zeros [1, axes..], a first call's state (what transformers'
model starts from without a cache, the proof's truth: ``audits.hf_truth``), and where users carry it from call to call
(``audits.runs``) its ``present`` output is carried. Any other input a decoder call cannot feed is refused naming it:
a state whose axes are not fixed cannot be made the right shape from its declaration alone.
"""  # noqa: D205

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

STATE_WORDS = ("conv", "ssm", "recurrent")  # words of a state input's last name part (``conv_state``, ``ssm_state``)
RULE = ("a state input is fed zeros when its name's last part says a conv, ssm or recurrent state and every axis but "
        "the batch is fixed")  # fmt: skip


def state_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...] | None:
    """[1, axes..] of the zeros a state input ``name`` of declared ``shape`` is fed (module doc), or None: not a state
    input, or one whose axes past the batch are not fixed.
    """  # noqa: D205
    tail = name.rsplit(".", 1)[-1].lower()
    if not any(word in tail for word in STATE_WORDS) or len(shape) < 2:
        return None
    batch, rest = shape[0], list(shape[1:])
    if isinstance(batch, int) and batch != 1 or not all(isinstance(d, int) and d > 0 for d in rest):
        return None
    return (1, *(int(d) for d in rest))


def layer_tail(name: str) -> tuple[int, str] | None:
    """(layer, last name part) of a cache or state input or output (``past_key_values.3.conv_state``,
    ``present.3.conv_state``: (3, ``conv_state``)), or None where it names no layer.
    """  # noqa: D205
    numbers = re.findall(r"\d+", name)
    return (int(numbers[0]), name.rsplit(".", 1)[-1].lower()) if numbers else None
