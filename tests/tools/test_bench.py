"""tools/bench.py and tools/build_cost.py on tiny shapes: every expected entry is present and every figure is sane.

No test asserts a time: the figures depend on the machine. They run as subprocesses, as a user runs them, so that
their thread and logging settings stay out of the test process.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmark tools run end to end on their quick settings

ROOT = Path(__file__).resolve().parents[2]
ROPE = ("copy_1t", "copy_mt", "ort_floor", "fused", "decomposed", "peer", "eager", "torch_compile")
EXPECTED = {
    "rope-prefill-fp32": ROPE,
    "rope-prefill-fp16": ROPE,
    "rope-decode-fp32": ROPE,
    "rope-decode-fp16": ROPE,
    "alibi-bias-fp32": ("copy_1t", "copy_mt", "ort_floor", "fused", "decomposed", "eager"),
    "alibi-bias-fp16": ("copy_1t", "copy_mt", "ort_floor", "fused", "decomposed", "eager"),
    "alibi-scores-fp32": ("copy_1t", "copy_mt", "fused", "decomposed", "eager"),
    "sinusoidal-apply-fp32": ("copy_1t", "copy_mt", "ort_floor", "fused", "decomposed", "eager"),
    "sinusoidal-apply-fp16": ("copy_1t", "copy_mt", "ort_floor", "fused", "decomposed", "eager"),
    "rope-prefill-fp32-experiments": ("fused", "fused_no_guard", "fused_run", "fused_no_opt"),
    "rope-decode-fp32-experiments": ("fused", "fused_no_guard", "fused_run", "fused_no_opt"),
    "rope-prefill-fp16-experiments": ("fused", "fused_no_guard", "fp32_compute", "fp32_compute_no_guard"),
    "alibi-bias-fp32-experiments": ("fused", "general", "no_expand"),
    "alibi-bias-fp16-experiments": ("fused", "general", "no_expand"),
}
# Entries that are ropeexport's own or the roofline: they must run, not merely record an error.
MUST_RUN = {"copy_1t", "copy_mt", "fused", "decomposed"}


def positive(x: object) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def run_tool(script: str, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / script), *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| scenario " in done.stdout or "| tables |" in done.stdout  # the printed Markdown table


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    # torch.compile takes ~20 s even on tiny shapes: recorded as skipped here; the full run measures it.
    run_tool("bench.py", "--tiny", "--no-compile", "--out", str(out))
    return json.loads(out.read_text())


def test_every_scenario_and_entry_is_present(bench: dict) -> None:
    assert set(bench["scenarios"]) == set(EXPECTED)
    for scenario, entries in EXPECTED.items():
        got = bench["scenarios"][scenario]
        for name in entries:
            assert name in got, f"{scenario}: {name} missing"
            item = got[name]
            if name in MUST_RUN:
                assert "error" not in item, f"{scenario}/{name}: {item.get('error')}"
            if "error" in item:  # a failure is recorded as a reason, never as a missing entry
                assert isinstance(item["error"], str) and item["error"]
                continue
            assert positive(item["median_us"]), (scenario, name, item)
            assert positive(item["ratio"]), (scenario, name, item)
            lo, hi = item["ratio_range"]
            assert positive(lo) and positive(hi) and lo <= item["ratio"] <= hi
            q1, q3 = item["ratio_iqr"]
            assert lo <= q1 <= item["ratio"] <= q3 <= hi
        assert positive(min(got["copy_1t"]["ratio"], got["copy_mt"]["ratio"]))
        roofline = got["_roofline_round_us"]
        assert roofline and all(positive(t) for t in roofline)


def test_torch_compile_is_a_time_or_a_reason(bench: dict) -> None:
    for scenario in ("rope-prefill-fp32", "rope-decode-fp16"):
        item = bench["scenarios"][scenario]["torch_compile"]
        assert positive(item.get("ratio")) or item["error"].startswith("skipped: --no-compile")


def test_outputs_agree_with_the_fused_artifact(bench: dict) -> None:
    # A fast wrong answer is no answer: the peer, decomposed and eager paths compute the same rotation.
    for scenario in ("rope-prefill-fp32", "rope-decode-fp32"):
        for name in ("decomposed", "peer", "eager"):
            item = bench["scenarios"][scenario][name]
            if "error" not in item:
                assert item["max_abs_vs_fused"] < 1e-3, (scenario, name)
    for scenario in ("alibi-bias-fp32-experiments", "alibi-bias-fp16-experiments"):
        for name in ("general", "no_expand"):
            assert bench["scenarios"][scenario][name]["max_abs_vs_fused"] == 0.0  # the variants are bit-identical


def test_config_targets_and_findings_are_recorded(bench: dict) -> None:
    config = bench["config"]
    for key in ("onnxruntime", "torch", "cpu_count", "threads", "graph_optimization_level", "allow_spinning"):
        assert key in config
    assert config["allow_spinning"] == {"session.intra_op.allow_spinning": "0", "session.inter_op.allow_spinning": "0"}
    assert len(bench["load_average"]["before"]) == 3 and len(bench["load_average"]["after"]) == 3
    assert bench["roofline"]["method"] and bench["roofline"]["why"]
    targets = {t["target"]: t for t in bench["targets"]}
    assert len(targets) == len(bench["targets"]) >= 10
    for t in targets.values():
        assert t["met"] in (True, False), t  # every target measured in a full (tiny) run
        assert t["value"] is not None
    assert targets["ALiBi artifact stores H slopes, not a table"]["met"] is True
    assert bench["alibi_storage"]["slopes_only"] is True
    assert bench["findings"] and all(isinstance(f, str) and f for f in bench["findings"])
    for name in ("rope-prefill-fp32-experiments", "alibi-bias-fp32-experiments"):
        profile = bench["profiles"][name]["fused"]
        assert profile["calls"] > 0 and profile["by_op_us"]


def test_build_cost_tiny(tmp_path: Path) -> None:
    out = tmp_path / "build-cost.json"
    run_tool("build_cost.py", "--sizes", "64", "128", "--table-positions", "1024", "--repeats", "1", "--out", str(out))
    report = json.loads(out.read_text())
    assert [t["dtype"] for t in report["tables"]] == ["fp32", "fp16", "bf16"]
    for t in report["tables"]:
        assert t["positions"] == 1024 and t["frequencies"] == 64 and positive(t["tables_s"])
        assert isinstance(t["met"], bool)
    builds = report["builds"]
    assert len(builds) == 2 * 2 * 2  # rope and alibi x fp16 and fp32 x two sizes
    for b in builds:
        assert positive(b["total_s"]) and positive(b["bytes"]) and b["files"]
    size = {(b["artifact"], b["dtype"], b["max_positions"]): b["bytes"] for b in builds}
    for dtype in ("fp16", "fp32"):
        assert size[("rope fused", dtype, 128)] > size[("rope fused", dtype, 64)]  # tables grow with positions
        assert size[("alibi bias", dtype, 128)] - size[("alibi bias", dtype, 64)] < 64  # slopes do not
