"""Verification of Transformer-XL ``scores``: stored tensors against float64, logits against eager and float64.

The oracle is written here from the paper's four terms (Dai et al. 2019, section 3.3), each computed on its own in
float64: A = q_i . k_j, B = q_i . W_R R_(i-j), C = u . k_j, D = v . W_R R_(i-j); scores = (A + B + C + D) /
sqrt(head_dim), -inf for j after i when causal. R_d is built channel by channel from the formula (channel c < d_model
/ 2: sin(d / 10000^(2c / d_model)); channel d_model/2 + c: cos of the same angle), not with the reference module's
code. u, v and W_R are the spec's weights rounded once to the dtype (model data, as ``ropeexport.learned`` says).

Probes: those of the additive-bias methods (``families.bias.probes.bias_probes``: self-attention at the start and end,
rows with offsets, and one query at max_positions - 1 against keys at a strided set of distances plus 0..64 and
around every power of two); for ``causal=False`` the same distances again with the query at 0, so negative
distances are exercised too. The stored table is checked at every row (every accepted distance).
Guards: the bias methods' (``families.bias.probes.bias_guards``): calls with a query or a key position of -1 or
max_positions, sent straight to the runtime past the runner's own check, must fail inside the graph (a causal graph
clamps distances at 0, so this is not automatic).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from ropeexport.dtypes import DTYPES
from ropeexport.families.bias.probes import bias_probes
from ropeexport.families.transformer_xl.oracle import projected_oracle
from ropeexport.families.transformer_xl.reference import TransformerXLScores, stored_weights
from ropeexport.families.transformer_xl.spec import TransformerXLSpec, learned_weights
from ropeexport.numerics import ulp_distance
from ropeexport.recipes import KPOS, QPOS, Feeds, Probe
from ropeexport.tensors import to_torch

TABLE_MAX_ULP = 0.5  # rounded once to nearest: never more than half a unit in the last place
FLOAT64_SLACK = 2.0**-49  # float64 error of sin/cos(d * inv_freq) relative to max(|angle|, 1), 4x over the estimate
CHECK_ROWS = 4096  # table rows per block of the table check


def scores_probes(spec: TransformerXLSpec) -> tuple[list[Probe], dict[str, Any]]:
    """The additive-bias probes, plus negative distances for bidirectional specs (module docstring)."""
    # bias_probes reads max_positions, artifact and causal, which this spec has as a BiasSpec does.
    probes, coverage = bias_probes(cast(Any, spec))
    if not spec.causal:
        last = spec.max_positions - 1
        for p in list(probes):
            if p.name.startswith("decode["):
                keys = last - p.positions[KPOS]  # the same distances, now from a query at 0: i - j <= 0
                probes.append(Probe(f"from-start{p.name[6:]}", {QPOS: np.zeros((1, 1), np.int64), KPOS: keys}))
        coverage["distances"] += ", both signs"
    return probes, coverage


def check_tables(spec: TransformerXLSpec, model_path: Path) -> list[dict[str, Any]]:
    """Stored u, v (against the float64 weights) and W_R R (every row, against float64): max error in ulps.

    u and v must be within 0.5 ulp outright. Each W_R R_d element may differ from the oracle by its float64 error
    bound on top, ``(2^-49 max(|d|, 1) + d_model 2^-53) * sum_m |W_R[o, m]|``: the angles' and sin/cos roundings
    (every inv_freq <= 1) and the d_model-term sum, which this oracle adds in another order than the module. Near a
    logit term that cancels to ~0 that bound is most of a float32 ulp; elsewhere it is below 1e-3 ulp.
    """
    model = onnx.load(str(model_path))
    stored = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = learned_weights(spec)
    H, d = spec.num_heads, spec.head_dim
    shapes = {"r_w_bias": [H, d], "r_r_bias": [H, d], "r_head_table": [spec.table_rows, H, d]}
    results = []
    for name, shape in shapes.items():
        result: dict[str, Any] = {"name": name, "expected_shape": shape, "dtype": spec.dtype}
        table = stored.get(name)
        if table is None or list(table.shape) != shape:
            got = None if table is None else list(table.shape)
            results.append(result | {"shape": got, "max_ulp": None, "passed": False, "reason": f"found {got}"})
            continue
        if name != "r_head_table":
            worst = float(ulp_distance(table, weights[name], spec.dtype).max())
            results.append(result | {"shape": shape, "max_ulp": worst, "passed": worst <= TABLE_MAX_ULP})
            continue
        weight_sums = np.abs(stored_weights(spec)["r_net"]).sum(axis=1).reshape(H, d)  # sum_m |W_R[o, m]|
        worst, worst_distance = 0.0, 0
        for start in range(0, spec.table_rows, CHECK_ROWS):  # in blocks of rows: the float64 temporaries stay small
            distances = np.arange(start, min(start + CHECK_ROWS, spec.table_rows)) - spec.distance_offset
            expected = projected_oracle(spec, distances)  # [n, H, d]
            bound = FLOAT64_SLACK * np.maximum(np.abs(distances), 1.0) + spec.d_model * 2.0**-53
            slack = bound[:, None, None] * weight_sums  # [n, H, d]
            error = np.maximum(np.abs(table[start : start + len(distances)].astype(np.float64) - expected) - slack, 0)
            ulps = (error / DTYPES[spec.dtype].ulp(expected)).reshape(len(distances), -1).max(axis=1)
            if ulps.max() > worst or start == 0:
                worst, worst_distance = float(ulps.max()), int(distances[int(np.argmax(ulps))])
        results.append(
            result
            | {"shape": shape, "max_ulp": worst, "worst_distance": worst_distance, "passed": worst <= TABLE_MAX_ULP}
            | {"float64_slack": "(2^-49 max(|d|, 1) + d_model 2^-53) * sum_m |W_R[o, m]|"}
        )
    return results


@lru_cache(maxsize=4)
def _module(spec: TransformerXLSpec) -> TransformerXLScores:
    """The reference module of a spec, built once per verification (its table is the costly part)."""
    return TransformerXLScores(spec)


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()  # every bf16 value is a float32 value


def scores_eager(spec: TransformerXLSpec, feeds: Feeds) -> dict[str, np.ndarray]:
    """The reference module's logits in the artifact dtype."""
    with torch.no_grad():
        scores = _module(spec)(
            to_torch(feeds["query"]),
            to_torch(feeds["key"]),
            query_position_ids=torch.from_numpy(feeds[QPOS]),
            key_position_ids=torch.from_numpy(feeds[KPOS]),
        )
    return {"scores": _numpy(scores)}
