"""sglwrap.record.Record behaves as ``@dataclass(frozen=True)`` does for what sglwrap uses: each case builds the same
class both ways and compares what the two do."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from functools import cached_property
from typing import Any, ClassVar

import pytest

from sglwrap.record import FrozenInstanceError, Record, asdict, field, fields, replace


def _pair() -> tuple[Any, Any]:
    @dataclasses.dataclass(frozen=True)
    class Plan:
        tp: int
        name: str = "x"
        tags: tuple[str, ...] = ()
        env: dict[str, str] = dataclasses.field(default_factory=dict)
        note: str = dataclasses.field(default="", compare=False, repr=False)

    dc = Plan

    class Plan(Record):  # type: ignore[no-redef]
        tp: int
        name: str = "x"
        tags: tuple[str, ...] = ()
        env: dict[str, str] = field(default_factory=dict)
        note: str = field(default="", compare=False, repr=False)

    return dc, Plan


def test_init_repr_eq_hash_match_the_dataclass() -> None:
    dc, rc = _pair()
    for args, kwargs in [((2,), {}), ((2, "y"), {"tags": ("a",)}), ((), {"tp": 4, "env": {"A": "1"}, "note": "n"})]:
        d, r = dc(*args, **kwargs), rc(*args, **kwargs)
        assert repr(r) == repr(d)
        assert asdict(r) == dataclasses.asdict(d)
    assert rc(2, note="a") == rc(2, note="b")  # compare=False
    assert rc(2) != rc(3) and rc(2) != dc(2)  # another class never equals
    assert rc(2).env is not rc(2).env  # the factory runs per instance
    assert fields(rc) == ("tp", "name", "tags", "env", "note")

    @dataclasses.dataclass(frozen=True)
    class DKey:
        a: int
        b: tuple[str, ...] = ()

    class RKey(Record):
        a: int
        b: tuple[str, ...] = ()

    assert hash(RKey(1, ("x",))) == hash(DKey(1, ("x",))) and len({RKey(1), RKey(1), RKey(2)}) == 2


@pytest.mark.parametrize("call", [
    lambda c: c(),  # missing
    lambda c: c(1, "a", (), {}, "", 9),  # too many positional
    lambda c: c(1, nope=2),  # unknown keyword
    lambda c: c(1, tp=2),  # twice
])
def test_bad_calls_raise_type_error_as_the_dataclass_does(call: Any) -> None:
    dc, rc = _pair()
    with pytest.raises(TypeError):
        call(dc)
    with pytest.raises(TypeError):
        call(rc)


def test_frozen_and_mutable() -> None:
    _, rc = _pair()
    r = rc(1)
    with pytest.raises(FrozenInstanceError):
        r.tp = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del r.tp  # type: ignore[misc]

    class Ctx(Record, frozen=False):
        n: int = 0

    c = Ctx()
    c.n = 5
    assert c.n == 5 and c == Ctx(5)
    with pytest.raises(TypeError):
        hash(c)


def test_replace_copy_pickle_and_patterns() -> None:
    _, rc = _pair()
    r = rc(2, "y", ("a",), {"K": "v"})
    r2 = replace(r, tp=8)
    assert (r2.tp, r2.name, r2.env) == (8, "y", {"K": "v"}) and r.tp == 2
    with pytest.raises(TypeError):
        replace(r, nope=1)
    for twin in (copy.copy(r), copy.deepcopy(r)):
        assert twin == r and twin is not r
    match r:
        case rc(tp, name):
            assert (tp, name) == (2, "y")
        case _:
            pytest.fail("positional pattern did not match")


Picklable = type("Picklable", (Record,), {"__annotations__": {"a": "int", "b": "str"}, "b": "z",
                                          "__module__": __name__, "__qualname__": "Picklable"})


def test_pickle_round_trip() -> None:
    p = Picklable(1)
    assert pickle.loads(pickle.dumps(p)) == p and repr(p) == "Picklable(a=1, b='z')"


def test_class_level_rules() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        class Bad(Record):
            a: int = 0
            b: int

    class Counted(Record):
        instances: ClassVar[int] = 0
        n: int

        @cached_property
        def double(self) -> int:
            return self.n * 2

    assert fields(Counted) == ("n",) and Counted(4).double == 8

    class Base(Record):
        a: int

    class Child(Base):
        b: str = "x"

    assert repr(Child(1)) == "test_class_level_rules.<locals>.Child(a=1, b='x')"


def test_asdict_recurses_like_dataclasses() -> None:
    @dataclasses.dataclass(frozen=True)
    class DIn:
        v: int

    @dataclasses.dataclass(frozen=True)
    class DOut:
        inner: DIn
        many: tuple[DIn, ...]
        by: dict[str, DIn]

    class RIn(Record):
        v: int

    class ROut(Record):
        inner: RIn
        many: tuple[RIn, ...]
        by: dict[str, RIn]

    d = DOut(DIn(1), (DIn(2),), {"k": DIn(3)})
    r = ROut(RIn(1), (RIn(2),), {"k": RIn(3)})
    assert asdict(r) == dataclasses.asdict(d) == {"inner": {"v": 1}, "many": ({"v": 2},), "by": {"k": {"v": 3}}}
