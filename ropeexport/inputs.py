"""Reading files a user hands us: regular files of sane size only, and JSON that cannot crash the parser.

Every reader raises SpecError naming ``field`` (a flag such as ``--hf-config``, or a file such as ``manifest.json``)
with one line a user can act on. Why each check exists:
- a FIFO, a device (``/dev/zero``) or a socket would hang or read until memory runs out, so only regular files are
  opened, and never more than ``max_bytes`` of them;
- deeply nested JSON makes Python's parser raise RecursionError, and integers past float range (``1e400`` written
  as digits) parse as Python ints that later overflow, so both are refused here, once, for every JSON input;
- ``NaN`` / ``Infinity`` are not JSON; Python accepts them by default, we do not.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ropeexport.errors import SpecError

MAX_TEXT_BYTES = 16 * 2**20  # configs, specs, manifests and reports are kilobytes; 16 MiB is far past any of them
MAX_JSON_DEPTH = 64
MAX_JSON_INT_DIGITS = 300  # floats end near 1.8e308: an integer with more digits cannot be a number we use


def check_regular_file(path: str | Path, field: str, max_bytes: int | None = MAX_TEXT_BYTES) -> Path:
    """``path`` as a Path if it is an existing regular file (links followed) of at most ``max_bytes``; else SpecError.

    An empty string is refused: a script with an unset variable must fail, not fall back to something else.
    """
    if str(path) == "":
        raise SpecError(field, "is empty; give a file path")
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise SpecError(field, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise SpecError(field, f"{str(path)!r} is {what}; give a regular file")
    if max_bytes is not None and info.st_size > max_bytes:
        raise SpecError(field, f"{str(path)!r} is {info.st_size} bytes; at most {max_bytes} are read")
    return path


def read_text(path: str | Path, field: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; else SpecError naming ``field``."""
    path = check_regular_file(path, field, max_bytes)
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after the check, open() must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise SpecError(field, f"{str(path)!r} is not a regular file; give a regular file")
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(field, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise SpecError(field, f"{str(path)!r} is larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(field, f"{str(path)!r} is not UTF-8 text") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"integer with {len(text)} digits is out of range")
    return int(text)


def _depth(value: Any, limit: int) -> None:
    """Raise ValueError if ``value`` nests deeper than ``limit`` (iterative: no recursion to overflow)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                raise ValueError(f"nested deeper than {limit} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def check_depth(value: Any, field: str, limit: int = MAX_JSON_DEPTH) -> None:
    """SpecError naming ``field`` when a parsed value (JSON or TOML) nests deeper than ``limit``."""
    try:
        _depth(value, limit)
    except ValueError as exc:
        raise SpecError(field, f"is not usable: {exc}") from None


def loads_json(text: str, field: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON text strictly: no NaN/Infinity, integers within float range, nesting at most ``limit``."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
        _depth(value, limit)
    except RecursionError:
        raise SpecError(field, f"is not usable JSON: nested deeper than {limit} levels") from None
    except json.JSONDecodeError as exc:
        raise SpecError(field, f"is not valid JSON: {exc}") from None
    except ValueError as exc:  # our own limits: NaN/Infinity, integers past float range, nesting
        raise SpecError(field, f"is not usable JSON: {exc}") from None
    return value


def read_json(path: str | Path, field: str, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """A JSON file read with ``read_text`` and parsed with ``loads_json``."""
    return loads_json(read_text(path, field, max_bytes), field)
