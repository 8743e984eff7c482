"""model.record against the dataclass it stands in for: the same equality, hash, repr, frozenness,
keyword-only fields and replace()."""

import dataclasses
from dataclasses import FrozenInstanceError, dataclass, field, replace

import pytest

from tuimon.model.record import record


@record
class Rec:
    a: int
    b: str = "x"
    c: list = field(default_factory=list, compare=False, repr=False)
    d: float = field(default=0.0, hash=False)


@dataclass(frozen=True, kw_only=True)
class Ref:  # what @record replaces
    a: int
    b: str = "x"
    c: list = field(default_factory=list, compare=False, repr=False)
    d: float = field(default=0.0, hash=False)


@record(kw_only=False)
class Pos:
    x: int
    y: "Pos | None" = None


@dataclass(frozen=True)
class PosRef:
    x: int
    y: "PosRef | None" = None


def pairs():
    for kw in ({"a": 1}, {"a": 1, "b": "y"}, {"a": 1, "c": [1]}, {"a": 1, "d": 2.5}, {"a": 2}):
        yield Rec(**kw), Ref(**kw)


def test_equal_hash_and_repr_as_the_dataclass_would_make_them():
    made = list(pairs())
    for rec, ref in made:
        assert repr(rec) == repr(ref).replace("Ref(", "Rec(")
        for other_rec, other_ref in made:
            assert (rec == other_rec) is (ref == other_ref)
            assert (rec != other_rec) is (ref != other_ref)
            if ref == other_ref:
                assert hash(rec) == hash(other_rec)
        assert hash(rec) == hash(ref)  # (the same fields hashed as the same tuple)
    assert Rec(a=1, c=[1]) == Rec(a=1, c=[2])  # compare=False
    assert Rec(a=1, d=1.0) != Rec(a=1, d=2.0)  # hash=False still compares
    assert Rec(a=1) != Ref(a=1) and Rec(a=1).__eq__(Ref(a=1)) is NotImplemented  # another class
    assert Pos(1, Pos(2)) == Pos(1, Pos(2)) and repr(Pos(1, Pos(2))) == "Pos(x=1, y=Pos(x=2, y=None))"
    assert repr(PosRef(1, PosRef(2))) == "PosRef(x=1, y=PosRef(x=2, y=None))"


def test_frozen_keyword_only_and_a_dataclass_for_its_tools():
    r = Rec(a=1)
    with pytest.raises(FrozenInstanceError):
        r.a = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del r.b  # type: ignore[misc]
    with pytest.raises(TypeError):
        Rec(1)  # type: ignore[misc]
    assert Pos(1).x == 1  # (kw_only=False: positional)
    assert replace(r, b="z") == Rec(a=1, b="z") and dataclasses.is_dataclass(r)
    assert dataclasses.asdict(Rec(a=3, c=[1])) == {"a": 3, "b": "x", "c": [1], "d": 0.0}
    assert {Rec(a=1), Rec(a=1, c=[5])} == {Rec(a=1)}  # hashable, one element


def test_frozen_checks_as_the_dataclass_makes_them():
    @record
    class Base:
        a: int

    @dataclass(frozen=True, kw_only=True)
    class BaseRef:
        a: int

    class Sub(Base):  # (not a dataclass: may set attributes of its own, as under dataclass's own check)
        pass

    class SubRef(BaseRef):
        pass

    for cls in (Sub, SubRef):
        s = cls(a=1)
        s.extra = 2  # type: ignore[attr-defined]
        del s.extra  # type: ignore[attr-defined]
        with pytest.raises(FrozenInstanceError, match="cannot assign to field 'a'"):
            s.a = 3  # type: ignore[misc]
        with pytest.raises(FrozenInstanceError, match="cannot delete field 'a'"):
            del s.a  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'other'"):
        Base(a=1).other = 1  # type: ignore[attr-defined]
