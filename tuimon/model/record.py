"""`record`: a frozen dataclass whose __eq__, __hash__ and __repr__ are shared, not generated.

Before Python 3.13 a dataclass compiles each method it generates on its own as the class is made:
six for a frozen one, ~1 ms a class: ~60 ms of CPU at each start of the monitor for its 56 (dev
machine). Three of the six are the same for every record, so they are written once here (58 -> 43 ms
for the 43 records; a few % of `attach`'s first frame); they behave as the generated ones: equal
when of the same class and equal in every field with compare=True, in order; hashed as those
fields' tuple (or the fields with hash=True); shown as `Name(field=value, ...)` over the fields
with repr=True. They are given through dataclass's public switches (eq=False, repr=False: it keeps
the class's own). __init__ and the frozen __setattr__/__delattr__ are dataclass's own. (Their
setattr/delattr were once closures swapped into a private helper of dataclasses while a
record was made, ~0.2 ms a class less: no private internals are patched, issue 42;
benchmarks/record_cost.py.)
"""

from __future__ import annotations

import reprlib
from dataclasses import Field, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_):  # (read by type checkers only)
        return lambda f: f

T = TypeVar("T")


def _compared(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, name) for name in type(self).__record_compared__)


def _eq(self: Any, other: object) -> bool:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _compared(self) == _compared(other)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, name) for name in type(self).__record_hashed__))


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in type(self).__record_shown__)
    return f"{type(self).__qualname__}({shown})"


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field, Field))
def record(cls: Any = None, /, *, kw_only: bool = True) -> Any:
    """@record (keyword-only fields, as the monitor's data mostly is) or @record(kw_only=False)."""

    def make(c: type[T]) -> type[T]:
        c.__eq__, c.__hash__, c.__repr__ = _eq, _hash, _repr  # type: ignore[method-assign]
        c = dataclass(frozen=True, kw_only=kw_only, eq=False, repr=False)(c)
        fs = fields(c)  # type: ignore[arg-type]
        c.__record_compared__ = tuple(f.name for f in fs if f.compare)  # type: ignore[attr-defined]
        c.__record_hashed__ = tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash))  # type: ignore[attr-defined]
        c.__record_shown__ = tuple(f.name for f in fs if f.repr)  # type: ignore[attr-defined]
        return c

    return make if cls is None else make(cls)

