"""Judgments that can fail: an audit whose compared rows cannot tell the config's schedule from a neighbour's is
refused (saying how many positions it needs).

The outside check's cases, rebuilt: a theta-5e5 spec with max_positions 1 against a theta-1e4 model with 4096-row
tables audited "exact" and grafted "proven" (row 0 is the same for every theta).
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ropeexport as rx
from ropeexport.audits.neighbours import smallest_positions
from ropeexport.cli import main
from tests.audits.planted import HEADS, KV, D, P, gqa_model, rotary_ms_model, tables, write_config

SPEC = {"encoding": "rope", "head_dim": D, "num_heads": HEADS, "num_kv_heads": KV}

# (case, the spec's theta and max_positions, the model's table dtype, the audit's exit code, a phrase of its output)
POSITIONS = [
    ("theta-5e5-spec-1-position-fp32", 5e5, 1, "float32", 2,
     "max_positions 1 (the spec's max_positions) is too few to judge float32 tables: row 0 of theta 500000, unscaled "
     "and of theta 505000 (1% apart) agree within two units of float32, so either would be exact; the audit needs "
     "at least 2 positions"),
    ("exact-spec-1-position-fp32", 1e4, 1, "float32", 2, "needs at least 2 positions"),
    ("theta-5e5-spec-2-positions-fp32", 5e5, 2, "float32", 1, "theta 10000 where the config says 500000"),
    ("exact-spec-4-positions-fp16", 1e4, 4, "float16", 2,
     "rows 0 .. 3 of theta 10000, unscaled and of theta 10100 (1% apart) agree within two units of float16"),
    ("exact-spec-6-positions-fp16", 1e4, 6, "float16", 0, ""),
]  # fmt: skip


def _positions_case(tmp: Path, theta: float, positions: int, dtype: str) -> tuple[Path, Path]:
    """A theta-1e4 model with 4096-row tables (GroupQueryAttention float32, or com.microsoft RotaryEmbedding float16)
    and a spec of ``theta`` over ``positions`` positions.
    """  # noqa: D205
    exact = tables(rx.from_hf_config(write_config(tmp, "default"))[0], P)
    if dtype == "float32":
        model = gqa_model(tmp / "model.onnx", *exact)
    else:
        model = rotary_ms_model(tmp / "model.onnx", *(t.astype(np.float16) for t in exact))
    spec = tmp / "spec.json"
    spec.write_text(json.dumps(SPEC | {"theta": theta, "max_positions": positions}))
    return model, spec


@pytest.mark.parametrize(("case", "theta", "positions", "dtype", "code", "phrase"), POSITIONS,
                         ids=[p[0] for p in POSITIONS])  # fmt: skip
def test_too_few_positions_to_tell_a_schedule_apart_is_refused(case: str, theta: float, positions: int, dtype: str,
                                                               code: int, phrase: str, tmp_path: Path,
                                                               capsys) -> None:  # noqa: ANN001
    model, spec = _positions_case(tmp_path, theta, positions, dtype)
    assert main(["audit", str(model), "--spec", str(spec), "--no-effects"]) == code
    captured = capsys.readouterr()
    if code == 2:
        err = captured.err.strip()
        assert err.count("\n") == 0 and err.startswith("ropeexport: error: --spec: ") and phrase in err, err
        out = tmp_path / "fixed.onnx"
        assert main(["graft", str(model), "--spec", str(spec), "--out", str(out), "--trust", "config"]) == 2
        assert not out.exists() and "too few to judge" in capsys.readouterr().err  # graft "proven" before
    else:
        assert phrase in captured.out, captured.out


def test_the_config_field_is_named_for_a_config(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    model, _ = _positions_case(tmp_path, 1e4, 1, "float32")
    config = tmp_path / "one.json"
    config.write_text(json.dumps(json.loads((tmp_path / "default.json").read_text()) | {"max_position_embeddings": 1}))
    assert main(["audit", str(model), "--hf-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ropeexport: error: --hf-config: max_positions 1 (the config's max_position_embeddings)")


# (config, dtype, the fewest positions, the neighbour that needs them): the rule's figures (``audits.neighbours``)
NEEDED = [
    ("default", "float32", 2, "theta 10100"), ("default", "float16", 6, "theta 10100"),
    ("default", "bfloat16", 41, "theta 10100"), ("llama3-128k", "float32", 2, "theta 505000"),
    ("llama3-128k", "float16", 1871, "llama3 factor 8.08"), ("linear", "float16", 21, "theta 10100"),
    ("yarn", "float16", 31, "yarn factor 4.04"), ("dynamic", "float16", 6, "theta 10100"),
    ("longrope", "float16", 7, "theta 10100"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "dtype", "needed", "neighbour"), NEEDED, ids=[f"{c}-{d}" for c, d, *_ in NEEDED])
def test_the_fewest_positions_tell_every_neighbour_apart_and_one_fewer_does_not(
    config: str, dtype: str, needed: int, neighbour: str, tmp_path: Path
) -> None:
    from ropeexport.audits.neighbours import neighbours, told_apart

    spec = rx.from_hf_config(write_config(tmp_path, config))[0]
    got, words = smallest_positions(spec, dtype)
    assert got == needed and words.startswith(neighbour), (got, words)
    near = dict(neighbours(spec))
    assert all(told_apart(spec, other, needed, dtype) for other in near.values())
    assert not told_apart(spec, near[words], needed - 1, dtype)
