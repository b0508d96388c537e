"""What every runner shares: the ``infer(feeds) -> outputs`` interface and checking feeds against the model.

A runner is a context manager; ``infer`` takes and returns ``{name: numpy array}``. Feeds are checked before the
runtime sees them: exact input names, dtype, rank, static dims, and every position input inside
[0, max_positions) as the model's metadata declares. A runtime must never see a position past the table, since some
lookups (ONNX ``Gather``) wrap a negative index instead of failing.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import numpy as np
import onnx
from onnx import TensorProto

from ropeexport.dtypes import DTYPES
from ropeexport.errors import RuntimeInputError

# Every element type an artifact's inputs and outputs use: the table dtypes, plus positions and float64.
NUMPY_OF_ONNX: dict[int, np.dtype] = {d.onnx: np.dtype(d.np_dtype) for d in DTYPES.values()} | {
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.INT32: np.dtype(np.int32),
}


class FeedChecker:
    """Checks feeds against a model's declared inputs and its ropeexport position metadata."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.inputs: dict[str, tuple[np.dtype, list[int | str]]] = {}
        for vi in model.graph.input:
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tt.shape.dim]
            self.inputs[vi.name] = (NUMPY_OF_ONNX[tt.elem_type], dims)
        meta = {p.key: p.value for p in model.metadata_props}
        self.max_positions = int(meta["ropeexport.max_positions"]) if "ropeexport.max_positions" in meta else None
        self.position_inputs = [n for n in meta.get("ropeexport.position_inputs", "").split(",") if n]

    def check(self, feeds: dict[str, np.ndarray]) -> None:
        """Raise RuntimeInputError on the first feed that does not fit the model."""
        missing = sorted(set(self.inputs) - set(feeds))
        extra = sorted(set(feeds) - set(self.inputs))
        if missing or extra:
            raise RuntimeInputError(
                f"feeds: expected inputs {sorted(self.inputs)}; missing {missing or 'none'}, unknown {extra or 'none'}"
            )
        sizes: dict[str, int] = {}
        for name, (dtype, dims) in self.inputs.items():
            value = feeds[name]
            if not isinstance(value, np.ndarray) or value.dtype != dtype:
                got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
                raise RuntimeInputError(f"{name}: expected dtype {dtype}, got {got}")
            if value.ndim != len(dims):
                raise RuntimeInputError(f"{name}: expected rank {len(dims)} {dims}, got shape {list(value.shape)}")
            for axis, (want, got) in enumerate(zip(dims, value.shape, strict=True)):
                if isinstance(want, int) and want and want != got:
                    raise RuntimeInputError(f"{name}: dim {axis} must be {want}, got shape {list(value.shape)}")
                if isinstance(want, str) and want:
                    if sizes.setdefault(want, got) != got:
                        raise RuntimeInputError(
                            f"{name}: dim {axis} ({want}) is {got} but another input has {want} = {sizes[want]}"
                        )
        if self.max_positions is not None:
            for name in self.position_inputs:
                ids = feeds[name]
                bad = (ids < 0) | (ids >= self.max_positions)
                if bad.any():
                    where = [int(i) for i in np.argwhere(bad)[0]]
                    raise RuntimeInputError(
                        f"{name}: value {int(ids[tuple(where)])} at index {where} is outside the table "
                        f"[0, {self.max_positions})"
                    )


class Runner:
    """Base runner: a context manager over one model with ``infer(feeds) -> {output name: array}``."""

    name = "runner"
    model_path: Path | None  # None for a model given as bytes (``IoBindingRunner``)
    checker: FeedChecker | None  # None: the feeds go unchecked (``IoBindingRunner(check=False)``)

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        self.checker = FeedChecker(onnx.load(str(self.model_path), load_external_data=False))

    def __enter__(self) -> Runner:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the runtime's resources."""

    def describe(self) -> str:
        """The runtime and device in words, for reports (for example ``onnxruntime 1.31.1 CPUExecutionProvider``)."""
        return self.name

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Check the feeds, run the model, return every output by name."""
        if self.checker is not None:
            self.checker.check(feeds)
        return self._run(feeds)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError
