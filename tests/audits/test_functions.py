"""Sites inside model-local functions (``model.functions``), nested ones too: found, checked per layer and grafted
like any other; graft keeps the functions where no site it repairs lies inside one, else writes the model inlined
and says so; what cannot be inlined is one line, exit 2.

The outside check's models, rebuilt: a wrong RotaryEmbedding inside a function beside an exact one in the main graph
was "1 rotary site(s), exact", exit 0, and graft "proven"; a model whose only site is inside a function was "no
rotary position encoding", exit 2.
"""  # noqa: D205

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ropeexport as rx
from ropeexport.cli import main
from tests.audits.planted import HEADS, D, P, _innermost, _io, tables, write_config

LAYER_CALL = "/model/layers.0/attn/Rotary"  # the call's name: the layer of every node inside the function


@dataclass(frozen=True)
class InFunction:
    """A model with a rotation inside model-local functions.

    ``main``: the main graph's own RotaryEmbedding reads ``exact`` or ``theta`` (5e5) tables, or there is none
    (None); ``inner``: what the rotation inside the function reads (``exact``, ``theta`` tables as the function's
    Constants, ``computed`` cos/sin of theta 5e5 made inside it, ``passed``: the main graph's theta-5e5 tables given
    to it as inputs); ``depth``: functions nested (2: local:Block calls local:Rot); ``in_if``: the call sits inside
    an If branch (always taken); ``recursive``: local:Rot calls itself.
    Expected: the audit's exit code, the function site's finding (None: exact), its ``functions`` words, graft
    --trust config's exit code and what it does with the functions (``kept`` / ``inlined``), or the phrase of its one
    line (exit 2).
    """

    name: str
    main: str | None
    inner: str
    audit: int
    finding: str | None
    origin: str
    graft: int = 0
    functions: str = "inlined"
    depth: int = 1
    in_if: bool = False
    recursive: bool = False
    phrase: str = ""


CASES = [
    InFunction("function-theta-5e5", "exact", "theta", 1, "theta", "local:Rot"),
    InFunction("only-site-in-function-theta-5e5", None, "theta", 1, "theta", "local:Rot"),
    InFunction("only-site-in-function-exact", None, "exact", 0, None, "local:Rot", functions="kept"),
    InFunction("nested-functions-theta-5e5", "exact", "theta", 1, "theta", "local:Block > local:Rot", depth=2),
    InFunction("function-in-if-branch-theta-5e5", "exact", "theta", 1, "theta", "local:Rot", in_if=True),
    InFunction("function-computes-cos-sin-theta-5e5", "exact", "computed", 1, "theta", "local:Rot"),
    InFunction("tables-passed-into-function", None, "passed", 1, "theta", "local:Rot"),
    InFunction("main-wrong-function-exact", "theta", "exact", 1, None, "local:Rot", functions="kept"),
    InFunction("main-wrong-function-exact-in-if", "theta", "exact", 1, None, "local:Rot", functions="kept",
               in_if=True),
    InFunction("function-calls-itself", "exact", "theta", 2, None, "", graft=2, recursive=True,
               phrase="model-local function local:Rot calls itself (local:Rot > local:Rot)"),
]  # fmt: skip


def _theta_tables() -> tuple[np.ndarray, np.ndarray]:
    inv = 1.0 / 5e5 ** (np.arange(0, D, 2, dtype=np.float64) / D)
    angles = np.outer(np.arange(P, dtype=np.float64), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _build(tmp: Path, case: InFunction) -> tuple[Path, Path]:
    config = write_config(tmp, "default")
    exact = tables(rx.from_hf_config(config)[0], P)
    theta = _theta_tables()
    inv = 1.0 / 5e5 ** (np.arange(0, D, 2, dtype=np.float64) / D)
    opsets = [helper.make_opsetid("", 23), helper.make_opsetid("local", 1)]
    inits = [numpy_helper.from_array(np.array(True), "always")]
    formal = ["q4", "position_ids"]
    if case.inner == "passed":  # the main graph's tables, read inside the function through its inputs
        inits += [numpy_helper.from_array(theta[0], "passed_cos"), numpy_helper.from_array(theta[1], "passed_sin")]
        body = [helper.make_node("RotaryEmbedding", ["q4", "cos_in", "sin_in", "position_ids"], ["rot_out"],
                                 name="rotary")]  # fmt: skip
        formal = [*formal, "cos_in", "sin_in"]
    else:
        inner = {"exact": exact, "theta": theta, "computed": (inv,)}[case.inner]
        body = _innermost("rot", inner, case.inner == "computed", None)
    if case.recursive:
        body.append(helper.make_node("Rot", formal, ["again"], domain="local"))
    functions = [helper.make_function("local", "Rot", formal, ["rot_out"], body, opsets)]
    call = "Rot"
    if case.depth == 2:
        functions.append(helper.make_function("local", "Block", formal, ["rot_out"],
                                              [helper.make_node("Rot", formal, ["rot_out"], domain="local",
                                                                name="inner_call")], opsets))  # fmt: skip
        call = "Block"
    actual = ["q4", "position_ids", *(["passed_cos", "passed_sin"] if case.inner == "passed" else [])]
    tail = "_branch" if case.in_if else ""  # a branch's values are named apart from the If's outputs
    held = [helper.make_node(call, actual, [f"fn_out{tail}"], name=LAYER_CALL, domain="local")]
    names = ["fn_out"]
    if case.main is not None:
        main = {"exact": exact, "theta": theta}[case.main]
        inits += [numpy_helper.from_array(main[0], "cos_cache"), numpy_helper.from_array(main[1], "sin_cache")]
        held.insert(0, helper.make_node("RotaryEmbedding", ["q4", "cos_cache", "sin_cache", "position_ids"],
                                        [f"rotated{tail}"], name="/model/layers.1/attn/RotaryEmbedding"))  # fmt: skip
        names.insert(0, "rotated")
    outputs = [_io(n, TensorProto.FLOAT, None) for n in names]
    nodes = [helper.make_node("Identity", ["query"], ["q4"])]
    if case.in_if:  # the calls inside an If branch (always taken); the main graph's own rotation too
        branch = helper.make_graph(held, "branch", [], [_io(f"{n}{tail}", TensorProto.FLOAT, None) for n in names])
        other = helper.make_graph([helper.make_node("Identity", ["q4"], [f"{n}_other"]) for n in names], "other", [],
                                  [_io(f"{n}_other", TensorProto.FLOAT, None) for n in names])  # fmt: skip
        nodes.append(helper.make_node("If", ["always"], names, name="branching", then_branch=branch,
                                      else_branch=other))  # fmt: skip
    else:
        nodes += held
    inputs = [_io("query", TensorProto.FLOAT, [1, HEADS, "s", D]), _io("position_ids", TensorProto.INT64, [1, "s"])]
    graph = helper.make_graph(nodes, "functions", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=opsets, functions=functions, ir_version=10)
    onnx.save(model, str(tmp / "model.onnx"))
    return tmp / "model.onnx", config


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_site_inside_model_local_functions_is_found_and_checked(case: InFunction, tmp_path: Path,
                                                                  capsys) -> None:  # noqa: ANN001
    model, config = _build(tmp_path, case)
    code = main(["audit", str(model), "--hf-config", str(config), "--json", "--no-effects"])
    captured = capsys.readouterr()
    assert code == case.audit, captured.err
    if code == 2:
        err = captured.err.strip()
        assert err.count("\n") == 0 and err.startswith("ropeexport: error: MODEL") and case.phrase in err, err
        return
    sites = json.loads(captured.out)["sites"]
    (inside,) = [s for s in sites if s.get("functions")]  # the rotation inside the function: found, said where
    assert inside["functions"] == [case.origin] and inside["layers"] == [0], inside  # the layer its call names
    names = [f["name"] for f in inside["findings"]]
    assert names == ([] if case.finding is None else [case.finding]) and inside["exact"] is (case.finding is None)
    assert len(sites) == (1 if case.main is None else 2)
    if case.main is not None:
        (own,) = [s for s in sites if not s.get("functions")]
        assert own["exact"] is (case.main == "exact") and own["layers"] == [1], own


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_graft_keeps_functions_where_it_can_and_says_when_it_inlines(case: InFunction, tmp_path: Path,
                                                                     capsys) -> None:  # noqa: ANN001
    model, config = _build(tmp_path, case)
    out = tmp_path / "fixed" / "model.onnx"
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["graft", str(model), "--hf-config", str(config), "--out", str(out), "--trust", "config", "--json"])
    captured = capsys.readouterr()
    assert code == case.graft, captured.err
    if code == 2:
        err = captured.err.strip()
        assert err.count("\n") == 0 and case.phrase in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
        return
    result = json.loads(captured.out)
    assert result["proven"] and result["after"]["verdict"] == "exact", result
    written = onnx.load(str(out))
    functions = result["functions"]
    names = ["local:Block", "local:Rot"] if case.depth == 2 else ["local:Rot"]
    if case.functions == "kept":  # no repaired site inside one: the model as it was written, functions and all
        assert functions == {"kept": names} and sorted(f"{f.domain}:{f.name}" for f in written.functions) == names
    else:
        assert functions["inlined"] == names and case.origin.split(" > ")[-1] in functions["why"], functions
        assert not written.functions
        assert not any(p.key == "ropeexport.function" for n in written.graph.node for p in n.metadata_props)
    assert rx.audit(out, config, effects=False).verdict == "exact"


def test_a_call_the_inliner_cannot_inline_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """onnx's inliner failing (here made to) is exit 2 naming the functions, never a model read without them."""
    import onnx.inliner

    model, config = _build(tmp_path, CASES[0])

    def fails(*_: object, **__: object) -> onnx.ModelProto:
        raise RuntimeError("planted failure\nsecond line")

    monkeypatch.setattr(onnx.inliner, "inline_local_functions", fails)
    assert main(["audit", str(model), "--hf-config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "model-local functions (local:Rot) cannot be inlined" in err, err
    assert "planted failure" in err


def _attention(do_rotary: int, in_if: bool = False) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """com.microsoft Attention on its own hidden input [1, s, 64] with ``do_rotary`` (ORT loads it; its CPU kernel
    refuses the rotary only when it runs, its CUDA one rotates), in the main graph or inside an If branch.
    """  # noqa: D205
    width = HEADS * D
    inits = [numpy_helper.from_array(np.zeros((width, 3 * width), np.float32), "attn_w"),
             numpy_helper.from_array(np.zeros(3 * width, np.float32), "attn_b"),
             numpy_helper.from_array(np.array(True), "always")]  # fmt: skip
    node = helper.make_node("Attention", ["hidden", "attn_w", "attn_b"], ["fused_out"], name="fused",
                            domain="com.microsoft", num_heads=HEADS, do_rotary=do_rotary)  # fmt: skip
    if not in_if:
        return [node], inits
    branch = helper.make_graph([node], "branch", [], [_io("fused_out", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["hidden"], ["same"])], "other", [],
                              [_io("same", TensorProto.FLOAT, None)])  # fmt: skip
    return [helper.make_node("If", ["always"], ["fused_if"], name="branching", then_branch=branch,
                             else_branch=other)], inits  # fmt: skip


# (case, do_rotary, inside an If branch, exit code, a phrase of the one line); the Attention added beside an exact
# RotaryEmbedding. GroupQueryAttention's do_rotary is read (a site of its own): the planted suite's GQA models audit
# exact, none refused.
UNREAD = [
    ("attention-do-rotary", 1, False, 2,
     "com.microsoft Attention 'fused' rotates with its built-in rotary (do_rotary=1), which the audit does not read"),
    ("attention-do-rotary-in-if", 1, True, 2, "com.microsoft Attention 'fused' (in subgraph 'branch') rotates"),
    ("attention-without-rotary", 0, False, 0, ""),
]  # fmt: skip


@pytest.mark.parametrize(("case", "rotary", "in_if", "code", "phrase"), UNREAD, ids=[u[0] for u in UNREAD])
def test_a_rotation_the_audit_does_not_read_is_exit_2_naming_it(case: str, rotary: int, in_if: bool, code: int,
                                                                phrase: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from tests.audits.planted import rotary23_model

    config = write_config(tmp_path, "default")
    path = rotary23_model(tmp_path / "model.onnx", *tables(rx.from_hf_config(config)[0], P))
    model = onnx.load(str(path))
    nodes, inits = _attention(rotary, in_if)
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(inits)
    model.graph.input.append(_io("hidden", TensorProto.FLOAT, [1, "s", HEADS * D]))
    model.graph.output.append(_io(nodes[0].output[0], TensorProto.FLOAT, None))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, str(path))
    assert main(["audit", str(path), "--hf-config", str(config), "--no-effects"]) == code
    err = capsys.readouterr().err.strip()
    if code == 2:
        assert err.count("\n") == 0 and err.startswith("ropeexport: error: MODEL") and phrase in err, err
