"""What the API's functions share: their arguments read one way (names, paths, specs, tolerances, runtimes), and the
tree's index rewritten after a build, a disk that refuses it said in one line.
"""  # noqa: D205

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ropeexport import artifacts
from ropeexport.encoding import EncodingKind
from ropeexport.errors import OutputError, SpecError
from ropeexport.runtimes import check_runtime_names
from ropeexport.specs import SpecBase

Tolerance = float | Mapping[str, float] | None
Names = str | Sequence[str] | None


def _names(value: Names, field: str) -> list[str] | None:
    """A list of names; one string is a list of one (``dtypes="fp16"``), never its letters."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise SpecError(field, f"must be a name or a list of names, got {value!r}")
    return list(value)


def _path(value: str | Path, field: str) -> Path:
    """A path that is given: an empty string is an error, never the current folder."""
    if not isinstance(value, (str, Path)):
        raise SpecError(field, f"must be a path, got {type(value).__name__}")
    if not str(value).strip():
        raise SpecError(field, "is empty; give a path")
    return Path(value)


def _a_spec(value: object) -> SpecBase:
    if not isinstance(value, SpecBase):
        raise SpecError("spec", f"must be a spec (rx.spec, rx.from_preset, ...), got {type(value).__name__}")
    return value


def _tolerance(value: Tolerance, name: str) -> dict[str, float]:
    """A number for every output, or {output: number} (``""`` for every output); checked like the CLI's flags."""
    table = {"": value} if isinstance(value, (int, float)) else dict(value or {})
    for output, number in table.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 <= number < float("inf"):
            raise SpecError(name, f"must be a finite number >= 0 (for {output or 'every output'}), got {number!r}")
    return {k: float(v) for k, v in table.items()}


def _encoding_kind(runtimes: Names, atol: Tolerance, rtol: Tolerance) -> EncodingKind:
    names = check_runtime_names(_names(runtimes, "runtimes") or ["ort"])
    return EncodingKind(names, _tolerance(atol, "atol"), _tolerance(rtol, "rtol"))


def _index(out: Path, seconds: float | None = None, jobs: int | None = None) -> None:
    """Write the tree's index; a full or read-only disk is one line saying the index is out of date."""
    try:
        artifacts.write_index(out, seconds, jobs)
    except OSError as exc:
        raise OutputError(
            "out_dir",
            f"the artifacts are built, but {str(out / 'index.json')!r} could not be rewritten ({exc.strerror}); "
            "free space and run 'ropeexport verify' on the tree to index them",
        ) from None
