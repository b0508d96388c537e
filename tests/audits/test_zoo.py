"""``audit --zoo ZOO.toml --out DIR``: every model in its own audit folder, one table worst first, a model that fails
as its own row, the exit code the worst row's, a rerun that skips what is done, and bad manifests refused whole.

The models are the planted foreign-style sites (``tests.audits.planted``): an audit of one takes a tenth of a second.
Their effects on the logits are not measurable (they are not whole decoders): the rows rank by exit code, level,
then name.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import ropeexport as rx
from tests.audits.planted import CASES, write_config
from tests.clirun import run

# (model name, planted case): an exact model, a faulty one, an exact ALiBi one; a model that is not there is added
# by ``write_zoo`` as "missing"
MODELS = [("llama-exact", "exact-gqa-llama3"), ("llama-unscaled", "scaling-ignored-llama3"),
          ("bloom-exact", "exact-alibi-8-heads")]  # fmt: skip


def write_zoo(root: Path, extra: str = "", missing: bool = True) -> Path:
    """The planted models under ``root``, and root/zoo.toml listing them (and one model whose file is absent)."""
    lines = []
    for name, case_name in MODELS:
        case = next(c for c in CASES if c.name == case_name)
        (root / name).mkdir(parents=True, exist_ok=True)
        config = write_config(root / name, case.config)
        case.build(root / name / "model.onnx", rx.from_hf_config(config)[0])
        lines.append(f'[[model]]\nname = "{name}"\nonnx = "{name}/model.onnx"\nhf_config = "{name}/{config.name}"\n')
    if missing:
        lines.append('[[model]]\nname = "missing"\nonnx = "nowhere/model.onnx"\nhf_config = "llama-exact/llama3.json"\n')
    (root / "zoo.toml").write_text("\n".join(lines) + extra)
    return root / "zoo.toml"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_zoo(tmp_path_factory.mktemp("zoo"))


def test_zoo_rows_worst_first_folders_as_audit_writes_them_exit_the_worst(zoo: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises: the serial run must never import it
    out = tmp_path / "out"
    code, printed, err = run(["audit", "--zoo", str(zoo), "--out", str(out)], capsys)
    assert code == 2, err  # the missing model's row
    table = json.loads((out / "zoo.json").read_text())
    assert [(r["name"], r["exit"], r["verdict"]) for r in table["rows"]] == [
        ("missing", 2, "error"), ("llama-unscaled", 1, "findings"), ("bloom-exact", 0, "exact"),
        ("llama-exact", 0, "exact")]  # fmt: skip
    missing, unscaled = table["rows"][0], table["rows"][1]
    assert "is not a file" in missing["error"] and missing["folder"] is None
    assert unscaled["worst"]["name"] == "scaling-ignored" and "rope_scaling ignored" in unscaled["worst"]["text"]
    assert table["exit"] == 2 and "4 model(s): 2 passed, 1 failed the gate, 1 not audited" in printed
    # each folder is what `audit MODEL --out` writes for that model
    single = tmp_path / "single"
    model = zoo.parent / "llama-unscaled"
    assert run(["audit", str(model / "model.onnx"), "--hf-config", str(model / "llama3.json"), "--out", str(single)],
               capsys)[0] == 1  # fmt: skip
    for name in ("audit.json", "audit.md", "audit.html"):
        assert (out / "llama-unscaled" / name).read_bytes() == (single / name).read_bytes(), name
    assert sorted(p.name for p in out.iterdir()) == ["bloom-exact", "llama-exact", "llama-unscaled", "zoo.html",
                                                     "zoo.json"]  # fmt: skip
    page = (out / "zoo.html").read_text()
    assert page.index("missing") < page.index("llama-unscaled") < page.index("bloom-exact")
    assert "<a href='llama-unscaled/audit.html'>" in page


def test_a_rerun_skips_what_is_done_and_audits_what_changed(zoo: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    first = rx.audit_zoo(zoo, out)
    before = (out / "zoo.json").read_bytes()
    again = rx.audit_zoo(zoo, out)
    assert sorted(again.skipped) == ["bloom-exact", "llama-exact", "llama-unscaled"]
    assert (out / "zoo.json").read_bytes() == before and again.exit_code == first.exit_code == 2
    code, printed, _ = run(["audit", "--zoo", str(zoo), "--out", str(out), "--json"], capsys)  # what --json prints
    assert code == 2 and json.loads(printed) == json.loads(before)
    config = zoo.parent / "llama-exact" / "llama3.json"
    saved = config.read_text()
    try:  # the same config, other bytes: audited again
        config.write_text(json.dumps(json.loads(saved), indent=1))
        third = rx.audit_zoo(zoo, out)
    finally:
        config.write_text(saved)
    assert sorted(third.skipped) == ["bloom-exact", "llama-unscaled"]
    assert (out / "zoo.json").read_bytes() == before


def _zoo_with(text: str) -> Callable[[Path], list[str]]:
    def setup(tmp: Path) -> list[str]:
        write_zoo(tmp / "zoo", extra=text, missing=False)
        return ["audit", "--zoo", str(tmp / "zoo" / "zoo.toml"), "--out", str(tmp / "out")]

    return setup


def _confined(tmp: Path) -> list[str]:
    return [*_zoo_with('[[model]]\nname = "out"\nonnx = "../x.onnx"\nhf_config = "llama-exact/llama3.json"\n')(tmp),
            "--confine"]  # fmt: skip


def _linked_out(tmp: Path) -> list[str]:
    import shutil

    argv = _zoo_with("")(tmp)
    (tmp / "other").mkdir()
    shutil.copy(tmp / "zoo" / "llama-exact" / "model.onnx", tmp / "other" / "model.onnx")
    (tmp / "zoo" / "inside").symlink_to(tmp / "other")  # a link inside the tree to a folder outside it
    text = (tmp / "zoo" / "zoo.toml").read_text().replace('"llama-exact/model.onnx"', '"inside/model.onnx"')
    (tmp / "zoo" / "zoo.toml").write_text(text)
    return [*argv, "--confine"]


def _not_a_zoo_out(tmp: Path) -> list[str]:
    argv = _zoo_with("")(tmp)
    (tmp / "out").mkdir()
    (tmp / "out" / "notes.txt").write_text("mine")
    return argv


# (id, argv builder, fragment of the one line); --out is absent afterwards unless the case made it
BAD: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("missing-field", _zoo_with('[[model]]\nname = "x"\nhf_config = "llama-exact/llama3.json"\n'), "--zoo model[3].onnx: is missing"),
    ("duplicate-name", _zoo_with('[[model]]\nname = "Llama-Exact"\nonnx = "a.onnx"\nspec = "b.json"\n'), "--zoo model[3].name: 'Llama-Exact' is listed twice"),
    ("outside-with-confine", _confined, "--zoo model[3].onnx: "),
    ("link-out-with-confine", _linked_out, "--zoo model[0].onnx: "),
    ("unknown-field", _zoo_with('[[model]]\nname = "x"\nonnx = "a.onnx"\nhf_config = "c.json"\nsize = "1"\n'), "--zoo model[3].size: is not a model field"),
    ("config-and-spec", _zoo_with('[[model]]\nname = "x"\nonnx = "a.onnx"\nhf_config = "c.json"\nspec = "s.json"\n'), "exactly one of hf_config and spec"),
    ("bad-name", _zoo_with('[[model]]\nname = "../x"\nonnx = "a.onnx"\nhf_config = "c.json"\n'), "--zoo model[3].name: must be 1-100"),
    ("table-name", _zoo_with('[[model]]\nname = "zoo.json"\nonnx = "a.onnx"\nhf_config = "c.json"\n'), "the zoo's own file"),
    ("no-models", lambda tmp: ["audit", "--zoo", _write(tmp, "z.toml", "title = 1\n"), "--out", str(tmp / "out")], "--zoo title: is not a ZOO.toml key"),
    ("not-toml", lambda tmp: ["audit", "--zoo", _write(tmp, "z.toml", "[[model]\n"), "--out", str(tmp / "out")], "is not TOML"),
    ("out-not-a-zoo", _not_a_zoo_out, "--out: "),
    ("no-out", lambda tmp: _zoo_with("")(tmp)[:-2], "--zoo needs --out DIR"),
    ("zoo-and-model", lambda tmp: [*_zoo_with("")(tmp), "m.onnx"], "--zoo: takes each model's files from ZOO.toml; MODEL"),
    ("confine-without-zoo", lambda tmp: ["audit", "m.onnx", "--hf-config", "c.json", "--confine"], "--confine: goes with --zoo only"),
    # the merge of --zoo with the transformers.js folder flags: --variant names a folder's model, not a zoo's
    ("zoo-and-variant", lambda tmp: [*_zoo_with("")(tmp), "--variant", "q4"], "--zoo: takes each model's files from ZOO.toml; --variant"),
    ("ray-with-a-folder", lambda tmp: ["audit", str(tmp), "--ray", "local"], "--ray: goes with --zoo only"),
    ("no-model", lambda tmp: ["audit", "--hf-config", "c.json"], "MODEL: give the ONNX file"),
]  # fmt: skip


def _write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


@pytest.mark.fast  # the manifest's checks: a few hundredths of a second a row (3 planted models written, no audit)
@pytest.mark.parametrize(("setup", "fragment"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_zoo_is_one_line_exit_2_and_nothing_written(setup: Callable[[Path], list[str]], fragment: str,
                                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = setup(tmp_path)
    out = tmp_path / "out"
    before = sorted(out.iterdir()) if out.exists() else None  # a folder the case made stays as it was
    code, _, err = run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and fragment in lines[0], err
    assert (sorted(out.iterdir()) if out.exists() else None) == before
