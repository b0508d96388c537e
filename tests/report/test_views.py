"""The typed report views (``ropeexport.report.views``) against the reports ropeexport's writers make.

``test_every_field_reads_what_the_writers_write`` builds tiny artifacts of each kind once (a RoPE artifact verified on
ORT and the ONNX reference with TensorRT skipped, then verified again; a Transformer-XL artifact; the encoding of a
config that names its layers; a checkpoint layer's block; an int4 LongRoPE decoder with transformers as a reference,
verified again on the ONNX reference alone; an fp16 mixture of experts; the seeded decoder verified again on two
runtimes), adds what the writers give on failure (a table of the wrong shape, a comparison whose call raised, a runtime
that raised), and reads every field of every view on each: nothing raises, each value has its declared type, and every
field the writers write only sometimes is seen written at least once (a key renamed in a writer fails there, not as a
silent None). The other tests hold what a view does with what it reads.
"""

from __future__ import annotations

import shutil
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.catalog import spec_from_dict
from ropeexport.errors import ArtifactError
from ropeexport.report import views
from ropeexport.report.views import DecoderReport, EncodingReport, Field, ScenarioRerun, View, read_report
from ropeexport.requests import from_hf_config

# (view, field) the fixture's artifacts never write, with why; every other optional field must be seen written.
NOT_WRITTEN: dict[tuple[str, str], str] = {
    ("RoutingFlip", "key_in"): "an indexer's flip only; the fixture's mixture (gpt_oss fp16) flips a router: read "
    "where an fp16 deepseek_v32 writes one (tests/decoder/test_routing.py, its indexer near tie)",
    ("RoutingFlip", "key_out"): "as key_in",
}


def _values(view: View) -> Iterator[tuple[View, str, Field[Any], Any]]:
    """(view, attribute, field, value) of every field of ``view`` and of the views it holds, depth first."""
    for name, field in type(view).fields().items():
        value = getattr(view, name)
        yield view, name, field, value
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, View):
                yield from _values(item)


def _declared(field: Field[Any]) -> Any:
    """The type a field says it gives (``Field[T]``'s T)."""
    return typing.get_args(field.__orig_class__)[0]  # type: ignore[attr-defined]


def _fits(value: Any, hint: Any) -> bool:
    """``value`` is of the type ``hint`` (float takes an int, as in JSON; JsonObject is a dict)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _raising_runtime(folder: Path) -> list[dict[str, Any]]:
    """``decoder.runs``' record of a runtime that raises on a valid call (its ``error``), through the registry."""
    from ropeexport.decoder.runs import run_on
    from ropeexport.runtimes import RUNTIMES
    from ropeexport.runtimes.base import Runner

    class Raising(Runner):
        def __init__(self) -> None:
            self.model_path, self.checker = None, None

        def describe(self) -> str:
            return "raising"

        def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            raise ValueError("no kernel")

    def verify(name: str, infer: Any, release: Any) -> list[dict[str, Any]]:
        infer({})
        return []

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(RUNTIMES, "raising", lambda path, cpu_only: Raising())
        return run_on(["raising"], folder / "model.onnx", verify)


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Any, seeded_decoder: Path) -> list[View]:
    """Every report and result row the tiny artifacts give, as views (module doc)."""
    from ropeexport.families.rope.probes import check_tables
    from ropeexport.verification.compare import Comparison

    out = tmp_path_factory.mktemp("views")
    found: list[View] = []
    # an encoding: rope, partial rotation (a property curve, tables with their worst row), ORT and the ONNX reference
    # verified, TensorRT skipped; verified again (the optimizer's record)
    rope = rx.spec("rope", name="rope", max_positions=64, num_heads=2, num_kv_heads=1, head_dim=16, rotary_dim=8)
    built = rx.build(rope, out / "enc", runtimes=["ort", "onnx-reference", "trt"])
    (again,) = rx.verify(built.path)
    found += [built.encoding_report, again.encoding_report, read_report(built.path, EncodingReport)]
    # a table whose shape is wrong (its reason), and a comparison whose call failed (the worst element's error)
    other = rx.spec("rope", name="other", max_positions=32, num_heads=2, num_kv_heads=1, head_dim=16)
    found += [views.TableRecord(t) for t in check_tables(other, built.path / "model.onnx")]
    failed = Comparison("eager", "ort", "query_out", "fp32", 1e-5, 1e-5)
    failed.fail("probe", "RuntimeError: boom")
    found.append(views.ComparisonRecord(failed.to_dict()))
    xl = rx.build(rx.spec("transformer-xl", name="xl", max_positions=16), out / "enc")  # the table's worst distance
    found.append(xl.encoding_report)
    # a config that names its layers (SmolLM3: every 4th without RoPE): its encoding's artifact says which use it
    transformers = pytest.importorskip("transformers")
    transformers.AutoConfig.for_model("smollm3", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, max_position_embeddings=256,
                                      num_hidden_layers=4).save_pretrained(out / "smollm3")  # fmt: skip
    jobs = from_hf_config(out / "smollm3" / "config.json")
    layered = rx.build_all([spec_from_dict(j.fields) for j in jobs], out / "layers",
                           provenance=[(j.origin, j.sources) for j in jobs])  # fmt: skip
    found += [r.encoding_report for r in layered]
    # a checkpoint layer's block (the third kind of artifact folder: an encoding's report, its block's probes)
    found.append(rx.build_layer_block(tiny_checkpoint("llama"), out / "block", layer=1).encoding_report)
    # decoders: int4 LongRoPE with transformers (the quantization cost, regime costs, stale rows), verified again on
    # the ONNX reference alone (skipped: ORT's fallback); an fp16 mixture of experts (routing flips); the seeded
    # decoder verified on two runtimes (the second's own scenarios, the rows beside the stored ones)
    int4 = rx.build_decoder(out / "dec", checkpoint=tiny_checkpoint("phi3-longrope"), weight_format="int4")
    (fallback,) = rx.verify(int4.path, runtimes=["onnx-reference"])
    moe = rx.build_decoder(out / "dec", checkpoint=tiny_checkpoint("gpt_oss"), graph="decomposed", dtype="fp16",
                           eager=False)  # fmt: skip
    seeded = out / "seeded" / seeded_decoder.name
    shutil.copytree(seeded_decoder, seeded)
    (both,) = rx.verify(seeded, runtimes=["ort", "onnx-reference"])
    found += [int4.decoder_report, fallback.decoder_report, moe.decoder_report, both.decoder_report,
              read_report(both.path, DecoderReport), DecoderReport(both.stored)]  # fmt: skip
    found += [ScenarioRerun(row) for verdict in both.runtimes for row in verdict.scenarios]
    found += [views.DecoderRuntimeRecord(r) for r in _raising_runtime(out)]
    return found


@pytest.mark.slow
def test_every_field_reads_what_the_writers_write(written: list[View]) -> None:
    seen: dict[tuple[str, str], bool] = {}  # (view, field) -> written at least once
    reached: set[type] = set()
    wrong = []
    for root in written:
        for view, name, field, value in _values(root):
            reached.add(type(view))
            key = (type(view).__name__, name)
            seen[key] = seen.get(key, False) or field.key in view.data
            if not _fits(value, _declared(field)):
                wrong.append(f"{view.where(field.key)}: {value!r:.80} is not {_declared(field)}")
            if isinstance(view, views.WorstElement):
                assert isinstance(view.location, dict)
            if isinstance(view, views.ProbeRecord):
                assert view.shapes and all(isinstance(s, list) for s in view.shapes.values())
    assert not wrong, "\n".join(wrong)
    every = {getattr(views, n) for n in views.__all__} - {Field, View, read_report}
    assert every <= reached, f"views no report reached: {sorted(v.__name__ for v in every - reached)}"
    never = {k for k, written_ in seen.items() if not written_}
    assert never == set(NOT_WRITTEN), f"fields no writer wrote here (a key renamed?): {sorted(never)}"


def _decoder_report() -> dict[str, Any]:
    call = {"index": 0, "kind": "prefill", "float64": {"max_abs": 1e-6, "rel": 1e-7, "scale": 10.0}}
    return {"artifact": "decoder", "name": "d", "passed": True, "tolerance": {"rel": 1e-4, "of": "the logit scale"},
            "scenarios": [{"name": "decode-64", "summary": {"worst_rel": 2e-7, "agreement": "65/65"},
                           "calls": [call]}]}  # fmt: skip


# (case, the report, what is read from its view, the error's line)
BAD: list[tuple[str, dict[str, Any], Any, str]] = [
    ("a field missing", {"artifact": "decoder"}, lambda r: r.scenarios,
     "report.json scenarios: is missing (ropeexport writes it"),
    ("a nested field missing", _decoder_report(), lambda r: r.scenarios[0].summary.first_divergence,
     "report.json scenarios[0].summary.first_divergence: is missing"),
    ("a list item missing a field", _decoder_report(), lambda r: r.scenarios[0].calls[0].tokens,
     "report.json scenarios[0].calls[0].tokens: is missing"),
    ("a number that is text", _decoder_report() | {"seconds": "slow"}, lambda r: r.seconds,
     'report.json seconds: is "slow", not int or float'),
    ("a bool is not a number", _decoder_report() | {"seconds": True}, lambda r: r.seconds,
     "report.json seconds: is true, not int or float"),
    ("null where the writer never writes it", _decoder_report() | {"passed": None}, lambda r: r.passed,
     "report.json passed: is null, not bool"),
    ("a list item that is not an object", _decoder_report() | {"scenarios": [3]}, lambda r: r.scenarios,
     "report.json scenarios[0]: must be a JSON object, got int"),
    ("an encoding's report read as a decoder's", {"artifact": "rope"}, lambda r: r,
     "report.json artifact: is 'rope': read it as an EncodingReport"),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "report", "read", "text"), BAD, ids=[b[0] for b in BAD])
def test_a_field_that_does_not_read_is_named(case: str, report: dict[str, Any], read: Any, text: str) -> None:
    with pytest.raises(ArtifactError) as raised:
        read(DecoderReport(report))
    assert str(raised.value).startswith(text), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.fast
def test_a_decoder_report_read_as_an_encodings_is_refused() -> None:
    with pytest.raises(ArtifactError, match="^report.json artifact: is 'decoder': read it as a DecoderReport$"):
        EncodingReport(_decoder_report())


# a router's flip and an indexer's as ``decoder.verify`` writes them (the indexer's: fp16 deepseek_v32's, measured)
ROUTER_FLIP = {"layer": 1, "row": 0, "slot": 39, "margin": 1.5e-3}
INDEXER_FLIP = {"layer": 1, "row": 0, "slot": 68, "margin": 7.7e-4, "key_in": 22, "key_out": 17}

# (case, the field, the report, what it reads as)
OPTIONAL: list[tuple[str, Any, dict[str, Any], Any]] = [
    ("absent: None", lambda r: r.scenarios[0].summary.cost_rel, _decoder_report(), None),
    ("absent with a meaning: False", lambda r: r.runtimes[0].fallback,
     _decoder_report() | {"runtimes": [{"name": "ort", "status": "verified"}]}, False),
    ("nullable and null", lambda r: r.runtimes[0].worst_rel,
     _decoder_report() | {"runtimes": [{"name": "ort", "status": "verified", "worst_rel": None}]}, None),
    ("present", lambda r: r.scenarios[0].calls[0].float64.rel, _decoder_report(), 1e-7),
    ("a router's flip: no key in", lambda r: r.scenarios[0].calls[0].routing_flips[0].key_in,
     _decoder_report() | {"scenarios": [{"calls": [{"routing_flips": [ROUTER_FLIP]}]}]}, None),
    ("an indexer's flip: the key it took in", lambda r: r.scenarios[0].calls[0].routing_flips[0].key_in,
     _decoder_report() | {"scenarios": [{"calls": [{"routing_flips": [INDEXER_FLIP]}]}]}, 22),
    ("an indexer's flip: the key it left out", lambda r: r.scenarios[0].calls[0].routing_flips[0].key_out,
     _decoder_report() | {"scenarios": [{"calls": [{"routing_flips": [INDEXER_FLIP]}]}]}, 17),
    ("renamed in the view, read by its key", lambda r: r.scenarios[0].calls[0].length,
     _decoder_report() | {"scenarios": [{"calls": [{"L": 12}]}]}, 12),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "read", "report", "expected"), OPTIONAL, ids=[o[0] for o in OPTIONAL])
def test_what_a_field_reads_as(case: str, read: Any, report: dict[str, Any], expected: Any) -> None:
    assert read(DecoderReport(report)) == expected


@pytest.mark.fast
def test_a_view_reads_the_dict_it_wraps_not_a_copy() -> None:
    report = _decoder_report()
    view = DecoderReport(report)
    assert view.data is report and view.scenarios[0].data is report["scenarios"][0]
    report["scenarios"][0]["summary"]["worst_rel"] = 0.5
    assert view.scenarios[0].summary.worst_rel == 0.5
    with pytest.raises(AttributeError):
        view.passed = False  # type: ignore[misc]


# (case, the view, the fields asked about, the object, the fields it lacks)
LACKS: list[tuple[str, type[View], tuple[str, ...], dict[str, Any], list[str]]] = [
    ("every field held", DecoderReport, ("name", "passed"), {"name": "d", "passed": True}, []),
    ("one missing", DecoderReport, ("name", "passed", "seconds"), {"name": "d", "passed": True}, ["seconds"]),
    ("a field the view names apart from its key", views.CallRecord, ("length",), {"L": 12}, []),
    ("none asked: every field", DecoderReport, (), {}, list(DecoderReport.fields())),
]  # fmt: skip


@pytest.mark.fast
@pytest.mark.parametrize(("case", "view", "names", "data", "lacking"), LACKS, ids=[c[0] for c in LACKS])
def test_lacks_names_the_fields_an_object_does_not_hold(case: str, view: type[View], names: tuple[str, ...],
                                                         data: dict[str, Any], lacking: list[str]) -> None:  # fmt: skip
    assert view(data).lacks(*names) == lacking


@pytest.mark.fast
def test_lacks_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(AttributeError, match="^DecoderReport has no field 'worst'; its fields: artifact, name, "):
        DecoderReport({}).lacks("worst")
