"""``ropeexport audit`` on the command line: exit codes, the report files, and bad input as one line with exit 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ropeexport as rx
from ropeexport.cli import main
from tests.audits.planted import (
    CASES,
    ORT_REFUSES,
    external,
    longrope_with,
    ort_refused,
    sparse_external,
    write_config,
)

EXACT = next(c for c in CASES if c.name == "exact-gqa-llama3")
FAULT = next(c for c in CASES if c.name == "scaling-ignored-llama3")


def _case(tmp: Path, case=EXACT) -> tuple[Path, Path]:  # noqa: ANN001
    config = write_config(tmp, case.config)
    return case.build(tmp / "model.onnx", rx.from_hf_config(config)[0]), config


@pytest.mark.parametrize(("case", "code"), [(EXACT, 0), (FAULT, 1)], ids=["exact", "fault"])
def test_exit_code_report_files_and_json(case, code: int, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _case(tmp_path, case)
    out = tmp_path / "report"
    assert main(["audit", str(model), "--hf-config", str(config), "--out", str(out), "--json"]) == code
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((out / "audit.json").read_text())
    assert printed == written and written["verdict"] == ("exact" if code == 0 else "findings")
    assert written["sites"][0]["kind"] == "GroupQueryAttention do_rotary"
    markdown = (out / "audit.md").read_text()
    assert f"# ropeexport audit: {written['verdict']}" in markdown and "| call length L |" in markdown
    if code:
        assert "rope_scaling ignored" in markdown
    assert main(["audit", str(model), "--hf-config", str(config), "--out", str(out)]) == code  # a rerun updates it
    assert sorted(p.name for p in out.iterdir()) == ["audit.html", "audit.json", "audit.md", "manifest.json"]
    assert sorted(json.loads((out / "manifest.json").read_text())["files"]) == ["audit.html", "audit.json", "audit.md"]
    page = (out / "audit.html").read_text()
    assert f"ropeexport audit: {written['verdict']}" in page and page.count("data:image/png;base64,") == 1
    probes = written["sites"][0]["probes"]
    assert all(max(p["curve"]["y"]) == p["max_abs"] and len(p["curve"]["x"]) <= 256 for p in probes)


def test_no_effects_names_the_same_findings_without_running_the_model(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    model, config = _case(tmp_path, FAULT)
    assert main(["audit", str(model), "--hf-config", str(config), "--json"]) == 1
    measured = json.loads(capsys.readouterr().out)["findings"]
    assert measured and all(f["effect"] != {"not_measured": "not asked"} for f in measured), measured  # tried

    def run_not(*_: object) -> None:
        raise AssertionError("--no-effects measured an effect")

    monkeypatch.setattr("ropeexport.audits.effect.Measure.finding", run_not)
    assert main(["audit", str(model), "--hf-config", str(config), "--json", "--no-effects"]) == 1
    skipped = json.loads(capsys.readouterr().out)["findings"]
    assert [f["text"] for f in skipped] == [f["text"] for f in measured]
    assert all(f["effect"] == {"not_measured": "not asked"} for f in skipped), skipped
    assert main(["audit", str(model), "--hf-config", str(config), "--no-effects"]) == 1
    printed = capsys.readouterr().out
    assert "rope_scaling ignored" in printed and "unmeasured: not asked" in printed, printed


def _text(tmp: Path) -> tuple[Path, Path]:
    model, config = _case(tmp)
    model.write_text("not a model")
    return model, config


def _no_rope(tmp: Path) -> tuple[Path, Path]:
    _, config = _case(tmp)
    node = helper.make_node("Add", ["x", "x"], ["y"])
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x", "y")]
    path = tmp / "add.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "g", io[:1], io[1:])), str(path))
    return path, config


def _wide_config(tmp: Path) -> tuple[Path, Path]:
    model, config = _case(tmp)
    fields = json.loads(config.read_text()) | {"head_dim": 32}
    config.write_text(json.dumps(fields))
    return model, config


def _outside(tmp: Path) -> tuple[Path, Path]:
    """The model's tables in a file beside its folder, named ../outside.bin (onnx itself refuses to write that)."""
    model, config = _case(tmp)
    inner = tmp / "inner"
    inner.mkdir()
    proto = onnx.load(str(model))
    onnx.save(proto, str(inner / "model.onnx"), save_as_external_data=True, location="outside.bin", size_threshold=0)
    (inner / "outside.bin").rename(tmp / "outside.bin")
    proto = onnx.load(str(inner / "model.onnx"), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../outside.bin"
    (inner / "model.onnx").write_bytes(proto.SerializeToString())
    return inner / "model.onnx", config


def _alibi_heads(tmp: Path) -> tuple[Path, Path]:
    """A 12-head ALiBi model audited against an 8-head config."""
    import ropeexport as rx
    from ropeexport.families.alibi.reference import spec_slopes
    from tests.audits.planted import alibi_model, write_config

    twelve = rx.from_hf_config(write_config(tmp, "alibi12"))[0]
    return alibi_model(tmp / "model.onnx", spec_slopes(twelve)), write_config(tmp, "alibi8")


def _alibi(tmp: Path) -> tuple[Path, Path]:
    model, _ = _case(tmp)
    path = tmp / "bloom.json"
    path.write_text(json.dumps({"model_type": "bloom", "n_head": 4, "hidden_size": 64, "n_layer": 1}))
    return model, path


def _declared_positions(value: str) -> Callable[[Path], tuple[Path, Path]]:
    """The exact model claiming ``ropeexport.max_positions`` = ``value``."""

    def make(tmp: Path) -> tuple[Path, Path]:
        model, config = _case(tmp)
        proto = onnx.load(str(model))
        onnx.helper.set_model_props(proto, {"ropeexport.max_positions": value})
        onnx.save(proto, str(model))
        return model, config

    return make


def _missing_config(tmp: Path) -> tuple[Path, Path]:
    model, _ = _case(tmp)
    return model, tmp / "absent.json"


def _ort_refuses(how: str) -> Callable[[Path], tuple[Path, Path]]:
    def make(tmp: Path) -> tuple[Path, Path]:
        model, config = _case(tmp)
        return ort_refused(model, how), config

    return make


def _branch_initializer(model: onnx.ModelProto, folder: Path) -> None:
    """An initializer of the If's then branch (read by nothing) kept in ../branch.bin."""
    branch = next(a.g for n in model.graph.node if n.op_type == "If" for a in n.attribute if a.name == "then_branch")
    branch.initializer.append(numpy_helper.from_array(np.ones(4, np.float32), "branch_extra"))
    external(model, "branch_extra", folder, "../branch.bin")


# (name, how the builder's LongRoPE model's external data is planted): every tensor anywhere is checked first
EXTERNAL = {
    "constant-in-if-reads-the-working-directory": (lambda m, f: external(m, "large_cos", f.parent, "secret.bin"),
                                                   "which does not exist"),
    "constant-in-if-outside": (lambda m, f: external(m, "large_cos", f, "../secret.bin"), "outside the model's folder"),
    "subgraph-initializer-outside": (_branch_initializer, "outside the model's folder"),
    "sparse-initializer-outside": (lambda m, f: sparse_external(m, f, "../sparse.bin"), "outside the model's folder"),
    "offset-past-the-file": (lambda m, f: external(m, "large_cos", f, "t.bin", offset=1 << 30), "at offset 1073741824"),
    "length-not-dims-times-size": (lambda m, f: external(m, "large_cos", f, "t.bin", length=12), "take 131072 bytes"),
    "dims-past-the-file": (lambda m, f: external(m, "large_cos", f, "t.bin", offset=8), "which has 131072"),
}  # fmt: skip


# (name, inputs maker, extra argv, the flag the one-line error names, a phrase of it)
BAD: list[tuple[str, Callable[[Path], tuple[Path, Path]], list[str], str, str]] = [
    ("not-onnx", _text, [], "MODEL", "is not an ONNX model"),
    ("missing-model", lambda t: (t / "absent.onnx", _case(t)[1]), [], "MODEL", "is not a file"),
    ("no-rotary-site", _no_rope, [], "MODEL", "has no rotary position encoding"),
    ("config-not-this-model", _wide_config, [], "--hf-config", "does not describe this model"),
    ("external-data-outside", _outside, [], "MODEL", "outside the model's folder"),
    ("alibi-config-for-a-rotary-model", _alibi, [], "MODEL", "has no ALiBi bias ropeexport can find"),
    ("alibi-heads-not-this-model", _alibi_heads, [], "--hf-config", "describes 8 heads but the bias"),
    ("missing-config", _missing_config, [], "--hf-config", ""),
    *((f"declared-positions-{v or 'empty'}", _declared_positions(v), [], "MODEL", "is not a positive integer")
      for v in ("", "0", "-5", "4096.0", "١٢")),
    ("out-not-an-audit", lambda t: _case(t), ["--out", "{tmp}"], "--out", "holds no audit"),
    *((f"ort-refuses-{how}", _ort_refuses(how), [], "MODEL", "ONNX Runtime refuses") for how in ORT_REFUSES),
    *((f"external-{name}", lambda t, c=change: longrope_with(t, c), [], "MODEL", phrase)
      for name, (change, phrase) in EXTERNAL.items()),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "argv", "flag", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(case, make, argv, flag, phrase, tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001, E501
    monkeypatch.chdir(tmp_path)  # a file the model names relative to the working directory is there, and never read
    model, config = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["audit", str(model), "--hf-config", str(config), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith(f"ropeexport: error: {flag}") and phrase in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_site_read_by_many_layers_is_one_site_and_unknown_cos_is_reported(tmp_path: Path) -> None:
    """Two attention nodes on one cache pair: one site, both readers listed; a lone Cos: an unidentified site."""
    model, config = _case(tmp_path)
    proto = onnx.load(str(model))
    gqa = next(n for n in proto.graph.node if n.op_type == "GroupQueryAttention")
    second = onnx.NodeProto()
    second.CopyFrom(gqa)
    second.name = "/model/layers.1/attn/GroupQueryAttention"
    second.output[:] = ["attn_1", "present_key_1", "present_value_1"]
    proto.graph.node.append(second)
    proto.graph.initializer.append(numpy_helper.from_array(np.arange(4, dtype=np.float32), "angle"))
    proto.graph.node.append(helper.make_node("Cos", ["angle"], ["lonely"], name="lonely_cos"))
    proto.graph.output.append(helper.make_tensor_value_info("lonely", TensorProto.FLOAT, [4]))
    onnx.save(proto, str(model))
    result = rx.audit(model, config)
    kinds = [s["kind"] for s in result.sites]
    assert kinds == ["GroupQueryAttention do_rotary", "unidentified"]
    assert len(result.sites[0]["users"]) == 2 and result.sites[0]["exact"]
    assert result.verdict == "findings" and result.sites[1]["findings"][0]["name"] == "unidentified-site"
