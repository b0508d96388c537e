"""What a finding does to the model: the logits with the finding's sites as they are against the logits with just
those sites repaired (``fix.repair``), on one short call placed where the finding shows.

The call: n = 8 tokens (fewer near the start) whose last sits at the position where the finding's sites are worst
(the audit's probes), as ``prove`` places calls: after p = position + 1 - n random cached entries (std 1, the same in
both models) where the model takes a cache, else at position_ids p .. position where it takes those; a model with
neither is called on the whole sequence 0 .. position when that is at most ``LONGEST`` tokens. Reported: max
|logits_original - logits_fixed| over the call, and that over max |logits_original| (the logit scale), and the
logits' element type: a one-ulp table difference reads as ~1e-5 or less, a wrong schedule as a sizable part of the
scale (``advice`` turns it into a severity). A model that cannot be called so, or a finding whose repair graft does
not make, says why instead (``not_measured``); the finding stays. So does a call whose cache (given and given back)
would pass ``prove.CACHE_GIB``: the two models are run one after the other, the repaired one written beside them
with its weights copied block by block (``model.write_model``), so what the effect costs is one session of the model
and that call's cache.
"""  # noqa: D205

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx_ir as ir

from ropeexport.audits.layers import Encodings
from ropeexport.audits.model import load_model, ort_reason, quiet, write_model
from ropeexport.audits.prove import CACHE_GIB
from ropeexport.errors import SpecError

TOKENS = 8
LONGEST = 4096  # the longest whole sequence a model without cache or position_ids is called on
ORT_TYPES: dict[ir.DataType | None, str] = {ir.DataType.FLOAT: "tensor(float)", ir.DataType.FLOAT16: "tensor(float16)",
             ir.DataType.INT64: "tensor(int64)", ir.DataType.INT32: "tensor(int32)", ir.DataType.BOOL: "tensor(bool)"}
NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
         "tensor(int32)": np.int32, "tensor(bool)": np.bool_}  # fmt: skip
DTYPE_NAMES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(bfloat16)": "bfloat16",
               "tensor(double)": "float64"}  # the output's element type, as the severity names it (``advice``)


def measure(source: Path, records: list[dict[str, Any]], encodings: Encodings, sites: list[int],
            position: int) -> dict[str, Any]:  # fmt: skip
    """The effect of repairing ``records[i]`` for i in ``sites`` (module doc), on a call ending at ``position``."""
    import onnxruntime as ort

    from ropeexport.audits.fix import repair

    try:
        model, _ = repair(load_model(source), source, records, encodings, sites)
    except SpecError as exc:
        return {"not_measured": f"its repair is not one graft makes ({exc.message})", "unrepairable": exc.message}
    inputs = [SimpleNamespace(name=v.name, type=ORT_TYPES.get(v.dtype, "tensor(float)"),
                              shape=[d if isinstance(d, int) else str(d) for d in (v.shape or [])])
              for v in model.graph.inputs if v.name not in model.graph.initializers]  # as ORT lists them  # fmt: skip
    outputs = [[d if isinstance(d, int) else str(d) for d in (v.shape or [])] for v in model.graph.outputs]
    feeds = _feeds(inputs, outputs, encodings.first, position)
    if isinstance(feeds, str):
        return {"not_measured": feeds}
    output = next((v for v in model.graph.outputs if v.name == "logits"), model.graph.outputs[0])
    name, dtype = output.name, ORT_TYPES.get(output.dtype, str(output.dtype))
    got: list[np.ndarray] = []
    with tempfile.TemporaryDirectory(prefix="ropeexport-effect-") as folder:
        fixed = Path(folder) / "fixed.onnx"
        write_model(model, fixed)  # the weights copied block by block, never held
        del model
        for path in (source, fixed):  # one session at a time: each holds the whole model
            try:
                session = ort.InferenceSession(str(path), quiet()[0], providers=["CPUExecutionProvider"])
            except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
                return {"not_measured": f"ONNX Runtime refuses the model ({ort_reason(exc)})"}
            try:
                got.append(np.asarray(session.run([name], feeds[0], quiet()[1])[0], np.float64))
            except Exception as exc:  # noqa: BLE001 - ORT's reason, in one line
                return {"not_measured": f"ONNX Runtime refuses the call ({ort_reason(exc)})"}
            del session
    worst = float(np.max(np.abs(got[0] - got[1]), initial=0.0))
    scale = float(np.max(np.abs(got[0]), initial=0.0))
    first, last = feeds[1]
    return {"position": position, "positions": [first, last], "output": name, "max_abs": worst, "scale": scale,
            "relative": worst / scale if scale else worst, "how": feeds[2],
            "dtype": DTYPE_NAMES.get(dtype, dtype)}  # fmt: skip


def _feeds(declared: list[Any], outputs: list[list[Any]], spec: Any,
           position: int) -> tuple[dict[str, np.ndarray], tuple[int, int], str] | str:  # fmt: skip
    """(feeds, (first, last position), how the call was placed), or why the model cannot be called there; the model's
    inputs as ORT lists them (name, shape, type), its outputs' shapes.
    """  # noqa: D205
    inputs = {i.name: i for i in declared}
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
    if past and cached:
        size = sum(2 * past * _width(inputs[n], spec) * np.dtype(NUMPY.get(inputs[n].type, np.float32)).itemsize
                   for n in cached)  # the past given, and as much again given back  # fmt: skip
        if size > CACHE_GIB * 2**30:
            return (f"a call reaching position {position} gives the model a cache of {past} entries, "
                    f"{size / 2**30:.1f} GiB with what it gives back (at most {CACHE_GIB:g} GiB are run)")  # fmt: skip
    rng = np.random.default_rng(0)
    vocab = next((o[-1] for o in outputs if o and isinstance(o[-1], int)), 2)
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
            feeds[name] = rng.standard_normal((1, heads, past, width), dtype=np.float32).astype(dtype, copy=False)
        else:
            return f"the model reads input {name!r}, which the effect's call cannot feed"
    return feeds, (position + 1 - tokens, position), how


def _width(value: Any, spec: Any) -> int:
    """A cache input's heads x head width per entry (symbolic ones from ``spec``)."""
    heads = value.shape[1] if isinstance(value.shape[1], int) else getattr(spec, "num_kv_heads", 1)
    return int(heads) * int(value.shape[3] if isinstance(value.shape[3], int) else spec.head_dim)
