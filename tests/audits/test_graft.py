"""``graft`` on foreign-style models: precision faults repaired and proven, schedule faults refused unless the
config is trusted, computed sites refused; bad input is one line, exit 2, nothing written.
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.cli import main
from ropeexport.families.rope.regimes import frequencies
from tests.audits.planted import (
    CASES,
    HEADS,
    KV,
    ORIGINAL,
    ORT_REFUSES,
    D,
    P,
    Planted,
    computed_model,
    external,
    gqa_model,
    longrope_with,
    ort_refused,
    rotary23_model,
    tables,
    write_config,
)


def _built(tmp: Path, name: str) -> tuple[Path, Path]:
    case = next(c for c in CASES if c.name == name)
    config = write_config(tmp, case.config)
    return case.build(tmp / "model.onnx", rx.from_hf_config(config)[0]), config


def _longrope_float32(tmp: Path) -> tuple[Path, Path]:
    """The builder's LongRoPE form (an If between a short and a long table), both tables with float32 angles."""
    config = write_config(tmp, "longrope")
    spec = rx.from_hf_config(config)[0]
    short = tables(spec, ORIGINAL, rows=ORIGINAL, f32=True)
    return gqa_model(tmp / "model.onnx", *short, long=tables(spec, ORIGINAL + 1, f32=True)), config


@pytest.mark.parametrize("name", ["float32-gqa-llama3", "longrope-if-float32", "float32-computed-default",
                                  "float32-computed-from-lengths"])  # fmt: skip
def test_precision_faults_are_grafted_and_proven(name: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _longrope_float32(tmp_path) if name.startswith("longrope") else _built(tmp_path, name)
    out = tmp_path / "fixed" / "model.onnx"
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["proven"] and result["before"] == "findings" and result["after"]["verdict"] == "exact"
    assert result["short_call"]["equal"] and result["short_call"]["relative"] <= 1e-4
    assert len(result["replaced"]) == (2 if name.startswith("longrope") else 1)  # each If branch its own regime
    if "computed" in name:  # cos/sin computed from positions (position_ids or lengths): the family's gathered rows
        assert result["replaced"][0]["layout"] == "half"
        assert [s["kind"] for s in result["after"]["sites"]] == ["gathered table"]
    if name.startswith("longrope"):
        assert sorted(r["regime_length"] for r in result["replaced"]) == [ORIGINAL, ORIGINAL + 1]
    assert rx.audit(out, config).verdict == "exact"  # the written file, read back


def test_a_schedule_fault_is_refused_unless_the_config_is_trusted(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _built(tmp_path, "scaling-ignored-llama3")
    out = tmp_path / "fixed.onnx"
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ropeexport: error: --trust: the model's tables imply another schedule") and "\n" not in err
    assert "scaling-ignored" in err and not out.exists()
    result = rx.graft(model, config, out, trust="config")
    assert result.proven and result.changed_schedule == ["scaling-ignored"] and result.after.verdict == "exact"


SWITCHLESS = {  # one table (the short regime's) where the config's LongRoPE switches: how each reader gets the switch
    "GroupQueryAttention": (gqa_model, "an If on total_sequence_length"),
    "RotaryEmbedding (opset 23)": (rotary23_model, "short and long tables stacked"),
}


@pytest.mark.parametrize("reader", list(SWITCHLESS))
def test_the_longrope_switch_is_added_where_the_model_has_one_table(reader: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, "longrope")
    spec = rx.from_hf_config(config)[0]
    build, how = SWITCHLESS[reader]
    model = build(tmp_path / "model.onnx", *tables(spec, ORIGINAL))
    before = rx.audit(model, config)
    assert "switch-never-taken" in {f["name"] for s in before.sites for f in s["findings"]}
    result = rx.graft(model, config, tmp_path / "fixed.onnx", trust="config")
    assert result.proven and result.after.verdict == "exact", result.to_dict()
    (replaced,) = result.replaced
    assert replaced["replaced_by"].startswith(how) and replaced["regime_length"] == f"switch at {ORIGINAL}"
    assert replaced["rows"] == P
    assert result.short_call["equal"]  # at 8 tokens the short regime, which the model already had


def test_a_grafted_switch_takes_each_rows_regime(tmp_path: Path) -> None:
    # RotaryEmbedding reads table rows by position: each row's positions shift to the long table by its own L_b, so a
    # row batched with a row past the switch is rotated as it is alone (the whole-batch rule would shift it too).
    import numpy as np
    import onnxruntime as ort

    config = write_config(tmp_path, "longrope")
    spec = rx.from_hf_config(config)[0]
    model = rotary23_model(tmp_path / "model.onnx", *tables(spec, ORIGINAL), batch="batch")
    rx.graft(model, config, tmp_path / "fixed.onnx", trust="config")
    session = ort.InferenceSession(str(tmp_path / "fixed.onnx"), providers=["CPUExecutionProvider"])
    positions = np.array([np.arange(8), np.arange(ORIGINAL - 4, ORIGINAL + 4)], np.int64)  # short, then long
    query = np.random.default_rng(0).standard_normal((2, 8, HEADS * D)).astype(np.float32)
    (batched,) = session.run(None, {"query": query, "position_ids": positions})
    for row in range(2):
        (alone,) = session.run(None, {"query": np.repeat(query[row : row + 1], 2, 0),
                                      "position_ids": np.repeat(positions[row : row + 1], 2, 0)})  # fmt: skip
        assert np.array_equal(batched[row], alone[0]), row
    (shifted,) = session.run(None, {"query": query, "position_ids": positions[[1, 1]]})
    assert np.abs(batched[0] - shifted[0]).max() > 1e-2  # the short row's rotation really differs under long


def test_a_grafted_gqa_switch_refuses_a_mixed_batch_at_run_time(tmp_path: Path) -> None:
    # GroupQueryAttention takes one cos/sin cache per call: rows on both sides of the switch cannot each get their
    # own, so the call fails (never one row rotated in the other's regime); a batch in one regime runs.
    import numpy as np
    import onnxruntime as ort

    config = write_config(tmp_path, "longrope")
    spec = rx.from_hf_config(config)[0]
    model = gqa_model(tmp_path / "model.onnx", *tables(spec, ORIGINAL), batch="batch")
    rx.graft(model, config, tmp_path / "fixed.onnx", trust="config")
    session = ort.InferenceSession(str(tmp_path / "fixed.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)

    def call(lengths: list[int]) -> None:  # one prompt per row, right-padded to the longest
        s = max(lengths)
        session.run(None, {"qkv": rng.standard_normal((2, s, (HEADS + 2 * KV) * D)).astype(np.float32),
                           "attention_mask": np.ones((2, s), np.int64),
                           "past_key": np.zeros((2, KV, 0, D), np.float32),
                           "past_value": np.zeros((2, KV, 0, D), np.float32),
                           "seqlens_k": np.array(lengths, np.int32) - 1,
                           "total_sequence_length": np.array(s, np.int32)})  # fmt: skip

    call([8, 5])
    call([ORIGINAL + 4, ORIGINAL + 1])
    with pytest.raises(Exception, match="mixed_regimes_refused"):
        call([ORIGINAL + 4, 5])


@pytest.mark.parametrize("name", ["alibi-naive-12-heads", "alibi-reversed", "alibi-one-slope-off"])
def test_alibi_slopes_are_grafted_when_the_config_is_trusted(name: str, tmp_path: Path) -> None:
    model, config = _built(tmp_path, name)
    result = rx.graft(model, config, tmp_path / "fixed.onnx", trust="config")
    assert result.proven and result.after.verdict == "exact" and result.changed_schedule == ["alibi-slopes"]
    (replaced,) = result.replaced
    assert replaced["slopes"] == "slopes" and replaced["heads"] == rx.from_hf_config(config)[0].num_heads


def test_stacked_short_and_long_tables_are_replaced_as_stacked(tmp_path: Path) -> None:
    """ropeexport's fused LongRoPE form (short and long tables stacked, rows shifted by the graph) with float32
    angles planted in both halves: each half gets its regime's exact table, the graph's own switch is kept.
    """  # noqa: D205
    import numpy as np
    import onnx
    from onnx import numpy_helper

    config = write_config(tmp_path, "longrope")
    spec = rx.from_hf_config(config)[0]
    model = rx.export(spec)
    short, long = tables(spec, ORIGINAL, f32=True), tables(spec, ORIGINAL + 1, f32=True)
    for init in model.graph.initializer:
        if init.name in ("cos_table", "sin_table"):
            part = 0 if init.name == "cos_table" else 1
            init.CopyFrom(numpy_helper.from_array(np.concatenate([short[part], long[part]]), init.name))
    onnx.save(model, str(tmp_path / "model.onnx"))
    before = rx.audit(tmp_path / "model.onnx", config)
    assert {f["name"] for s in before.sites for f in s["findings"]} == {"float32-angles"}
    result = rx.graft(tmp_path / "model.onnx", config, tmp_path / "fixed.onnx")
    assert result.proven and result.after.verdict == "exact", result.to_dict()
    assert [(r["regime_length"], r["rows"]) for r in result.replaced] == [("stacked", 2 * P)]


def _computed_dynamic(tmp: Path) -> tuple[Path, Path]:
    """cos/sin computed from position_ids with the default frequencies under a dynamic NTK config."""
    config = write_config(tmp, "dynamic")
    spec = rx.from_hf_config(config)[0]
    inv, factor = frequencies(spec, ORIGINAL)
    return computed_model(tmp / "model.onnx", inv, factor, f32=True), config


def _ort_refuses(how: str):  # noqa: ANN202
    def make(tmp: Path) -> tuple[Path, Path]:
        model, config = _built(tmp, "float32-gqa-llama3")
        return ort_refused(model, how), config

    return make


def _longrope_outside(tmp: Path) -> tuple[Path, Path]:
    return longrope_with(tmp, lambda model, folder: external(model, "large_cos", folder, "../secret.bin"))


def _data_exists(tmp: Path) -> tuple[Path, Path]:
    made = _built(tmp, "float32-gqa-llama3")
    (tmp / "fixed.onnx.data").write_bytes(b"another model's tables")
    return made


def _genai(tmp: Path, config: object = None) -> tuple[Path, Path]:
    """A planted model served from its folder (genai_config.json naming it, or ``config``), beside it a tokenizer, a
    link to a file outside the folder (a Hugging Face snapshot's form), a hidden file, a sub-folder, a manifest of an
    earlier graft and a stale ``model.onnx.data`` (this model keeps its tables in the file).
    """  # noqa: D205
    tmp.mkdir(exist_ok=True)
    model, hf = _built(tmp, "float32-gqa-llama3")
    genai = {"model": {"decoder": {"filename": "model.onnx"}, "type": "llama"}} if config is None else config
    (tmp / "genai_config.json").write_text(json.dumps(genai))
    (tmp / "tokenizer.json").write_text('{"version": "1.0"}')
    (tmp.parent / "blob").write_text("merges")
    (tmp / "merges.txt").symlink_to(tmp.parent / "blob")
    (tmp / ".lock").write_text("")
    (tmp / "cache").mkdir()
    (tmp / "manifest.json").write_text("{}")
    (tmp / "model.onnx.data").write_text("stale")
    return model, hf


BAD: list[tuple[str, object, list[str], str, str]] = [
    ("out-data-exists", _data_exists, [], "--out", "fixed.onnx.data' exists"),
    ("computed-dynamic", _computed_dynamic, ["--trust", "config", "--out", "{tmp}/fixed.onnx"], "MODEL",
     "follows dynamic NTK"),
    ("out-exists", lambda t: _built(t, "float32-gqa-llama3"), ["--out", "{tmp}/model.onnx"], "--out", "exists"),
    ("out-not-onnx", lambda t: _built(t, "float32-gqa-llama3"), ["--out", "{tmp}/fixed.txt"], "--out", ".onnx"),
    ("not-onnx", lambda t: (t / "absent.onnx", _built(t, "float32-gqa-llama3")[1]), [], "MODEL", "is not a file"),
    ("alibi-slopes-untrusted", lambda t: _built(t, "alibi-naive-12-heads"), [], "--trust", "alibi-slopes"),
    ("checkpoint-absent", lambda t: _built(t, "float32-gqa-llama3"),
     ["--out", "{tmp}/fixed.onnx", "--checkpoint", "{tmp}/absent"], "--checkpoint", "is not a folder"),
    *((f"ort-refuses-{how}", _ort_refuses(how), [], "MODEL", "ONNX Runtime refuses") for how in ORT_REFUSES),
    ("external-constant-in-if-outside", _longrope_outside, [], "MODEL", "outside the model's folder"),
    ("genai-out-exists", _genai, ["--out", "{tmp}/cache"], "--out", "exists: graft writes the onnxruntime-genai"),
    ("genai-config-names-another", lambda t: _genai(t, {"model": {"decoder": {"filename": "other.onnx"}}}),
     ["--out", "{tmp}/fixed"], "MODEL", "names no file 'model.onnx' (it names other.onnx)"),
    ("genai-config-not-an-object", lambda t: _genai(t, "{"), ["--out", "{tmp}/fixed"], "MODEL", "names no file"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "argv", "flag", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(case, make, argv, flag, phrase, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = make(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv] or ["--out", str(tmp_path / "fixed.onnx")]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["graft", str(model), "--hf-config", str(config), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith(f"ropeexport: error: {flag}") and phrase in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_an_exact_model_is_left_as_it_is(tmp_path: Path) -> None:
    model, config = _built(tmp_path, "exact-gqa-longrope")
    result = rx.graft(model, config, tmp_path / "same.onnx")
    assert result.replaced == [] and result.proven and result.short_call["max_abs"] == 0.0


__all__ = ["Planted"]


def test_a_graft_leaves_only_its_model_and_a_killed_commit_is_undone(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, config = _built(tmp_path, "float32-gqa-llama3")
    out = tmp_path / "fixed" / "model.onnx"
    argv = ["graft", str(model), "--hf-config", str(config), "--out", str(out)]
    assert main(argv) == 0
    # The model and the external data file it names; no work folder, lock or marker left.
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    good = (out.parent / "model.onnx.data").read_bytes()
    # A graft killed between moving its data file and its model in: the data file, and the marker saying so.
    out.unlink()
    (out.parent / "model.onnx.data").write_text("half of a graft")
    (out.parent / ".model.onnx.committing").write_text("ropeexport commit 1\nmodel.onnx.data\nmodel.onnx\n")
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err  # the same graft again: what the dead one moved in goes first
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert (out.parent / "model.onnx.data").read_bytes() == good


# (where --out points, the flag and words of the one line): a name the store cannot hold is said before any work
NAMES = [
    ("graft", "fixed/my model.onnx", "--out: must be 1-100 characters"),
    ("audit", "_report", "--out: must be 1-100 characters"),
]


@pytest.mark.parametrize(("command", "where", "words"), NAMES, ids=[n[0] for n in NAMES])
def test_an_output_name_the_store_cannot_hold_names_out(command: str, where: str, words: str, tmp_path: Path,
                                                        capsys) -> None:  # noqa: ANN001
    model, config = _built(tmp_path, "exact-gqa-llama3")
    assert main([command, str(model), "--hf-config", str(config), "--out", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_an_audit_in_a_folder_of_the_users_touches_nothing_else(tmp_path: Path) -> None:
    model, config = _built(tmp_path, "exact-gqa-llama3")
    home = tmp_path / "home"
    home.mkdir()
    for name in (".building-cache", ".notes.old.1.keep", ".other.lock"):
        (home / name).mkdir() if not name.endswith(".lock") else (home / name).write_text("")
    (home / ".x.committing").write_text("ropeexport commit 1\ntodo.txt\nx\n")  # a marker of another name
    (home / "todo.txt").write_text("mine")
    before = sorted(p.name for p in home.iterdir())
    rx.audit(model, config, out=home / "audit1")
    assert sorted(p.name for p in home.iterdir()) == sorted([*before, "audit1"])


def test_an_audit_folder_in_a_tree_is_neither_indexed_nor_verified(tmp_path: Path) -> None:
    from ropeexport.artifacts import write_index

    model, config = _built(tmp_path, "exact-gqa-llama3")
    out = tmp_path / "tree"
    rx.build_all([rx.spec("rope", head_dim=16, num_heads=2, max_positions=64, name="small")], out)
    rx.audit(model, config, out=out / "audit1")
    assert [a["name"] for a in write_index(out)["artifacts"]] == ["small"]
    assert [r.path.name for r in rx.verify(out)] == ["small"]


def test_a_genai_folders_model_is_grafted_into_a_whole_genai_folder(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """``--out FOLDER``: the folder whole (genai_config.json and the tokenizer as they were, the grafted model under its
    own name); ``--out FILE.onnx``: the model alone, and a line saying how to get the folder.
    """  # noqa: D205
    model, config = _genai(tmp_path / "og")
    out = tmp_path / "fixed"
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = sorted([config.name, "genai_config.json", "manifest.json", "merges.txt", "model.onnx", "model.onnx.data",
                      "tokenizer.json"])  # fmt: skip
    assert f"onnxruntime-genai folder {out}: {', '.join(written)}\n" in printed, printed  # every file, the manifest too
    assert sorted(p.name for p in out.iterdir()) == written
    for name in ("genai_config.json", "tokenizer.json", "merges.txt"):
        assert (out / name).read_bytes() == (model.parent / name).read_bytes() and not (out / name).is_symlink()
    assert (out / "model.onnx.data").read_bytes() != b"stale"  # the grafted model's tables, not the stale file
    assert json.loads((out / "manifest.json").read_text())["artifact"] == "graft"
    assert rx.audit(out / "model.onnx", config).verdict == "exact"
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(tmp_path / "alone.onnx")]) == 0
    assert "give --out a new folder to write the whole one" in capsys.readouterr().out
    assert not (tmp_path / "genai_config.json").exists()
