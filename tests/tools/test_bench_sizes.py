"""tools/bench_sizes.py's own parts: the serving runs' figures read from their output, int4's settings in both tools,
and the table's notes (served speed, a run the kernel killed, the targets' ratios).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.toolmod import tool

# (what a serving run printed, the figures read from it)
PRINTED = [
    ('noise\n{"prefill_tokens_per_second": 80.6, "decode_ms_per_token": 95.3, "steps": 32}\n',
     {"prefill_tokens_per_second": 80.6, "decode_ms_per_token": 95.3, "steps": 32}),
    ('{\n  "prompt": [1, 2],\n  "prefill_tokens_per_second": 93.4,\n  "steps": [{"kind": "prefill"}, {"kind": '
     '"decode"}]\n}\n', {"prefill_tokens_per_second": 93.4, "steps": 2}),  # generate --json: indented, steps listed
    ("Traceback (most recent call last):\nMemoryError\n", {}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "figures"), PRINTED)
def test_the_serving_figures_are_read_from_the_runs_output(text: str, figures: dict[str, Any]) -> None:
    assert tool("bench_sizes")._last_json(text) == figures


def test_int4_is_the_builders_settings_in_both_tools() -> None:
    sizes = tool("bench_sizes")
    assert sizes._request_fields("int4") == {"dtype": "fp32", "weight_format": "int4", "block_size": 32,
                                            "accuracy_level": 0, "symmetric": True}  # fmt: skip
    assert sizes._request_fields("int4", 4)["accuracy_level"] == 4
    assert sizes._cli_fields("int4", 4)[sizes._cli_fields("int4", 4).index("--accuracy-level") + 1] == "4"
    cli = sizes._cli_fields("int4")
    assert cli[cli.index("--weight-format") + 1] == "int4" and cli[cli.index("--block-size") + 1] == "32"
    assert sizes._cli_fields("fp16") == ["--dtype", "fp16"]


def test_the_table_notes_served_speed_a_killed_or_capped_run_and_the_ratios() -> None:
    run = {"wall_s": 10.0, "peak_rss_gib": 1.0, "peak_rss_bytes": 2**30, "disk_gib": 1.0, "exit": 0}
    results = [{"model": "m", "dtype": "int4", "layers": 2, "runs": {
        "build": run, "builder": {**run, "wall_s": 4.0, "peak_rss_bytes": 2**31},
        "genai": {**run, "served": {"prefill_tokens_per_second": 81.0, "decode_ms_per_token": 95.0}},
        "builder-genai": {**run, "served": {"prefill_tokens_per_second": 90.0, "decode_ms_per_token": 76.0}},
        "verified": {**run, "exit": -9, "peak_rss_gib": 22.4},
        "eager": {**run, "exit": -9, "peak_rss_gib": 8.1, "stopped": True},
        "generate": {**run, "exit": 1, "log_tail": "Traceback ...\nValueError: no such model\n"}}}]  # fmt: skip
    text = tool("bench_sizes").markdown(results)
    assert "- m int4 genai: prefill 81 tokens/s (128-token prompt), decode 95 ms/token" in text
    assert "- m int4 verified: killed by the kernel, out of memory, at 22.4 GiB" in text
    assert "- m int4 eager: stopped at the run's memory cap, 8.1 GiB after 10.0 s" in text  # --cap-gib's kill
    assert "- m int4 generate: exit 1: ValueError: no such model" in text  # a failed run's last line
    assert "- m int4: served by onnxruntime-genai, ropeexport / builder: decode speed x0.80, prefill x0.90" in text
    assert "wall x2.50 (target <= 2), peak RSS x0.50 (target <= 1.5)" in text


def test_a_form_other_than_fused_is_its_own_row() -> None:
    sizes = tool("bench_sizes")
    run = {"wall_s": 1.0, "peak_rss_gib": 1.0, "peak_rss_bytes": 2**30, "disk_gib": 1.0, "exit": 0}
    fused, gqa, a4 = ({"model": "m", "dtype": "int4", "layers": 2, "runs": {"build": run}, **extra}
                      for extra in ({}, {"graph": "gqa"}, {"graph": "gqa", "level": 4}))  # fmt: skip
    assert [sizes._key(r) for r in (fused, gqa, a4)] == ["m/int4", "m/int4/gqa", "m/int4/gqa/a4"]
    assert "| m (2 layers) | int4 gqa | build |" in sizes.markdown([fused, gqa])
    assert "| m (2 layers) | int4 gqa a4 | build |" in sizes.markdown([a4])
