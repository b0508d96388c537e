"""Typed, frozen specs, validated on construction.

A spec is everything that determines an artifact's bytes: the encoding's parameters, the artifact kind, the dtype and
the graph style. ``RopeSpec(**fields)`` (or any encoding's spec class) either holds a consistent configuration or
raises SpecError naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import tomllib

from ropeexport.dtypes import DTYPES
from ropeexport.errors import SpecError

# The forms of an encoding artifact, and those only a block has: named once, in ``ropeexport.forms``.
from ropeexport.forms import BLOCK_FORMS as BLOCK_FORMS
from ropeexport.forms import GRAPHS as GRAPHS
from ropeexport.inputs import check_depth, loads_json, read_text

# Positions are exact in float32 up to 2**24; past that an in-graph position cast would round.
MAX_TABLE_POSITIONS = 2**24
MAX_TABLE_ENTRIES = 2**27  # float64 work of ~4 GiB at build time; 1M positions x 64 frequencies fits
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def require_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """An integer (an integral float is accepted; strings are not) within bounds; else SpecError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SpecError(name, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise SpecError(name, f"must be {bound}, got {value}")
    return value


def require_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of ``choices``; else SpecError listing them."""
    if value not in choices:
        raise SpecError(name, f"must be one of {', '.join(choices)}; got {value!r}")
    return str(value)


def require_dtype(value: Any, choices: tuple[str, ...], int4: str) -> str:
    """One of the dtypes ``choices``; else SpecError listing them, and for ``int4`` (what onnxruntime-genai's builder
    takes as ``-p int4``) where int4 is asked for instead (``int4``: the sentence saying it).
    """  # noqa: D205
    if value == "int4":
        raise SpecError("dtype", f"must be one of {', '.join(choices)}; got 'int4': {int4}")
    return require_choice("dtype", value, choices)


@dataclass(frozen=True)
class SpecBase:
    """Fields every artifact has. Subclasses add their encoding's fields and ``_validate``.

    ``artifact`` picks the artifact kind (the encoding's first kind by default); ``max_positions`` is the largest
    position plus one that the artifact accepts: past it, runners raise.
    """

    encoding: ClassVar[str] = ""
    artifacts: ClassVar[tuple[str, ...]] = ()
    graphs: ClassVar[tuple[str, ...]] = GRAPHS
    # Fields whose values form a fixed set (beyond artifact, dtype and graph), for help texts and listings.
    choices: ClassVar[dict[str, tuple[str, ...]]] = {}

    name: str = ""
    artifact: str = ""
    dtype: str = "fp32"
    graph: str = "fused"
    max_positions: int = 4096

    def __post_init__(self) -> None:
        self._put("artifact", require_choice("artifact", self.artifact or self.artifacts[0], self.artifacts))
        self._put("dtype", require_dtype(self.dtype, tuple(DTYPES), "int4 stores a decoder's projections "
                                         "(--artifact decoder with `weight_format` int4); tables keep a float dtype"))
        self._put("graph", require_choice("graph", self.graph, self.graphs))
        self._put("max_positions", require_int("max_positions", self.max_positions, 1, MAX_TABLE_POSITIONS))
        self._validate()
        name = self.name or self.default_name()
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise SpecError(
                "name",
                "must be 1-100 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
        self._put("name", name)

    def _put(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)

    def _validate(self) -> None:
        """Check and normalise the encoding's own fields (raise SpecError naming the field)."""

    def default_name(self) -> str:
        """The folder name when none is given: ``ENCODING-ARTIFACT[-TAGS]-GEOMETRY-pMAX_POSITIONS-DTYPE-GRAPH``.

        Every part that shapes the model is in it (``alibi-bias-h12x64-p2048-fp16-fused``), so a 16-head build does
        not take a 12-head build's folder; what the name leaves out, the build's spec check catches before any
        replace (``build.check_target``).
        """
        parts = [self.encoding, self.artifact, *self.name_tags(), self.geometry(), f"p{self.max_positions}"]
        return "-".join([p for p in parts if p] + [self.dtype, self.graph])

    def name_tags(self) -> list[str]:
        """Words for the encoding's choices that change the model (a layout, a schedule), for ``default_name``."""
        return []

    def geometry(self) -> str:
        """``hHEADSxHEAD_DIM`` where the spec has heads, for ``default_name``."""
        heads, dim = getattr(self, "num_heads", None), getattr(self, "head_dim", None)
        return f"h{heads}x{dim}" if heads and dim else ""

    def to_dict(self) -> dict[str, object]:
        """Every field, defaults resolved, in a JSON-friendly dict (the manifest's ``spec``)."""
        out = {"encoding": self.encoding} | dataclasses.asdict(self)
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in out.items()}

    def replace(self, **changes: object) -> Self:
        """A copy with some fields changed, validated again."""
        fields: dict[str, Any] = changes  # any values: ``__post_init__`` validates them, naming the field at fault
        return dataclasses.replace(self, **fields)


def require_float(name: str, value: Any, minimum: float | None = None, strict: bool = False) -> float:
    """A finite number (not a bool), at least (or above, with ``strict``) ``minimum``; else SpecError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, f"must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer with hundreds of digits: no float holds it
        raise SpecError(name, f"must be a finite number, got an integer of {len(str(abs(value)))} digits") from None
    if not math.isfinite(number):
        raise SpecError(name, f"must be a finite number, got {value!r}")
    if number != 0 and abs(number) < sys.float_info.min:
        raise SpecError(name, f"must be a normal float (|x| >= {sys.float_info.min:g}) or 0, got {value!r}")
    if minimum is not None and (number <= minimum if strict else number < minimum):
        raise SpecError(name, f"must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
    return number


def require_number(name: str, value: Any, zero: str, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 with ``positive``), as float; SpecError naming ``name`` otherwise.

    ``zero``: what 0 means for the field (or what the value is for), said in the message.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SpecError(name, f"must be a finite number >= 0 ({zero}), got {value!r}")
    if positive and not value:
        raise SpecError(name, f"must be a finite number > 0 ({zero}), got {value!r}")
    return float(value)


def require_flag(name: str, value: Any) -> bool:
    """A bool, and only a bool (a layer's flags as decoder.json holds them); else SpecError."""
    if not isinstance(value, bool):
        raise SpecError(name, f"must be true or false, got {value!r}")
    return value


def require_bool(name: str, value: Any) -> bool:
    """A bool, or the strings true/false; else SpecError."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise SpecError(name, f"must be true or false, got {value!r}")


def read_spec_file(path: str | Path) -> list[dict[str, Any]]:
    """Read the raw fields of one spec, or of several (``artifacts = [...]``), from a .json or .toml file.

    With ``artifacts``, the other top-level keys are defaults shared by every artifact. Fields are returned raw (not
    yet validated) so that command-line flags can be merged in before defaults are filled.
    """
    path = Path(path)
    kind = {".toml": "TOML", ".json": "JSON"}.get(path.suffix.lower())
    if kind is None:
        raise SpecError("spec_file", f"{str(path)!r} must end in .json or .toml")
    text = read_text(path, "spec_file")  # a regular file of sane size: not /dev/zero, not a FIFO
    where = f"spec_file {str(path)!r}"
    if kind == "JSON":
        data = loads_json(text, where)
    else:
        try:
            data = tomllib.loads(text)
            check_depth(data, where)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError("spec_file", f"{str(path)!r} is not valid TOML: {exc}") from None
        except RecursionError:
            raise SpecError("spec_file", f"{str(path)!r} is nested too deeply") from None
    if not isinstance(data, Mapping):
        raise SpecError("spec", "must be a table of fields")
    if "artifacts" not in data:
        return [dict(data)]
    items = data["artifacts"]
    if not isinstance(items, list) or not items or not all(isinstance(i, Mapping) for i in items):
        raise SpecError("artifacts", "must be a non-empty list of tables of fields")
    shared = {k: v for k, v in data.items() if k != "artifacts"}
    return [shared | dict(item) for item in items]
