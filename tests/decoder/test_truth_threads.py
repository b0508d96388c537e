"""The float64 truth's BLAS threads (``numerics.one_blas_thread`` on ``oracle.decoders_float64``).

A float64 product's last bits follow the thread count, and on a loaded 2-core machine two threads wait on each other
at every small product: every pass of the truth runs on one, whatever the caller set, and gives the caller's back.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from ropeexport.decoder.build import DecoderRequest, resolve
from ropeexport.decoder.oracle import Feed, Stored64, decoders_float64
from ropeexport.decoder.parts import position_pieces
from ropeexport.decoder.weights import seeded_weights
from tests.decoder.tiny import CONFIGS

# (the decoder in tests/decoder/tiny.py, the caller's BLAS thread count): a dense decoder and a mixture's pass
BLAS_CALLERS = [("llama", 2), ("qwen3_moe", 2)]


@pytest.mark.parametrize(("name", "caller"), BLAS_CALLERS, ids=[c[0] for c in BLAS_CALLERS])
def test_the_float64_truth_runs_on_one_blas_thread_and_gives_the_callers_count_back(name: str, caller: int) -> None:
    blas = lambda: {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}  # noqa: E731
    model_type, fields = CONFIGS[name]
    spec, _ = resolve(DecoderRequest(config={"model_type": model_type, **fields}))
    ids = np.arange(6)[None] % spec.vocab_size  # [1, 6]
    seen: list[set[int]] = []
    with threadpool_limits(limits=caller, user_api="blas"):
        decoders_float64(spec, Stored64(spec, seeded_weights(spec)), [Feed(ids, np.arange(6)[None], np.ones_like(ids))],
                         position_pieces(spec), on_layer=lambda i: seen.append(blas()))  # fmt: skip
        after = blas()
    assert seen == [{1}] * spec.num_layers  # every layer of the pass
    assert after == {caller}
