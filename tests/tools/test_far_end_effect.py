"""tools/far_end_effect.py: a context it cannot run is one line, exit 2, nothing written; and its measurement at a
small context (the code of the 131072-position figures in docs/status/peers.md, not their size): the audit's effect
within 2x of the independent run, measured to the far end.
"""  # noqa: D205

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.toolmod import tool

FAR = tool("far_end_effect")

# (--positions, why it is refused)
REFUSED = [("1000", "not a power of two"), ("512", "under 1024")]


@pytest.mark.fast
@pytest.mark.parametrize(("positions", "why"), REFUSED, ids=["not-a-power-of-two", "under-1024"])
def test_a_context_it_cannot_run_is_one_line_and_exit_2(positions: str, why: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "far.json"
    assert FAR.main(["--work", str(tmp_path / "work"), "--out", str(out), "--positions", positions]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --positions: must be a power of two of at least 1024, got {positions}"], err
    assert not out.exists() and not (tmp_path / "work").exists()


# (context E, calls of the independent prefill): the scores' budget halves the call where E doubles
CHUNKS = [(1024, 1024), (65536, 256), (131072, 128)]


@pytest.mark.fast
@pytest.mark.parametrize(("end", "chunk"), CHUNKS, ids=[str(e) for e, _ in CHUNKS])
def test_the_independent_prefill_keeps_its_scores_in_budget(end: int, chunk: int) -> None:
    assert FAR.chunk_for(end) == chunk
    assert chunk * end * FAR.HEADS * 4 <= FAR.SCORES_BYTES


@pytest.mark.fast
@pytest.mark.parametrize("case", sorted(FAR.CASES))
def test_the_independent_frequencies_are_transformers_own(case: str) -> None:
    """The float64 inverse frequencies the independent run takes (written from transformers' definitions) agree with
    transformers' own (float32) for each case's config, at 131072 and at a small context.
    """  # noqa: D205
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for end in (1024, 131072):
        fields = FAR.CASES[case].fields(end)
        config = transformers.AutoConfig.for_model(FAR.CASES[case].model_type, **fields)
        theirs, _ = ROPE_INIT_FUNCTIONS[fields["rope_parameters"]["rope_type"]](config)
        ours = FAR.CASES[case].inv64(end)
        assert ours.shape == tuple(theirs.shape), (ours.shape, theirs.shape)
        assert abs(ours / theirs.double().numpy() - 1).max() < 1e-6, (end, ours, theirs)


@pytest.mark.slow  # a dynamo export and four prefills of 1016 tokens (about 15 s at load 2 on 2 cores)
def test_the_llama3_x32_case_at_a_small_context_is_within_2x(tmp_path: Path) -> None:
    """Llama 3.2's llama3 x32 float32 angles (the case this tool added), at E = 1024: the audit's effect within 2x
    of the independent run, which saw the far end (the record says so), and the record names its command and load.
    """  # noqa: D205
    pytest.importorskip("transformers")
    out = tmp_path / "far.json"
    rc = FAR.main(["--case", "llama3-x32", "--work", str(tmp_path / "work"), "--out", str(out), "--positions", "1024"])
    record = json.loads(out.read_text())
    assert rc == 0 and record["within_2x"], record
    assert record["audit"]["finding"] == "float32-angles", record["audit"]
    assert [p["positions"] for p in record["audit"]["far_end"]] == [[1016, 1023]] * 4, record["audit"]["far_end"]
    assert record["independent"]["relative"] > 0 and "calls of 1024" in record["independent"]["how"], record
    assert record["model"]["fields"]["rope_parameters"]["original_max_position_embeddings"] == 64, record["model"]
    assert "--case llama3-x32" in record["command"] and len(record["host"]["load"]) == 3, record
