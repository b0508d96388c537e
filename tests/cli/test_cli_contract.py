"""The CLI's contract with scripts and people: start-up cost, pipes, Ctrl-C, empty values, exit codes, help text."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ropeexport.cli import COMMANDS, EXIT_SKIPPED, main, make_parser
from ropeexport.report.views import EncodingReport, read_report
from tests.clirun import run
from tests.docs.pages import RUN, SHELL, all_blocks

ROOT = Path(__file__).resolve().parents[2]
PY = [sys.executable, "-m", "ropeexport"]


@pytest.mark.parametrize("argv", [["--version"], ["--help"]])
def test_version_and_help_import_neither_torch_nor_onnx(argv: list[str]) -> None:
    # Start-up time is measured in the benchmark notes; what keeps it low is testable: nothing heavy is imported.
    code = (
        f"import sys\nfrom ropeexport.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'numpy', 'matplotlib') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_top_level_help_lists_every_command_with_its_own_summary() -> None:
    full = make_parser(None)  # every subcommand built in full: the summaries must match the lazy table
    actions = next(a for a in full._actions if hasattr(a, "choices") and a.choices)
    helps = {c.dest: c.help for c in actions._choices_actions}
    assert helps == {name: summary for name, (_, summary) in COMMANDS.items()}


@pytest.mark.parametrize("command", [[], *[[c] for c in COMMANDS]])
def test_help_has_no_rest_markup(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    assert "``" not in capsys.readouterr().out


def test_build_help_lists_choices_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for fragment in (
        "one of fp32, fp16, bf16; default fp32",
        "one of half, interleaved, complex; default half (rope)",
        "default 32 (rope); 8 (",
        "default 0 (= head_dim) (rope)",
        "one of default, linear, ntk, dynamic, yarn, llama3, longrope",
    ):
        assert fragment in text


def test_a_closed_pipe_is_not_a_failed_verification() -> None:
    # `ropeexport list | head -1`: the reader is gone before the first write. No traceback, exit 0.
    proc = subprocess.Popen([*PY, "list", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_closed_pipe_during_a_build_still_writes_the_artifact_and_index(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = [*PY, "build", "--encoding", "alibi", "--num-heads", "2", "--head-dim", "4", "--max-positions", "16"]
    proc = subprocess.Popen([*argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err
    index = json.loads((out / "index.json").read_text())
    assert [a["status"] for a in index["artifacts"]] == ["passed"]


def test_ctrl_c_during_start_up_exits_130_with_one_line() -> None:
    # SIGINT as a terminal gives it: a suite run in the background of a shell without job control ignores it,
    # and Python keeps SIGINT ignored when it starts so (the child would never see the Ctrl-C).
    proc = subprocess.Popen([*PY, "build", "--dry-run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    time.sleep(0.4)  # the build command is importing torch and onnx (about 2 s): start-up, not work
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the dry run finished before the signal arrived (a very fast machine); nothing to check")
    assert proc.returncode == 130, err
    assert err.strip() == "ropeexport: interrupted"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--hf-config", ""], "--hf-config: is empty"),
        (["--spec", ""], "--spec: is empty"),
        (["--out", ""], "--out: is empty"),
        (["--out", "  "], "--out: is empty"),
        (["--preset", ""], "--preset: is empty"),
    ],
)
def test_an_empty_value_is_an_error_not_a_default(
    argv: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the default --out would land here
    assert main(["build", *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_dry_run_validates_lists_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["build", "--all-presets", "--dry-run", "--json", "--out", str(out)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["artifacts"]) >= 20 and not out.exists()
    assert main(["build", "--preset", "no-such-model", "--dry-run", "--out", str(out)]) == 2


def test_a_runtime_asked_for_by_name_that_cannot_run_is_not_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("onnxruntime")
    try:
        import tensorrt  # noqa: F401

        has_trt = True
    except ImportError:
        has_trt = False
    small = ["build", "--encoding", "alibi", "--num-heads", "2", "--head-dim", "4", "--max-positions", "16"]
    code = main([*small, "--runtime", "ort", "--runtime", "trt", "--out", str(tmp_path / "a")])
    report = read_report(next((tmp_path / "a").glob("*/report.json")), EncodingReport)
    skipped = [r for r in report.runtimes if r.status == "skipped"]
    err = capsys.readouterr().err
    if skipped:
        assert code == EXIT_SKIPPED
        assert "trt" in err and "--allow-skip" in err
        assert main([*small, "--runtime", "all", "--allow-skip", "--out", str(tmp_path / "b")]) == 0
    else:
        assert has_trt and code == 0
    # No --runtime at all: the default may fall back (bf16 on ORT CPU goes to onnx-reference) without failing.
    assert main([*small, "--out", str(tmp_path / "c")]) == 0


# ---------------------------------------------------------------------------------------------------------------
# Every example in the help texts, README and the docs runs. Build examples run as --dry-run (inputs they name are
# created); examples that read a built tree must name artifacts that the build examples beside them create.


def _help_examples() -> list[str]:
    lines = []
    for name in COMMANDS:
        parser = make_parser(name)
        sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices).choices[name]
        text = re.sub(r"\\\n\s*", " ", sub.description or "")  # a line ending in \ continues on the next
        lines += [m.strip() for m in re.findall(r"^\s+(ropeexport .*?)(?:\s+#.*)?$", text, re.M)]
    return lines


def _doc_examples() -> list[str]:
    """The ``ropeexport`` lines of README's and the docs' shell blocks, but the pages that run whole (``RUN``: their
    commands run as written in tests/docs); synopsis lines with [OPTIONS] are not examples.
    """  # noqa: D205
    found = []
    for block in (b for b in all_blocks() if b.info in SHELL and b.page not in RUN):
        for line in block.commands():
            for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
                if part.startswith("ropeexport ") and "[" not in part:
                    found.append(part)
    return found


def _fixtures(folder: Path) -> None:
    (folder / "models" / "qwen2.5-7b").mkdir(parents=True)
    config = {
        "model_type": "qwen2",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
    }
    (folder / "models" / "qwen2.5-7b" / "config.json").write_text(json.dumps(config))
    # the multimodal-positions how-to's Qwen2.5-VL config (a flat hub config, M-RoPE sections over head_dim 64's pairs)
    (folder / "qwen2.5-vl-7b").mkdir()
    vl = {"model_type": "qwen2_5_vl", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
          "max_position_embeddings": 32768, "rope_theta": 1000000.0,
          "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
          "vision_config": {"hidden_size": 128, "num_heads": 4}}  # fmt: skip  (its vision tower's 2-D RoPE too)
    (folder / "qwen2.5-vl-7b" / "config.json").write_text(json.dumps(vl))
    (folder / "my-model.toml").write_text('name = "my-model"\nhead_dim = 64\nnum_heads = 4\nmax_positions = 256\n')
    # the docs' decoder examples: a checkpoint folder ./my-llama and a config.json (tiny, random weights)
    import torch
    import transformers

    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=128, max_position_embeddings=256)  # fmt: skip
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder / "my-llama")
    config.save_pretrained(folder)
    # the multimodal-positions how-to's Qwen2.5-VL checkpoint (tiny, random weights, a vision tower beside)
    from tests.decoder.tiny import checkpoint

    checkpoint(folder / "qwen2.5-vl-3b", "qwen2_5_vl", 0)


def _planned(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, stdout, stderr = run([*argv, "--dry-run", "--json"], capsys)
    assert code == 0, f"{shlex.join(argv)}: {stderr}"
    plan = json.loads(stdout)
    return [a["name"] for a in plan.get("artifacts", plan.get("decoders"))]  # a decoder's dry run lists decoders


@pytest.mark.slow  # every example of the help texts run
def test_every_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # In-process (tests.clirun), in the examples' folder: an interpreter started and ropeexport imported for each of
    # the 26 examples was most of this test's time; the installed command's own start-up is tested above
    examples = list(dict.fromkeys(_help_examples() + _doc_examples()))
    assert any(e.startswith("ropeexport build") for e in examples)
    _fixtures(tmp_path)
    monkeypatch.chdir(tmp_path)  # the examples' relative paths (./my-llama, configs) are the fixtures' folder
    built: dict[str, set[str]] = {}
    for example in (e for e in examples if e.startswith("ropeexport build")):
        argv = shlex.split(example.replace("~/models", str(tmp_path / "models")))[1:]
        argv = [a for a in argv if a not in ("--json", "--dry-run")]
        out = argv[argv.index("--out") + 1] if "--out" in argv else "ropeexport-out"
        built.setdefault(out, set()).update(_planned(argv, capsys))
    for example in (e for e in examples if not e.startswith("ropeexport build")):
        argv = shlex.split(example)[1:]
        if argv[0] == "list":
            code, _, stderr = run(argv, capsys)
            assert code == 0, f"{example}: {stderr}"
            continue
        for arg in argv[1:]:
            head, _, rest = arg.partition("/")
            if head in built and rest:  # a path into a tree a build example writes
                name = rest.split("/")[0]
                assert name in built[head], f"{example}: no build example creates {head}/{name}"
