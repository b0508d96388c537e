"""Learned parameters of an encoding: seeded initialisation, or a user's safetensors file.

A family declares its tensors as ``Tensor(name, shape, std)``; ``resolve_weights`` returns float64 arrays either drawn
from ``numpy.random.default_rng(seed)`` (normal with that std, in declaration order: the same seed gives the same
weights) or read from ``weights`` (a .safetensors file whose tensor names and shapes must match exactly). The
artifact stores them rounded once to its dtype; eager and the float64 oracle use those rounded values, since the
weights are the model's data rather than a derived quantity.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from ropeexport.errors import SpecError
from ropeexport.inputs import check_regular_file
from ropeexport.numerics import round_once


@dataclass(frozen=True)
class Tensor:
    """One learned tensor: its name in the weights file, its shape, and the std of its seeded initialisation."""

    name: str
    shape: tuple[int, ...]
    std: float = 0.02
    positive: bool = False  # draw |normal| + std: for parameters a method requires to be > 0


MAX_WEIGHTS_BYTES = 2**31  # learned position tables are kilobytes to megabytes; 2 GiB is ONNX's own cap


def resolve_weights(tensors: list[Tensor], weights: str, seed: int) -> dict[str, np.ndarray]:
    """float64 weights by name, from ``weights`` (a safetensors path) when given, else seeded (module docstring)."""
    if not weights:
        rng = np.random.default_rng(seed)
        out = {}
        for t in tensors:
            draw = rng.standard_normal(t.shape) * t.std
            out[t.name] = np.abs(draw) + t.std if t.positive else draw
        return out
    # A regular file of bounded size first: a FIFO would hang safetensors, /dev/zero would fill memory.
    path = check_regular_file(weights, "weights", MAX_WEIGHTS_BYTES)
    try:
        from safetensors.numpy import load_file

        loaded = load_file(str(path))
    except ImportError:
        raise SpecError(
            "weights", "reading a weights file needs the safetensors package (pip install safetensors)"
        ) from None
    except Exception as exc:  # missing file, not a safetensors file: the library raises several types
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise SpecError("weights", f"cannot read {str(path)!r} as safetensors: {reason}") from None
    expected = {t.name: t for t in tensors}
    missing = sorted(set(expected) - set(loaded))
    if missing:
        raise SpecError("weights", f"{str(path)!r} lacks tensor(s) {', '.join(missing)}; expected {_describe(tensors)}")
    extra = sorted(set(loaded) - set(expected))
    if extra:
        raise SpecError(
            "weights", f"{str(path)!r} has unexpected tensor(s) {', '.join(extra)}; expected {_describe(tensors)}"
        )
    out = {}
    for t in tensors:
        array = loaded[t.name]
        if tuple(array.shape) != t.shape:
            raise SpecError("weights", f"tensor {t.name!r} has shape {list(array.shape)}, expected {list(t.shape)}")
        if array.dtype.kind != "f":
            raise SpecError("weights", f"tensor {t.name!r} has dtype {array.dtype}, expected a float dtype")
        values = array.astype(np.float64)
        if not np.isfinite(values).all():
            raise SpecError("weights", f"tensor {t.name!r} holds inf or NaN")
        if t.positive and (values <= 0).any():
            raise SpecError("weights", f"tensor {t.name!r} must be > 0 everywhere")
        out[t.name] = values
    return out


def rounded(weights: dict[str, np.ndarray], dtype: str) -> dict[str, np.ndarray]:
    """The weights as the artifact stores them: rounded once to ``dtype`` (returned as float64 for the oracle)."""
    out = {}
    for name, w in weights.items():
        with np.errstate(over="ignore"):  # an overflow is reported below, as one line, not as a numpy warning
            stored = round_once(w, dtype).astype(np.float64)
        if not np.isfinite(stored).all():
            raise SpecError("weights", f"tensor {name!r} overflows {dtype} (largest |value| {np.abs(w).max():.4g})")
        out[name] = stored
    return out


def _describe(tensors: list[Tensor]) -> str:
    return ", ".join(f"{t.name} {list(t.shape)}" for t in tensors)


def require_weights_path(value: object) -> str:
    """The ``weights`` field: empty (seeded weights) or the path of a weights file; else SpecError naming it."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError("weights", f"must be the path of a .safetensors file (or empty for seeded), got {value!r}")
    return value


def load_weights(tensors: tuple[Tensor, ...], weights: str, seed: int) -> dict[str, np.ndarray]:
    """``resolve_weights``, cached per (tensors, file and its mtime/size, seed); the arrays are read-only.

    Specs resolve their weights when validated (so a bad file is a SpecError before anything is written) and every
    stage asks again; the cache makes that one read. The file's modification time and size are part of the key so
    that a file rewritten in place is read again.
    """
    stamp = None
    if weights:
        try:
            info = os.stat(weights)
            stamp = (info.st_mtime_ns, info.st_size)
        except OSError:
            stamp = None  # resolve_weights raises the SpecError that says why
    return _cached_weights(tensors, weights, seed, stamp)


@functools.lru_cache(maxsize=32)
def _cached_weights(
    tensors: tuple[Tensor, ...], weights: str, seed: int, stamp: tuple[int, int] | None
) -> dict[str, np.ndarray]:
    out = resolve_weights(list(tensors), weights, seed)
    for array in out.values():
        array.flags.writeable = False  # shared by every caller of the cache
    return out
