"""What every report view is made of: ``Field`` (a key, its JSON types, what it is), ``View`` (a JSON object read
through its fields, errors naming the field at fault), ``read_report``; and ``LayerUse``, a field both reports hold.
"""  # noqa: D205

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

from ropeexport.errors import ArtifactError

T = TypeVar("T")
V = TypeVar("V", bound="View")

NUMBER = (int, float)  # a JSON number (never a bool)
TEXT = (str,)
FLAG = (bool,)
WHOLE = (int,)
LIST = (list,)
OBJECT = (dict,)


class Field(Generic[T]):
    """One field of a report's JSON object: its ``key``, the JSON ``types`` it may hold and what it is (``doc``).

    ``optional``: the writer writes it only sometimes (``doc`` says when); absent, it reads as ``absent`` (None
    unless said). ``nullable``: the writer may write null (a metric that is not finite, a figure there was none of).
    ``view``: a JSON object read through that view, or each item of a list.
    """

    def __init__(self, key: str, types: tuple[type, ...], doc: str, *, optional: bool = False,
                 nullable: bool = False, absent: Any = None, view: type[View] | None = None) -> None:  # fmt: skip
        self.key, self.types, self.__doc__ = key, types, doc
        self.optional, self.nullable, self.absent, self.view = optional, nullable, absent, view
        self.name = key

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, view: None, owner: type) -> Field[T]: ...

    @overload
    def __get__(self, view: View, owner: type) -> T: ...

    def __get__(self, view: View | None, owner: type) -> Field[T] | T:
        if view is None:  # on the class: the field itself (``View.fields``)
            return self
        return view.read(self)

    def __set__(self, view: View, value: object) -> None:
        raise AttributeError(f"{type(view).__name__}.{self.name} is read-only: a view never writes its report")


def holds(value: object, types: tuple[type, ...]) -> bool:
    """True when ``value`` is one of the JSON ``types`` (a bool is not a number)."""
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


class View:
    """A read-only view of one JSON object of a report (module doc): ``data`` (the dict itself), and where it sits
    (``source``: the file, ``path``: the keys down to it, ``scenarios[0].summary``) for the errors that name a field.
    """  # noqa: D205

    __slots__ = ("_data", "path", "source")

    def __init__(self, data: Mapping[str, Any], path: str = "", source: str = "report.json") -> None:
        if not isinstance(data, Mapping):
            where = f"{source} {path}".strip()
            raise ArtifactError(where, f"must be a JSON object, got {type(data).__name__}")
        self._data, self.path, self.source = data, path, source

    @property
    def data(self) -> Mapping[str, Any]:
        """The JSON object this view reads (not a copy)."""
        return self._data

    def where(self, key: str) -> str:
        """The field ``key`` as an error names it: ``report.json scenarios[0].summary.worst_rel``."""
        return f"{self.source} {self.path + '.' if self.path else ''}{key}"

    def read(self, field: Field[T]) -> T:
        """``field`` of this object: checked, and read through its view (class doc of ``Field``)."""
        if field.key not in self._data:
            if field.optional:
                return field.absent
            raise ArtifactError(self.where(field.key), "is missing (ropeexport writes it: a damaged report, or one "
                                "another version wrote)")  # fmt: skip
        value = self._data[field.key]
        if value is None and field.nullable:
            return cast(T, None)
        if not holds(value, field.types):
            allowed = " or ".join(t.__name__ for t in field.types) + (" or null" if field.nullable else "")
            raise ArtifactError(self.where(field.key), f"is {json.dumps(value)[:80]}, not {allowed}")
        if field.view is None:
            return cast(T, value)
        path = f"{self.path}.{field.key}" if self.path else field.key
        if isinstance(value, list):
            return [field.view(item, f"{path}[{i}]", self.source) for i, item in enumerate(value)]  # type: ignore[return-value]
        return field.view(value, path, self.source)  # type: ignore[return-value]

    def lacks(self, *names: str) -> list[str]:
        """Which of the fields ``names`` (attribute names; every field when none given) this object does not hold."""
        fields = type(self).fields()
        unknown = [n for n in names if n not in fields]
        if unknown:
            raise AttributeError(f"{type(self).__name__} has no field {unknown[0]!r}; its fields: {', '.join(fields)}")
        return [n for n in names or fields if fields[n].key not in self._data]

    @classmethod
    def fields(cls) -> dict[str, Field[Any]]:
        """{attribute name: Field} of every field this view declares (its bases' too)."""
        out: dict[str, Field[Any]] = {}
        for base in reversed(cls.__mro__):
            out |= {name: f for name, f in vars(base).items() if isinstance(f, Field)}
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source} {self.path or '(top)'})"


def read_report(path: str | Path, view: type[V]) -> V:
    """``view`` of the report.json at ``path`` (the file, or the artifact folder holding it)."""
    file = Path(path)
    file = file / "report.json" if file.is_dir() else file
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(str(file), f"does not read as JSON ({type(exc).__name__}: {exc})") from None
    return view(data, "", str(file.name))


class LayerUse(View):
    """``layers``: which layers of the model the config describes use this artifact's encoding (``pipeline.
    with_layers``), when the config names its layers.
    """  # noqa: D205

    model_type = Field[str]("model_type", TEXT, "The config's model_type.")
    layer_types = Field[list[str]]("layer_types", LIST, "The config's layer types that use this encoding.")
    layers = Field[str]("layers", TEXT, "Those layers' indices as runs: '0-2, 4'.")
    no_rope_layers = Field[str | None]("no_rope_layers", TEXT, "The layers with no positional encoding, as runs; "
                                       "absent when every layer has one.", optional=True)  # fmt: skip
