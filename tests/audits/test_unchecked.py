"""Models the audit cannot check whole: said as a finding (exit 1), and graft refuses them in one line (exit 2,
nothing written) instead of calling a graft it could not check "proven".

- a GroupQueryAttention whose caches ONNX Runtime refuses when it runs (Phi-4-mini's shape: head_dim 32, partial
  rotary 0.75, 12-wide caches where ORT wants a multiple of 8; the onnxruntime-genai builder writes exactly this, see
  ``test_audit_builder.py``): the tables are checked, and the finding says the model cannot run;
- ropeexport's own decomposed BLOOM decoder with its metadata dropped (as a tool that rewrites a model without it
  leaves it): its position guard refuses L = 4096 (it was built for 2048 positions, the config, which has no length,
  imports as 4096; with its ``ropeexport.max_positions`` the audit checks 2048 and it is exact,
  ``test_audit_own_decoders.py``): checked at the longest call it takes, found by bisection.
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

import ropeexport as rx
from ropeexport.cli import main
from tests.audits.planted import P, gqa_model, tables, write_config


def _gqa_12_wide(tmp: Path) -> tuple[Path, Path]:
    config = write_config(tmp, "phi4")
    spec = rx.from_hf_config(config)[0]
    assert spec.rotary_dim // 2 == 12
    return gqa_model(tmp / "model.onnx", *tables(spec, P), head_dim=32), config


def _bloom_decoder(tmp: Path) -> tuple[Path, Path]:
    config = write_config(tmp, "alibi8")
    made = rx.build_decoder(tmp / "built", hf_config=config, graph="decomposed", name="bloom", eager=False)
    model = onnx.load(str(Path(made.path) / "model.onnx"))
    del model.metadata_props[:]
    onnx.save(model, str(tmp / "bloom.onnx"))
    return tmp / "bloom.onnx", config


# (name, model and config, finding, its words, the length each site was checked at)
UNCHECKED: list[tuple[str, Callable[[Path], tuple[Path, Path]], str, str, list[int]]] = [
    ("gqa-caches-12-wide", _gqa_12_wide, "cannot-run", "cos_cache dimension 1 must be <= head_size / 2 and a "
     "multiple of 8", [P]),
    ("bloom-decoder-position-guard", _bloom_decoder, "call-refused", "the longest call it takes is 2048 tokens",
     [2048]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "name", "words", "lengths"), UNCHECKED, ids=[u[0] for u in UNCHECKED])
def test_what_the_audit_cannot_check_is_a_finding_and_graft_refuses(
    case, make, name, words, lengths, tmp_path: Path, capsys  # noqa: ANN001
) -> None:
    model, config = make(tmp_path)
    assert main(["audit", str(model), "--hf-config", str(config), "--json"]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "onnxruntime" not in captured.err  # ORT's own log stays quiet
    (site,) = json.loads(captured.out)["sites"]
    found = {f["name"]: f["text"] for f in site["findings"]}
    assert name in found and words in found[name], found
    assert [p["length"] for p in site["probes"]] == lengths and all(p["exact"] for p in site["probes"])
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    assert main(["graft", str(model), "--hf-config", str(config), "--out", str(tmp_path / "fixed" / "m.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("ropeexport: error: MODEL") and words in err, err
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written
