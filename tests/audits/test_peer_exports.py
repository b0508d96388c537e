"""tools/peer_exports.py and tools/peers_table.py without exporting anything: the 4.x form of a transformers 5 config
that optimum's environment (transformers 4.57) reads, an export's failure in one line, and the 2026 page's rows.

The 4.x form is checked by reading it back with transformers 5 (which still reads that form): each case's RoPE must
come back as the transformers 5 config said it, so no schedule field is lost or renamed on the way to optimum.
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.toolmod import tool

transformers = pytest.importorskip("transformers", reason="transformers (the test extra) reads the configs back")
peers = tool("audit_peers")
exports = tool("peer_exports")
table = tool("peers_table")

# (schedule of tools/audit_peers.py, the 4.x fields its config must carry)
LEGACY: list[tuple[str, dict[str, Any]]] = [
    ("default (Llama 2)", {"rope_theta": 10000.0, "rope_scaling": None}),
    ("yarn x4 + q/k norms (Qwen3)", {"rope_theta": 1000000.0,
                                     "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                      "original_max_position_embeddings": 32768}}),
    ("two encodings: sliding 1e4, global 1e6 linear x8 (Gemma 3)",
     {"rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear",
                                                                                 "factor": 8.0}}),
    ("longrope (Phi-3)", {"rope_theta": 10000.0, "rope_scaling": {
        "type": "longrope", "short_factor": [1.0, 1.02, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0],
        "long_factor": [1.0, 1.5, 2.5, 4.0, 8.0, 16.0, 24.0, 32.0]}}),
    ("default, partial rotary 0.25 (Pythia, GPT-NeoX)", {"rotary_pct": 0.25, "rotary_emb_base": 10000,
                                                         "rope_scaling": None}),
    ("yarn x32 untruncated, sinks, windows, experts (gpt-oss)",
     {"rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                               "beta_slow": 1.0, "truncate": False,
                                               "original_max_position_embeddings": 4096}}),
]  # fmt: skip


def _config(schedule: str) -> dict[str, Any]:
    model_type, fields = peers.SCHEDULES[schedule]
    made = transformers.AutoConfig.for_model(model_type, **(peers.TINY | fields))
    return json.loads(made.to_json_string())


@pytest.mark.parametrize(("schedule", "fields"), LEGACY, ids=[c[0] for c in LEGACY])
def test_the_4x_form_says_the_same_rope(schedule: str, fields: dict[str, Any]) -> None:
    config = _config(schedule)
    legacy = exports.legacy_config(config)
    assert "rope_parameters" not in legacy
    assert {k: legacy.get(k) for k in fields} == fields
    # read back by transformers 5, the 4.x form is the same RoPE as the config it came from
    back = json.loads(transformers.AutoConfig.for_model(**legacy).to_json_string())
    assert back["rope_parameters"] == config["rope_parameters"], (back["rope_parameters"], config["rope_parameters"])


def test_a_4x_checkpoint_links_the_weights_and_rewrites_the_config(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(_config("yarn x4 + q/k norms (Qwen3)")))
    (ckpt / "model.safetensors").write_bytes(b"weights")
    folder = exports.legacy_checkpoint(ckpt, tmp_path / "legacy")
    assert (folder / "model.safetensors").is_symlink() and (folder / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((folder / "config.json").read_text())["rope_scaling"]["rope_type"] == "yarn"
    assert "rope_parameters" in json.loads((ckpt / "config.json").read_text())  # the original is untouched


# (stderr of a failed export, its one line)
FAILURES = [
    ("Traceback (most recent call last):\n  File x\nKeyError: 'type'\n", "KeyError: 'type'"),
    ("ValueError: bad\nwarning: something after\n", "ValueError: bad"),
    ("no error named here\nlast words\n", "last words"),
    ("", "exit 3"),
]


@pytest.mark.parametrize(("stderr", "line"), FAILURES)
def test_an_export_failure_is_the_exceptions_last_line(stderr: str, line: str) -> None:
    assert peers.failure(stderr, 3) == line


# (the tool asked for, what is given, the words of why it cannot run, or None: a command)
COMMANDS = [
    (exports.OPTIMUM, None, "--optimum-python"),
    (exports.OPTIMUM, "/no/such/python", "does not exist"),
    (exports.MOBIUS, "/some/mobius", None),
]


@pytest.mark.parametrize(("source", "given", "words"), COMMANDS)
def test_a_peer_not_installed_says_how_to_give_it(source: str, given: str | None, words: str | None,
                                                  tmp_path: Path) -> None:  # fmt: skip
    make = exports.optimum_command if source == exports.OPTIMUM else exports.mobius_command
    got = make(tmp_path / "ckpt", tmp_path / "out", given)
    if words is None:
        assert got[:4] == [given, "build", "--config", str(tmp_path / "ckpt")]
    else:
        assert isinstance(got, str) and words in got


def test_the_page_says_where_a_tool_could_not_export() -> None:
    record = {"command": "python tools/audit_peers.py x", "rows": [
        {"schedule": table.QWEN3, "source": exports.OPTIMUM, "export_s": 1.0, "error": "KeyError: 'x'"}]}
    page = table.render(record)
    assert f"| {table.QWEN3} | {exports.OPTIMUM} | could not export: KeyError: 'x' |" in page
    assert f"- {exports.OPTIMUM}: not measured, it could not export (KeyError: 'x')." in page
