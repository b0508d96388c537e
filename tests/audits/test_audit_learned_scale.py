"""Mistral Large 4's learned query scale audited against the checkpoint beside its config (``audits.learned_scale``).

ropeexport's own latent-cache build of the tiny Mistral Large 4 (``tests/decoder/tiny.py``: the scales and biases set
away from their identity init; layers 0, 2 and 3 with an indexer of their own, layer 1 sharing layer 0's), built once
here, then planted: each row edits the graph's values or nodes and must be named as what it is, the rest of the
audit unchanged. Before ``learned_scale``, every row (the right build too) said ``learned-query-scale-unread``
alone, whatever the graph held.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper

import ropeexport as rx
from ropeexport.audits import learned_scale
from tests.audits.test_audit_latent import built


def _edit(model: Path, change: Callable[[onnx.ModelProto], None]) -> None:
    proto = onnx.load(str(model))
    change(proto)
    onnx.save(proto, str(model))


def _bypass(proto: onnx.ModelProto, node: onnx.NodeProto, kept: str) -> None:
    """``node`` removed, every reader of its output reading ``kept`` instead."""
    for other in proto.graph.node:
        other.input[:] = [kept if i == node.output[0] else i for i in other.input]
    proto.graph.node.remove(node)


def _values(name: str, change: Callable[[np.ndarray], np.ndarray]) -> Callable[[Path], None]:
    """The initializer whose name ends with ``name`` set to ``change`` of its values."""

    def plant(model: Path) -> None:
        def edit(proto: onnx.ModelProto) -> None:
            t = next(t for t in proto.graph.initializer if t.name.endswith(name))
            t.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(t).copy()), t.name))

        _edit(model, edit)

    return plant


def _swap(values: np.ndarray) -> np.ndarray:
    values[[0, 2]] = values[[2, 0]]
    return values


def _negate_head_0(values: np.ndarray) -> np.ndarray:
    values[0] = -values[0]
    return values


def drop_bias(model: Path) -> None:
    """Layer 0's attention factor without its bias: the Add of q_scale_bias removed, its readers reading the Mul."""

    def edit(proto: onnx.ModelProto) -> None:
        nodes = list(proto.graph.node)
        shaped = next(n for n in nodes if n.input and n.input[0] == "layers.0/latent/q_scale_bias").output[0]
        add = next(n for n in nodes if n.op_type == "Add" and shaped in n.input)
        _bypass(proto, add, next(i for i in add.input if i != shaped))

    _edit(model, edit)


def indexer_log_of_pos(model: Path) -> None:
    """Every indexer's log of position_ids + 0 (its computed form, Log(Cast(position_ids + 1)), the 1 dropped)."""

    def edit(proto: onnx.ModelProto) -> None:
        made = {o: n for n in proto.graph.node for o in n.output}
        proto.graph.initializer.append(numpy_helper.from_array(np.array(0, np.int64), "planted_zero"))
        for log in (n for n in proto.graph.node if n.op_type == "Log"):
            add = made[made[log.input[0]].input[0]]  # Log <- Cast <- Add(position_ids, 1)
            add.input[1] = "planted_zero"

    _edit(model, edit)


def rope_half_unscaled(model: Path) -> None:
    """Layer 1's factor left off its rotated query half (the latent form multiplies q_nope and q_rope apart): the Mul
    of the query rotation's output by it removed, its readers reading the rotation's output.
    """  # noqa: D205

    def edit(proto: onnx.ModelProto) -> None:
        nodes = list(proto.graph.node)
        mul = next(n for n in nodes if n.op_type == "Mul" and "layers.1/rope/query_out" in n.input)
        _bypass(proto, mul, "layers.1/rope/query_out")

    _edit(model, edit)


def indexer_query_unscaled(model: Path) -> None:
    """Layer 2's indexer factor computed right and multiplied into nothing: the Mul of its query by the factor (the
    Add of the bias's output) removed, its readers reading the unscaled query.
    """  # noqa: D205

    def edit(proto: onnx.ModelProto) -> None:
        nodes = list(proto.graph.node)
        bias = next(n for n in nodes if n.input and n.input[0] == "layers.2/latent/indexer/q_bias").output[0]
        factor = next(n for n in nodes if n.op_type == "Add" and bias in n.input).output[0]
        mul = next(n for n in nodes if n.op_type == "Mul" and factor in n.input)
        _bypass(proto, mul, next(i for i in mul.input if i != factor))

    _edit(model, edit)


def layer_2_factor_unnamed(model: Path) -> None:
    """Layer 2's attention factor (its Mul of the scale by the log) named for no layer: found, but not as layer 2's."""

    def edit(proto: onnx.ModelProto) -> None:
        made = {o: n for n in proto.graph.node for o in n.output}
        scale = ["layers.2/latent/q_scale"]  # the Unsqueeze of it is the Mul's input
        mul = next(n for n in proto.graph.node if n.op_type == "Mul" and n.name.startswith("layers.2/")
                   and any(i in made and made[i].input[:1] == scale for i in n.input))  # fmt: skip
        mul.name = "planted/scale_times_log"

    _edit(model, edit)


@dataclass(frozen=True)
class Planted:
    """A fault planted in the build (``plant``), the finding names it must give and words one of them says."""

    case: str
    plant: Callable[[Path], None] | None
    findings: tuple[str, ...]
    words: str


PLANTED = [
    Planted("right", None, (), ""),
    Planted("head-swapped", _values("layers.1/latent/q_scale", _swap), ("learned-query-scale",),
            "layer 1 scales the attention's query by a learned factor other than the checkpoint's: the scale of heads "
            "0, 2 is 0.326976, -0.126725 where the checkpoint's layers.1.attention.ssmax_scaling.s holds -0.126725, "
            "0.326976 (the heads' values swapped)"),
    Planted("bias-dropped", drop_bias, ("learned-query-scale",),
            "layer 0 scales the attention's query by a learned factor other than the checkpoint's: no bias is added "
            "where the checkpoint's layers.0.attention.ssmax_scaling.b holds 1.26099, 0.711249, 1.10225, 0.621067 "
            "(heads 0, 1, 2, 3)"),
    # the table ropeexport gathers at the position, log(p + 2) for log(p + 1): one table read by every layer
    Planted("log-one-ahead", _values("latent/log_table", lambda v: np.log(np.arange(v.size) + 2.0).astype(v.dtype)),
            ("learned-query-scale",),
            "layers 0-3 scale the attention's query by a learned factor other than the checkpoint's: the log is "
            "log(pos + 2) where transformers takes log(pos + 1) (the factor one position ahead)"),
    Planted("indexer-log-of-pos", indexer_log_of_pos, ("learned-query-scale",),
            "layers 0, 2-3 scale the indexer's query by a learned factor other than the checkpoint's: the log is "
            "log(pos) where transformers takes log(pos + 1) (the factor one position behind)"),
    # the factor computed right, the rotated half of layer 1's query not multiplied by it (a false "exact" before)
    Planted("rope-half-unscaled", rope_half_unscaled, ("learned-query-scale",),
            "layer 1 scales the attention's query by a learned factor other than the checkpoint's: its query "
            "rotation's output reaches the query . key product without the factor (a half or all of the query "
            "unscaled)"),
    # a factor found on layers 0, 1 and 3 but not as layer 2's: layer 2 unread, never exact
    Planted("layer-2-not-found", layer_2_factor_unnamed, ("learned-query-scale-unread",),
            "layer 2 scales the query by a learned per-head factor (q_scale[h] * log(pos + 1) + q_bias[h], the "
            "checkpoint's weights, not the config's): not checked, no factor of it was found in the graph (ropeexport "
            "reads a Mul of H constants by a log of position_ids (a gathered table or a Log), then an Add of H "
            "constants)"),
    # the indexer's factor computed right, its query not multiplied by it (a false "exact" before: the query-path
    # check read the attention's query only)
    Planted("indexer-query-unscaled", indexer_query_unscaled, ("learned-query-scale",),
            "layer 2 scales the indexer's query by a learned factor other than the checkpoint's: its query rotation's "
            "output reaches the query . key product without the factor (a half or all of the query unscaled)"),
    Planted("indexer-scale", _values("layers.2/latent/indexer/q_scale", _negate_head_0), ("learned-query-scale",),
            "layer 2 scales the indexer's query by a learned factor other than the checkpoint's: the scale of head 0 "
            "is 0.244952 where the checkpoint's layers.2.attention.indexer.ssmax_scaling.s holds -0.244952"),
]  # fmt: skip


@pytest.fixture(scope="module")
def large4(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint) -> tuple[Path, Path]:  # noqa: ANN001
    """(the tiny Mistral Large 4's checkpoint, its latent-cache decoder's model.onnx), built once."""
    ckpt = tiny_checkpoint("mistral_large4")
    return ckpt, built(ckpt, tmp_path_factory.mktemp("large4"), "decomposed", latent_cache=True)


def _copy(model: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for part in model.parent.iterdir():
        shutil.copy(part, folder / part.name)
    return folder / model.name


@pytest.mark.parametrize("bug", PLANTED, ids=[b.case for b in PLANTED])
def test_a_learned_query_scale_is_read_against_the_checkpoint_and_a_planted_fault_named(
        bug: Planted, tmp_path: Path, large4: tuple[Path, Path]) -> None:  # fmt: skip
    ckpt, clean = large4
    model = _copy(clean, tmp_path / "planted")
    if bug.plant is not None:
        bug.plant(model)
    result = rx.audit(model, ckpt / "config.json", effects=False)
    assert [f["name"] for f in result.findings] == list(bug.findings), [(f["name"], f["text"]) for f in result.findings]
    assert result.verdict == ("findings" if bug.findings else "exact")
    assert not bug.words or result.findings[0]["text"] == bug.words, result.findings[0]["text"]


def test_without_its_checkpoint_the_learned_scale_is_unread_never_exact_and_graft_refuses_a_wrong_one(
        tmp_path: Path, large4: tuple[Path, Path]) -> None:  # fmt: skip
    ckpt, clean = large4
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(ckpt / "config.json", alone / "config.json")
    result = rx.audit(clean, alone / "config.json", effects=False)
    unread = [f for f in result.findings if f["name"] == "learned-query-scale-unread"]
    assert len(unread) == 1 and unread[0]["layers"] == [0, 1, 2, 3], result.findings
    assert unread[0]["text"].endswith("not checked, no checkpoint beside the config (its safetensors in the config's "
                                      "folder) to read them from"), unread[0]["text"]  # fmt: skip
    model = _copy(clean, tmp_path / "planted")
    drop_bias(model)
    with pytest.raises(rx.errors.SpecError, match="no bias is added .*: graft puts the config's values right"):
        rx.graft(model, ckpt / "config.json", tmp_path / "fixed.onnx", trust="config")


def test_a_checkpoint_whose_scale_does_not_read_leaves_the_learned_scale_unread_not_a_crash(
        tmp_path: Path, large4: tuple[Path, Path]) -> None:  # fmt: skip
    # its headers read (names and shapes right), one value does not (a NaN in layer 2's bias, refused on reading it):
    # the module doc's "one that does not read", said unread on every layer, the rest of the audit still reported
    from safetensors.numpy import load_file, save_file

    ckpt, clean = large4
    broken = tmp_path / "broken"
    shutil.copytree(ckpt, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["layers.2.attention.ssmax_scaling.b"][1] = np.nan
    save_file(tensors, broken / "model.safetensors", metadata={"format": "pt"})
    result = rx.audit(clean, broken / "config.json", effects=False)
    assert [f["name"] for f in result.findings] == ["learned-query-scale-unread"], result.findings
    assert result.findings[0]["layers"] == [0, 1, 2, 3] and result.verdict != "exact", result.findings
    assert result.findings[0]["text"].endswith(
        "the checkpoint beside the config does not read (checkpoint: tensor 'layers.2.attention.ssmax_scaling.b' holds "
        "1 non-finite value(s) (NaN or inf))"), result.findings[0]["text"]  # fmt: skip


def _log_graph(dtype: int) -> ir.Value:
    """transformers' form of the log, Log(Cast(position_ids + 1)), the Cast to ``dtype``: the Log's output."""
    helper = onnx.helper
    nodes = [
        helper.make_node("Add", ["position_ids", "one"], ["plus"]),
        helper.make_node("Cast", ["plus"], ["cast"], to=dtype),
        helper.make_node("Log", ["cast"], ["log"]),
    ]
    graph = helper.make_graph(nodes, "log", [helper.make_tensor_value_info("position_ids", onnx.TensorProto.INT64,
                                                                           [1, "s"])],
                              [helper.make_tensor_value_info("log", dtype, [1, "s"])],
                              [helper.make_tensor("one", onnx.TensorProto.INT64, [], [1])])  # fmt: skip
    model = ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    return next(n for n in model.graph if n.op_type == "Log").outputs[0]


# (the dtype the Log takes, the words at 65600 positions): float16 holds no position + 1 past 65504, so its log is inf
# there, transformers' reason for its float32 log ("to avoid overflow")
LOG_DTYPES = [
    (onnx.TensorProto.FLOAT, None),
    (onnx.TensorProto.FLOAT16, "the log at position 65519 is inf where log(65519 + 1) is 11.0901"),
]


@pytest.mark.fast
@pytest.mark.parametrize(("dtype", "words"), LOG_DTYPES, ids=["float32", "float16"])
def test_a_log_of_the_position_is_judged_in_the_dtype_the_graph_takes_it(dtype: int, words: str | None) -> None:
    # it had been taken as float32 whatever the Cast before it: a float16 Log, inf from position 65519, read right
    assert learned_scale._log_words(learned_scale.log_of(_log_graph(dtype), 65600)) == words  # type: ignore[arg-type]
