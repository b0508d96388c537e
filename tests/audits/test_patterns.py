"""The site patterns' registry: one module per form an exporter writes, one list naming them all (and only them),
each pattern finding its own form alone and within the whole walk.
"""  # noqa: D205

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import ropeexport as rx
from ropeexport.audits import patterns
from ropeexport.audits.patterns import PATTERNS, SiteKind, Walk
from ropeexport.audits.sites import find_sites
from tests.audits.planted import (
    CASES,
    alibi_lengths_model,
    alibi_model,
    gqa_model,
    rotary23_model,
    rotary_ms_model,
    tables,
    write_config,
)
from tests.audits.split_table import sincos, split_table_model

PACKAGE = Path(patterns.__file__).parent


def test_every_pattern_module_is_listed_and_the_list_names_only_modules() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "base"}
    named = [p.name for p in PATTERNS]
    assert len(named) == len(set(named)), named
    assert set(named) == modules, f"not listed: {modules - set(named)}; listed, no module: {set(named) - modules}"
    for name in modules:
        module = importlib.import_module(f"ropeexport.audits.patterns.{name}")
        assert module.PATTERN in PATTERNS and module.PATTERN.name == name


def test_every_site_kind_is_reported_by_some_pattern() -> None:
    # the one kind no pattern finds: a 2-D vision rotation, read by running the whole model (``audits.vision``)
    assert {kind for p in PATTERNS for kind in p.kinds} == set(SiteKind) - {SiteKind.VISION}
    assert {p.encoding for p in PATTERNS} == {"rope", "alibi"}


def _tables(tmp: Path, config: str = "llama3") -> tuple[np.ndarray, np.ndarray]:
    return tables(rx.from_hf_config(write_config(tmp, config))[0], 4096)


def _own(graph: str, config: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        spec = rx.from_hf_config(write_config(tmp, config), graphs=[graph])[0]
        onnx.save(rx.export(spec), str(tmp / "own.onnx"))
        return tmp / "own.onnx"

    return make


def _lonely_cos(tmp: Path) -> Path:
    init = numpy_helper.from_array(np.arange(4, dtype=np.float32), "angle")
    io = [helper.make_tensor_value_info("lonely", TensorProto.FLOAT, [4])]
    graph = helper.make_graph([helper.make_node("Cos", ["angle"], ["lonely"])], "g", [], io, [init])
    onnx.save(helper.make_model(graph), str(tmp / "cos.onnx"))
    return tmp / "cos.onnx"


def _computed(tmp: Path) -> Path:
    return next(c for c in CASES if c.name == "exact-computed-default").build(
        tmp / "computed.onnx", rx.from_hf_config(write_config(tmp, "default"))[0]
    )


def _alibi_lengths(tmp: Path) -> Path:
    from ropeexport.families.alibi.reference import spec_slopes

    slopes = spec_slopes(rx.from_hf_config(write_config(tmp, "alibi12"))[0])
    return alibi_lengths_model(tmp / "alibi-lengths.onnx", slopes)


def _alibi(tmp: Path) -> Path:
    from ropeexport.families.alibi.reference import spec_slopes

    return alibi_model(tmp / "alibi.onnx", spec_slopes(rx.from_hf_config(write_config(tmp, "alibi12"))[0]))


# (pattern, a model of its form, the kinds it reports there)
FORMS: list[tuple[str, Callable[[Path], Path], list[SiteKind]]] = [
    ("gqa", lambda t: gqa_model(t / "gqa.onnx", *_tables(t)), [SiteKind.GROUP_QUERY_ATTENTION]),
    ("rotary_microsoft", lambda t: rotary_ms_model(t / "ms.onnx", *_tables(t)), [SiteKind.ROTARY_MICROSOFT]),
    ("rotary_onnx", lambda t: rotary23_model(t / "r23.onnx", *_tables(t)), [SiteKind.ROTARY_ONNX]),
    ("rotary_onnx", _own("fused", "llama3"), [SiteKind.ROTARY_ONNX]),
    ("gathered", _own("decomposed", "llama3"), [SiteKind.GATHERED]),
    ("gathered", _own("decomposed", "dynamic"), [SiteKind.COMPUTED]),  # the If between a table and computed cos/sin
    ("computed", _computed, [SiteKind.COMPUTED]),
    ("split_table", lambda t: split_table_model(t / "split.onnx", sincos()), [SiteKind.SPLIT]),  # GPT-J's sin|cos
    ("unidentified", _lonely_cos, [SiteKind.UNIDENTIFIED]),
    ("alibi_bias", _alibi, [SiteKind.ALIBI] * 2),  # the bias and the additive mask: its values drop the mask
    ("alibi_bias", _alibi_lengths, [SiteKind.ALIBI]),  # positions from the lengths of input_ids and the cache
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "kinds"), FORMS, ids=[f"{f[0]}-{i}" for i, f in enumerate(FORMS)])
def test_each_pattern_finds_its_form_alone_and_in_the_walk(name: str, make, kinds, tmp_path: Path) -> None:  # noqa: ANN001
    pattern = next(p for p in PATTERNS if p.name == name)
    model = ir.load(make(tmp_path))
    alone = pattern.find(model.graph, Walk(model.graph))
    assert [s.kind for s in alone] == kinds
    walked = find_sites(model, pattern.encoding)
    assert [s.kind for s in walked] == kinds  # no earlier pattern claims it, no later one reports it again
    assert all(s.scope == () and "graph" not in s.to_dict() for s in walked)


def _cast_before_lookups(stored: int, to: int) -> Callable[[Path], Path]:
    """ropeexport's decomposed encoding with its tables stored as ``stored`` and cast to ``to`` before their lookups
    (what ONNX Runtime's optimizer does to a float16 table read by an operator it has no float16 kernel for).
    """  # noqa: D205
    def make(tmp: Path) -> Path:
        model = onnx.load(str(_own("decomposed", "llama3")(tmp)))
        for table in [t for t in model.graph.initializer if t.name.endswith(("cos_table", "sin_table"))]:
            values = numpy_helper.to_array(table).astype(helper.tensor_dtype_to_np_dtype(stored))
            table.CopyFrom(numpy_helper.from_array(values, table.name))
            for node in model.graph.node:
                node.input[:] = [f"{table.name}_cast" if i == table.name else i for i in node.input]
            model.graph.node.insert(0, helper.make_node("Cast", [table.name], [f"{table.name}_cast"], to=to))
        onnx.save(model, str(tmp / "cast.onnx"))
        return tmp / "cast.onnx"

    return make


# (stored, cast to, the table read as stored): a widening Cast keeps every value; a narrowing one rounds them, and the
# stored table is not what the lookups read
CASTS = [(TensorProto.FLOAT16, TensorProto.FLOAT, True), (TensorProto.FLOAT, TensorProto.FLOAT16, False)]


@pytest.mark.fast
@pytest.mark.parametrize(("stored", "to", "read"), CASTS, ids=["widening", "narrowing"])
def test_gathered_tables_are_read_through_a_cast_that_keeps_their_values(stored: int, to: int, read: bool,
                                                                         tmp_path: Path) -> None:  # fmt: skip
    model = ir.load(_cast_before_lookups(stored, to)(tmp_path))
    sites = find_sites(model, "rope")
    assert [s.kind for s in sites] == ([SiteKind.GATHERED] if read else [])
    if read:  # the stored initializers, their lookups the readers
        assert sites[0].cos.endswith("cos_table") and sites[0].sin.endswith("sin_table"), sites[0]
        assert [n.op_type for n in sites[0].readers] == ["Gather", "Gather"]
