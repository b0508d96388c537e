"""Where the gqa form lets GroupQueryAttention rotate decode steps itself (``attention.graph._kernel_rotary``).

Each layer whose piece rotates by table rows straight from the projection, in a geometry ONNX Runtime 1.31's CPU
kernel runs, holds an If on t > s: its then-branch one GroupQueryAttention with do_rotary reading the packed
projection and the piece's own tables and rows, its else-branch the Split, the two RotaryEmbedding nodes and the
kernel without rotation. Every other layer keeps the plain form. That both branches compute what the float64 truth
says is ``test_decoder.py``'s (the ``-d16`` cases: decode steps take the then-branch, prompts the else-branch).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from tests.decoder.tiny import hf_config

# (tiny config, layers that rotate in the kernel, whether that branch reads no mask (padding alone is all the mask
# there is: it runs only when no slot is padding), why)
CASES = [
    ("llama-d16", 2, True, "head_dim 16, one static table"),
    ("phi3-longrope-d16", 2, True, "LongRoPE: the kernel reads the piece's rows into its short | long table"),
    ("mistral-window-d16", 2, False, "a window: the full mask goes in attention_bias, padded or not"),
    ("llama", 0, False, "head_dim 8: ONNX Runtime's CPU kernel rotates head sizes that are multiples of 16"),
    ("phi3-partial-longrope", 0, False, "partial rotary 12 of 16: r/2 = 6 is not a multiple of 8"),
    ("qwen3", 0, False, "qk_norm sits between the projection and the rotation"),
    ("gemma3", 0, False, "qk_norm (and two tables)"),
    ("bloom", 0, False, "ALiBi: no rotation"),
]


def _decoder(name: str, folder: Path) -> onnx.ModelProto:
    from ropeexport.decoder.build import DecoderRequest, resolve
    from ropeexport.decoder.export import build_decoder_graph
    from ropeexport.decoder.weights import describe, seeded_weights

    hf_config(name).save_pretrained(folder)
    spec, _ = resolve(DecoderRequest(hf_config=folder / "config.json", graph="gqa"))
    return build_decoder_graph(spec, seeded_weights(spec), describe(None))


@pytest.mark.parametrize(("name", "layers", "bare", "why"), CASES, ids=[c[0] for c in CASES])
def test_decode_steps_rotate_in_the_kernel_where_it_can(
    name: str, layers: int, bare: bool, why: str, tmp_path: Path
) -> None:
    model = _decoder(name, tmp_path)
    branches = [n for n in model.graph.node if n.op_type == "If" and n.name.endswith("attention_node")]
    assert len(branches) == layers, why
    plain = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(plain) + len(branches) == hf_config(name).num_hidden_layers
    tables = {t.name: t for t in model.graph.initializer}
    for node in branches:
        graphs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        then, other = graphs["then_branch"], graphs["else_branch"]
        (rotating,) = then.node
        attrs = {a.name: helper.get_attribute_value(a) for a in rotating.attribute}
        assert rotating.op_type == "GroupQueryAttention" and attrs["do_rotary"] == 1
        assert rotating.input[1] == rotating.input[2] == ""  # the packed projection, read whole
        assert [n.op_type for n in other.node] == ["Split", "RotaryEmbedding", "RotaryEmbedding", "GroupQueryAttention"]
        explicit = other.node[1]
        assert list(rotating.input[7:10]) == list(explicit.input[1:4])  # the piece's tables and rows, nothing new
        assert onnx.numpy_helper.to_array(tables[rotating.input[7]]).shape[1] == 8  # r/2 of head_dim 16
        producers = {o: n for n in model.graph.node for o in n.output}
        condition = producers[node.input[0]]
        assert len(rotating.input) == (10 if bare else 11)  # no attention_bias, or the one the explicit branch reads
        if bare:  # t > s and every slot real
            assert condition.op_type == "And", why
            cached, unpadded = (producers[x] for x in condition.input)
            assert producers[unpadded.input[0]].op_type == "ReduceMin"
            assert "smooth_softmax" not in attrs
        else:
            cached = condition
            assert rotating.input[10] == other.node[-1].input[10]
        assert cached.op_type == "Greater"  # t > s: the cache holds tokens
