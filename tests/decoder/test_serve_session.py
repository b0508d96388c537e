"""The session ``ropeexport generate`` serves with (``decoder.serve.DecoderSession``), opened through ``runtimes.ort``.

Its options decide serving speed (docs/status/speed.md: thread count, spinning, sequential execution): each row opens
the seeded decoder as a server would and reads the options back from ONNX Runtime's own session, so a change to how
the session is opened that changes what it runs fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ropeexport.decoder.serve import DecoderSession

# (threads, spinning) -> what ONNX Runtime's session reports: intra-op threads (0: ORT's own count, one per
# physical core), the two spinning entries
CASES = [
    ((None, True), (0, "1")),  # what `ropeexport generate` opens by default
    ((1, False), (1, "0")),
    ((2, True), (2, "1")),
]


@pytest.mark.parametrize(("asked", "expected"), CASES, ids=[f"threads={a[0]}-spinning={a[1]}" for a, _ in CASES])
def test_the_served_session_runs_as_configured(asked: tuple[int | None, bool], expected: tuple[int, str],
                                               seeded_decoder: Path) -> None:  # fmt: skip
    threads, spinning = asked
    session = DecoderSession(seeded_decoder, threads=threads, spinning=spinning).session
    options = session.get_session_options()
    import onnxruntime as ort

    assert session.get_providers() == ["CPUExecutionProvider"]
    assert options.intra_op_num_threads == expected[0] and options.inter_op_num_threads == 1
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    assert options.log_severity_level == 3 and not options.enable_profiling
    for pool in ("intra", "inter"):
        assert options.get_session_config_entry(f"session.{pool}_op.allow_spinning") == expected[1]
