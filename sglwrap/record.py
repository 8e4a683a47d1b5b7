"""Value classes: ``class Plan(Record): tp: int; note: str = ""`` — what ``@dataclass(frozen=True)`` gives (an
``__init__`` taking the fields in order, ``__eq__``, ``__hash__``, ``__repr__``, assignment refused), with
:func:`field`, :func:`replace` and :func:`asdict` in the same roles; ``class Ctx(Record, frozen=False)`` for a
mutable one. Type checkers read the fields through ``dataclass_transform``.

Why not ``dataclasses``: on Python 3.11 a ``@dataclass(frozen=True)`` compiles six generated methods from source when
its module is imported, 0.3 ms for a class of three fields and 2 ms for one of fifty. The ~60 classes a preflight
imports made that 40 ms of a 140 ms run, paid again by every ``sglwrap`` command. Here the methods are written once and
read each class's field table, so defining a class costs a few microseconds; building an instance costs about a
microsecond more than the generated ``__init__`` (measured in ``benchmarks/bench_record.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, dataclass_transform, overload

_T = TypeVar("_T")
_R = TypeVar("_R", bound="Record")
_MISSING: Any = object()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Field:
    __slots__ = ("default", "default_factory", "compare", "repr")

    def __init__(self, default: Any, default_factory: Any, compare: bool, repr: bool) -> None:  # noqa: A002
        self.default, self.default_factory, self.compare, self.repr = default, default_factory, compare, repr


@overload
def field(*, default: _T, compare: bool = True, repr: bool = True) -> _T: ...
@overload
def field(*, default_factory: Callable[[], _T], compare: bool = True, repr: bool = True) -> _T: ...
@overload
def field(*, compare: bool = True, repr: bool = True) -> Any: ...
def field(*, default: Any = _MISSING, default_factory: Any = _MISSING, compare: bool = True,
          repr: bool = True) -> Any:  # noqa: A002
    """A field's default (or a factory called for each instance), and whether ``==``/``hash`` and ``repr`` use it."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, compare, repr)


class _Spec:
    """One record class's fields: their order, defaults and which ones compare and show."""

    __slots__ = ("names", "nameset", "defaults", "factories", "compared", "shown")

    def __init__(self, names: tuple[str, ...], defaults: dict[str, Any], factories: dict[str, Callable[[], Any]],
                 compared: tuple[str, ...], shown: tuple[str, ...]) -> None:
        self.names, self.nameset = names, frozenset(names)
        self.defaults, self.factories, self.compared, self.shown = defaults, factories, compared, shown


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or getattr(annotation, "__origin__", None) is ClassVar


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Record:
    """Base of sglwrap's value classes: fields are the class's annotated attributes, in order (see the module)."""

    __record__: ClassVar[_Spec] = _Spec((), {}, {}, (), ())

    def __init_subclass__(cls, *, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        base = cls.__mro__[1].__dict__.get("__record__", Record.__record__)
        names, defaults, factories = list(base.names), dict(base.defaults), dict(base.factories)
        compared, shown = list(base.compared), list(base.shown)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if _is_classvar(annotation):
                continue
            value = cls.__dict__.get(name, _MISSING)
            compare = show = True
            if isinstance(value, _Field):
                compare, show = value.compare, value.repr
                if value.default_factory is not _MISSING:
                    factories[name] = value.default_factory
                    delattr(cls, name)
                    value = _MISSING
                else:
                    value = value.default
                    if value is _MISSING:
                        delattr(cls, name)
                    else:
                        setattr(cls, name, value)
            if value is not _MISSING:
                defaults[name] = value
            elif name not in factories and (defaults or factories):  # every key there is an earlier field
                raise TypeError(f"non-default argument {name!r} follows default argument")
            if name not in names:
                names.append(name)
            for seq, keep in ((compared, compare), (shown, show)):
                if keep and name not in seq:
                    seq.append(name)
                elif not keep and name in seq:
                    seq.remove(name)
        cls.__record__ = _Spec(tuple(names), defaults, factories, tuple(compared), tuple(shown))
        setattr(cls, "__match_args__", tuple(names))  # noqa: B010  (positional patterns, as a dataclass has)
        if cls.__dict__.get("__hash__") is None:  # none written in the class body (an ``__eq__`` there sets None)
            cls.__hash__ = Record.__hash__ if frozen else None  # type: ignore[assignment]
        if not frozen:
            cls.__setattr__ = object.__setattr__  # type: ignore[assignment]
            cls.__delattr__ = object.__delattr__  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        spec = self.__record__
        names = spec.names
        if len(args) > len(names):
            raise TypeError(f"{type(self).__qualname__}() takes {len(names)} positional arguments "
                            f"but {len(args)} were given")
        values = dict(zip(names, args))
        if kwargs:
            if not spec.nameset.issuperset(kwargs):
                bad = next(k for k in kwargs if k not in spec.nameset)
                raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {bad!r}")
            if args and not values.keys().isdisjoint(kwargs):
                bad = next(k for k in kwargs if k in values)
                raise TypeError(f"{type(self).__qualname__}() got multiple values for argument {bad!r}")
            values.update(kwargs)
        if len(values) < len(names):
            missing = []
            for name in names:
                if name in values:
                    continue
                if name in spec.defaults:
                    values[name] = spec.defaults[name]
                elif name in spec.factories:
                    values[name] = spec.factories[name]()
                else:
                    missing.append(name)
            if missing:
                raise TypeError(f"{type(self).__qualname__}() missing {len(missing)} required argument(s): "
                                + ", ".join(repr(m) for m in missing))
        object.__setattr__(self, "__dict__", values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine, theirs = self.__dict__, other.__dict__
        compared = self.__record__.compared
        return [mine[n] for n in compared] == [theirs[n] for n in compared]

    def __hash__(self) -> int:
        mine = self.__dict__
        return hash(tuple([mine[n] for n in self.__record__.compared]))

    def __repr__(self) -> str:
        mine = self.__dict__
        inner = ", ".join(f"{n}={mine[n]!r}" for n in self.__record__.shown)
        return f"{type(self).__qualname__}({inner})"


def replace(obj: _R, /, **changes: Any) -> _R:
    """A copy of ``obj`` with ``changes`` applied (``dataclasses.replace``): unknown names raise TypeError."""
    mine = obj.__dict__
    return type(obj)(**{**{n: mine[n] for n in obj.__record__.names}, **changes})


def fields(obj: Record | type[Record]) -> tuple[str, ...]:
    """The field names of a record (or record class), in order."""
    return obj.__record__.names


def asdict(obj: Record) -> dict[str, Any]:
    """``obj`` as a dict, recursively through records, lists, tuples and dicts (``dataclasses.asdict``)."""
    mine = obj.__dict__
    return {n: _plain(mine[n]) for n in obj.__record__.names}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return asdict(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_plain(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_plain(k), _plain(v)) for k, v in value.items())
    return value
