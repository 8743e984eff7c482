"""Dataclasses of the model to JSON and back.

to_json(obj) -> plain JSON values; from_json(cls, data) -> an instance, checked against the
field types: recordings are files anyone can hand us, so a value of the wrong type becomes NA
(where the field allows it), None (where it is optional) or the field's default, and only a
record of the wrong shape (a nested record included) raises BadValue. Supported field types: int, float, str, bool, Any,
X | None, X | NA, list[X], dict[str, X] and nested dataclasses."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, TypeVar, Union

from .values import NA


class BadValue(ValueError):
    """The data cannot be read as the type asked for."""


_FIELDS: dict[type, list[tuple[str, Any]]] = {}

T = TypeVar("T")


def _fields(cls: type) -> list[tuple[str, Any]]:
    f = _FIELDS.get(cls)
    if f is None:
        hints = typing.get_type_hints(cls)
        f = _FIELDS[cls] = [(fd.name, hints[fd.name]) for fd in dataclasses.fields(cls)]
    return f


def to_json(obj: object) -> Any:
    if isinstance(obj, NA):
        return {"na": obj.reason}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_json(getattr(obj, name)) for name, _ in _fields(type(obj))}
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN or infinity
    return obj


def from_json(cls: type[T], data: object) -> T:
    if not isinstance(data, dict):
        raise BadValue(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    kwargs = {}
    for name, tp in _fields(cls):
        if name in data:
            kwargs[name] = _coerce(tp, data[name], f"{cls.__name__}.{name}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a required field is missing
        raise BadValue(f"{cls.__name__}: {e}") from None


_NONE = type(None)


def _coerce(tp: Any, v: object, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if NA in args and isinstance(v, dict) and set(v) == {"na"}:
            return NA(str(v["na"])[:500])
        if v is None and _NONE in args:
            return None
        if type(v) in args and type(v) in (int, float, str, bool):
            return v  # an int stays an int in `float | int` (a temperature, a clock)
        for a in args:
            if a not in (NA, _NONE):
                try:
                    return _coerce(a, v, where)
                except BadValue:
                    if dataclasses.is_dataclass(a) and isinstance(v, dict):
                        raise  # a nested record of the wrong shape: the whole record is bad

        if NA in args:
            return NA(f"not a valid value: {str(v)[:60]}")
        if _NONE in args:
            return None
        raise BadValue(f"{where}: {str(v)[:60]}")
    if tp is Any:
        return v
    if tp is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp in (str, bool):
        if isinstance(v, tp):
            return v
    elif origin is list:
        if isinstance(v, list):
            (item,) = typing.get_args(tp)
            return [_coerce(item, x, where) for x in v]
    elif origin is dict:
        if isinstance(v, dict):
            _, value = typing.get_args(tp)
            return {str(k): _coerce(value, x, where) for k, x in v.items()}
    elif dataclasses.is_dataclass(tp):
        return from_json(typing.cast("type[Any]", tp), v)  # a field's type: the class, not an instance
    raise BadValue(f"{where}: expected {getattr(tp, '__name__', tp)}, got {str(v)[:60]}")
