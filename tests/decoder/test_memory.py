"""The memory estimate of a decoder build (``ropeexport.decoder.memory``) against a real build's peak, and its parts.

The refusals themselves (an 8B config seeded, a 2^17-wide config, a checkpoint past the limit, a limit that is not a
size) are rows of ``tests/decoder/test_bad_decoder_inputs.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ropeexport as rx
from ropeexport.decoder.memory import ENV, available, estimate, parse_size, per_parameter
from ropeexport.errors import SpecError

pytest.importorskip("transformers", reason="the build's transformers reference is part of what the estimate bounds")

# 4.1M parameters: large enough that the weights' part (about 180 MiB) shows beside the imports (about 500 MiB).
SMALL = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "intermediate_size": 1024, "vocab_size": 4096,
         "max_position_embeddings": 128}  # fmt: skip
FACTOR = 1.5  # the estimate bounds the peak from above, and by at most this much (measured x1.18 to x1.32)

# The child's own peak is VmHWM of /proc/self/status (its address space's high-water mark, which starts afresh at
# exec). Not ru_maxrss: Linux carries the parent's peak into it across fork and exec, and pytest's own grows past
# 1 GiB in a long session.
CHILD = """
import json, sys
import ropeexport as rx
result = rx.build_decoder(sys.argv[2], hf_config=sys.argv[1])
kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"passed": result.passed, "peak": kib * 1024}))
"""


@pytest.mark.slow
def test_the_estimate_bounds_a_small_builds_peak_within_a_factor(tmp_path: Path) -> None:
    config = tmp_path / "small.json"
    config.write_text(json.dumps(SMALL))
    need = estimate(rx.resolve_decoder(hf_config=config), seeded=True)
    # A fresh interpreter: its peak RSS is this build's alone, imports included.
    run = subprocess.run([sys.executable, "-c", CHILD, str(config), str(tmp_path / "out")], capture_output=True,
                         text=True, env=os.environ | {ENV: "64G"}, timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    measured = json.loads(run.stdout.strip().splitlines()[-1])
    assert measured["passed"]
    ratio = need.total / measured["peak"]
    print(f"peak {measured['peak'] / 2**20:.0f} MiB, estimate {need.total / 2**20:.0f} MiB, x{ratio:.2f}")
    assert 1.0 <= ratio <= FACTOR, (measured["peak"], need.total)


def test_the_parameter_count_is_llama_3_1_8bs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "100T")  # nothing refused: the figure itself is what is checked
    spec = rx.resolve_decoder(preset="llama-3.1-8b")
    need = estimate(spec, seeded=True)
    assert need.parameters == 8_030_261_248  # Meta's published count: our canonical weights are the model's
    assert need.per_parameter == 32 and 270 * 2**30 < need.total < 285 * 2**30


@pytest.mark.parametrize(
    ("dtype", "seeded", "count"),
    [("fp32", True, 32), ("fp16", True, 38), ("fp32", False, 28), ("fp16", False, 34)],
)
def test_bytes_a_parameter(dtype: str, seeded: bool, count: int) -> None:
    # float64 draws (8) or float32 tensors (4), the oracle's float64 copy (8), four copies in the dtype, fp16's 14
    assert per_parameter(dtype, seeded) == count


@pytest.mark.parametrize(
    ("text", "count"),
    [("8G", 8 * 2**30), ("8GiB", 8 * 2**30), ("512M", 512 * 2**20), ("1.5g", 3 * 2**29), ("4096", 4096),
     (" 2T ", 2**41)],
)
def test_the_limit_override_reads_sizes(text: str, count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_size(text) == count
    monkeypatch.setenv(ENV, text)
    assert available() == (count, f"{ENV}={text.strip()}")


@pytest.mark.parametrize("text", ["lots", "-1G", "0", "8 Q", "\u0668G", "1e9"])
def test_a_limit_that_is_not_a_size_names_the_variable(text: str) -> None:
    with pytest.raises(SpecError, match=rf"^{ENV}: must be a size such as 8G"):
        parse_size(text)


def test_without_the_override_the_machines_memory_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    have, where = available()
    assert have is not None and have > 2**28
    assert where in ("physical memory", "the cgroup's memory limit", "ulimit -v")
    assert have <= os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
