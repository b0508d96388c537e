"""What a finding does to the model: the logits with the finding's sites as they are against the logits with just
those sites repaired (``fix.repair``), on one short call placed where the finding shows.

The call: n = 8 tokens (fewer near the start) whose last sits at the position where the finding's sites are worst
(the audit's probes), as ``prove`` places calls: after p = position + 1 - n random cached entries (std 1, the same in
both models) where the model takes a cache, else at position_ids p .. position where it takes those; a model with
neither is called on the whole sequence 0 .. position when that is at most ``LONGEST`` tokens. Reported: max
|logits_original - logits_fixed| over the call, and that over max |logits_original| (the logit scale), and the
logits' element type: a one-ulp table difference reads as ~1e-5 or less, a wrong schedule as a sizable part of the
scale (``advice`` turns it into a severity). A model that cannot be called so, or
a finding whose repair graft does not make, says why instead (``not_measured``); the finding stays.
"""  # noqa: D205

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ropeexport.audits.layers import Encodings
from ropeexport.audits.model import load_model, ort_reason, quiet
from ropeexport.errors import SpecError

TOKENS = 8
LONGEST = 4096  # the longest whole sequence a model without cache or position_ids is called on
NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(bool)": np.bool_}  # fmt: skip
DTYPE_NAMES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16",
               "tensor(double)": "float64"}  # the output's element type, as the severity names it (``advice``)


def measure(source: Path, records: list[dict[str, Any]], encodings: Encodings, sites: list[int],
            position: int) -> dict[str, Any]:  # fmt: skip
    """The effect of repairing ``records[i]`` for i in ``sites`` (module doc), on a call ending at ``position``."""
    import onnx_ir as ir
    import onnxruntime as ort

    from ropeexport.audits.fix import repair

    try:
        model, _ = repair(load_model(source), source, records, encodings, sites)
    except SpecError as exc:
        return {"not_measured": f"its repair is not one graft makes ({exc.message})", "unrepairable": exc.message}
    with tempfile.TemporaryDirectory(prefix="ropeexport-effect-") as folder:
        fixed = Path(folder) / "fixed.onnx"
        ir.save(model, fixed, external_data="fixed.onnx.data", size_threshold_bytes=1024)
        try:
            sessions = [ort.InferenceSession(str(p), quiet()[0], providers=["CPUExecutionProvider"])
                        for p in (source, fixed)]  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            return {"not_measured": f"ONNX Runtime refuses the model ({ort_reason(exc)})"}
        feeds = _feeds(sessions[0], encodings.first, position)
        if isinstance(feeds, str):
            return {"not_measured": feeds}
        output = next((o for o in sessions[0].get_outputs() if o.name == "logits"), sessions[0].get_outputs()[0])
        name = output.name
        try:
            got = [np.asarray(s.run([name], feeds[0], quiet()[1])[0], np.float64) for s in sessions]
        except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
            return {"not_measured": f"ONNX Runtime refuses the call ({ort_reason(exc)})"}
    worst = float(np.max(np.abs(got[0] - got[1]), initial=0.0))
    scale = float(np.max(np.abs(got[0]), initial=0.0))
    first, last = feeds[1]
    return {"position": position, "positions": [first, last], "output": name, "max_abs": worst, "scale": scale,
            "relative": worst / scale if scale else worst, "how": feeds[2],
            "dtype": DTYPE_NAMES.get(output.type, output.type)}  # fmt: skip


def _feeds(session: Any, spec: Any, position: int) -> tuple[dict[str, np.ndarray], tuple[int, int], str] | str:
    """(feeds, (first, last position), how the call was placed), or why the model cannot be called there."""
    inputs = {i.name: i for i in session.get_inputs()}
    cached = {i.name for i in inputs.values() if len(i.shape) == 4 and ("past" in i.name or "cache" in i.name)}
    tokens = min(TOKENS, position + 1)
    past = position + 1 - tokens
    how = "at position_ids" if past else "from position 0"
    if past and cached:
        how = f"after {past} random cached entries"
    elif past and "position_ids" not in inputs:
        if position + 1 > LONGEST:
            return (f"the model takes neither a cache nor position_ids, and a call reaching position {position} "
                    f"would be {position + 1} tokens (at most {LONGEST} are run)")  # fmt: skip
        tokens, past, how = position + 1, 0, "on the whole sequence"
    rng = np.random.default_rng(0)
    vocab = next((o.shape[-1] for o in session.get_outputs() if isinstance(o.shape[-1], int)), 2)
    feeds: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        dtype = NUMPY.get(value.type, np.float32)
        if name == "input_ids":
            feeds[name] = rng.integers(0, max(vocab, 2), (1, tokens)).astype(dtype)
        elif name == "attention_mask":
            feeds[name] = np.ones((1, (past if cached else 0) + tokens), dtype)
        elif name == "position_ids":
            start = past if (cached or past) else 0
            feeds[name] = np.arange(start, start + tokens).reshape(1, tokens).astype(dtype)
        elif name in cached:
            heads = value.shape[1] if isinstance(value.shape[1], int) else getattr(spec, "num_kv_heads", 1)
            width = value.shape[3] if isinstance(value.shape[3], int) else spec.head_dim
            feeds[name] = rng.standard_normal((1, heads, past, width)).astype(dtype)
        else:
            return f"the model reads input {name!r}, which the effect's call cannot feed"
    return feeds, (position + 1 - tokens, position), how
