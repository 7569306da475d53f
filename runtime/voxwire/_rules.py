"""The value rules of the spec, one small function each, called by the generated checks.

Each returns ``None`` when the value obeys the rule, or one sentence saying how it breaks it. The
generated code decides the path and the error code; these functions only judge values.
``json_equal`` is the one JSON equality that the vector builder (codegen) and the conformance
runner share.
"""

from __future__ import annotations

import math
import os
import re
import reprlib
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Final, TypeVar

import msgspec

T = TypeVar("T")

JSON_SAFE_INTEGER: Final = 2**53 - 1
"""The bound of an integer the spec gives no range: the largest integer every JSON peer
(JavaScript included) reads exactly."""

__all__ = [
    "JSON_SAFE_INTEGER",
    "at_least_one_of",
    "at_most_one_of",
    "exactly_one_of",
    "flat_object",
    "free_form_problem",
    "json_equal",
    "json_value_problem",
    "max_bytes",
    "min_bytes",
    "min_fields",
    "native",
    "not_blank",
    "python_flat_object",
    "requires",
    "unique",
    "utf8_size",
    "written_difference",
]


_REPR: Final = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60


def _shown(value: object) -> str:
    """A value as a sentence shows it: bounded in depth and length (a constructor may hand a
    check any value, nested as deep as it likes)."""
    return _REPR.repr(value)


def utf8_size(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes, the unit the protocols count text limits in."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def max_bytes(text: str, limit: int) -> str | None:
    # A character is at most 4 UTF-8 bytes: short text needs no counting.
    if len(text) * 4 <= limit:
        return None
    size = utf8_size(text)
    return None if size <= limit else f"{size} UTF-8 bytes, at most {limit}"


def min_bytes(text: str, limit: int) -> str | None:
    size = utf8_size(text)
    return None if size >= limit else f"{size} UTF-8 bytes, at least {limit}"


def not_blank(text: str) -> str | None:
    return "is blank" if not text or text.isspace() else None


def unique(keys: Sequence[object]) -> str | None:
    seen: set[object] = set()
    for index, key in enumerate(keys):
        if key in seen:
            return f"item {index} repeats {_shown(key)}"
        seen.add(key)
    return None


def at_most_one_of(present: Sequence[str]) -> str | None:
    return None if len(present) <= 1 else f"{' and '.join(present)} are both present"


def exactly_one_of(present: Sequence[str], names: Sequence[str]) -> str | None:
    if len(present) == 1:
        return None
    if not present:
        return f"one of {', '.join(names)} is required"
    return f"{' and '.join(present)} are both present"


def at_least_one_of(present: Sequence[str], names: Sequence[str]) -> str | None:
    return None if present else f"one of {', '.join(names)} is required"


def min_fields(present: Sequence[str], count: int) -> str | None:
    return None if len(present) >= count else f"at least {count} field(s) required, got none"


def requires(
    is_set: bool, other_value: object, expected: object, names: tuple[str, str]
) -> str | None:
    if not is_set or other_value == expected:
        return None
    return f"{names[0]} requires {names[1]} == {expected!r}, got {_shown(other_value)}"


def _struct_fields(struct: msgspec.Struct) -> Iterator[tuple[str, str]]:
    """A Struct's fields, each as (attribute name, wire name)."""
    return zip(struct.__struct_fields__, struct.__struct_encode_fields__, strict=True)


def json_value_problem(
    value: object, path: str, max_depth: int, depth: int = 1
) -> tuple[str, str] | None:
    """Find the first part of a JSON value (or a message's) that JSON cannot carry.

    Returns (path, detail) or ``None``. NaN and the infinities have no JSON form (an encoder
    would write ``null``); keys must be strings; ``value`` itself is nested ``depth`` deep (a
    message is 1) and nothing in it may be nested more than ``max_depth`` arrays and objects
    deep (a value that contains itself is found so too); anything else must be a JSON type.
    The walk keeps its own stack: no depth of input makes it recurse.
    """
    stack: list[tuple[object, str, int]] = [(value, path, depth)]
    while stack:
        item, where, depth = stack.pop()
        if item is None or isinstance(item, str | bool | int | datetime):
            continue  # a datetime is a typed field's value: its own decoder checks it
        if isinstance(item, float):
            if not math.isfinite(item):
                return where, f"{item!r} is not a JSON number"
            continue
        if depth > max_depth:
            return where, f"nested deeper than {max_depth} arrays and objects"
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return where, f"key {_shown(key)} is not a string"
                stack.append((child, f"{where}.{key}", depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, msgspec.Struct):
            for name, wire in _struct_fields(item):
                child = getattr(item, name)
                if child is not msgspec.UNSET:
                    stack.append((child, f"{where}.{wire}", depth + 1))
        elif isinstance(item, msgspec.Raw):
            return where, "a msgspec.Raw is not checked JSON: pass the value it holds"
        else:
            return where, f"a value of type {type(item).__name__} is not JSON"
    return None


_SCALARS: Final = frozenset({str, int, bool, type(None)})
_ENCODE: Final = msgspec.json.Encoder().encode


def python_flat_object(value: object) -> bool:
    """Whether ``value`` is a dict of str keys whose values are all str, int, bool or None
    (exact types): a free-form object one level deep, with nothing in it to check."""
    if type(value) is not dict:
        return False
    for key, child in value.items():
        if type(key) is not str or type(child) not in _SCALARS:
            return False
    return True


def native(name: str, python: T) -> T:
    """``voxwire._speedups``'s ``name``, the same as ``python`` in C, unless the extension was
    not built (no C compiler at install; or codegen reading this file by path) or
    ``VOXWIRE_NO_SPEEDUPS`` is set: then ``python``."""
    if os.environ.get("VOXWIRE_NO_SPEEDUPS"):
        return python
    try:
        from voxwire import _speedups
    except ImportError:
        return python
    built: T = getattr(_speedups, name)
    return built


flat_object: Final = native("flat_object", python_flat_object)
"""``python_flat_object``, in C where ``voxwire._speedups`` was built."""


def free_form_problem(
    value: object, path: str, where: str, depth: int, max_depth: int
) -> tuple[str, str] | None:
    """``json_value_problem`` of a free-form value at ``path + where``, nested ``depth`` deep
    in its message, for a message's check, fast for what free-form values mostly are.

    A flat object needs one look at each value; anything else is written once as JSON: each
    level of nesting opens with ``[`` or ``{``, so a text with few of them is proof enough.
    The walk that names the place runs only when these find something.
    """
    if depth < max_depth and flat_object(value):
        return None
    try:
        text = _ENCODE(value)
    except Exception:  # not JSON at all: named below
        return json_value_problem(value, path + where, max_depth, depth)
    if depth - 1 + text.count(b"[") + text.count(b"{") <= max_depth:
        return None
    return json_value_problem(value, path + where, max_depth, depth)


def written_difference(value: object, copy: object, path: str) -> tuple[str, str] | None:
    """The first place where ``copy`` (``value`` written as JSON and read back) says another
    thing than ``value``, as (path, detail); ``None`` when every difference is JSON's own
    spelling: a tuple read back as a list, or a datetime, a Struct or an enum inside a
    free-form value read back as its JSON form (a datetime whose UTC offset is whole minutes:
    another is written as another instant). Call it once ``value`` is JSON
    (``json_value_problem``): the walk is bounded by that depth.
    """
    stack: list[tuple[object, object, str]] = [(value, copy, path)]
    while stack:
        mine, theirs, where = stack.pop()
        inside = _read_back_inside(mine, theirs, where)
        if isinstance(inside, list):
            stack.extend(inside)
            continue
        detail = inside if inside is not None else _read_back_as(mine, theirs)
        if detail is not None:
            return where, detail
    return None


def _read_back_inside(
    mine: object, theirs: object, where: str
) -> list[tuple[object, object, str]] | str | None:
    """What a container and its copy hold, as the pairs that must read back alike (a Struct
    read back as itself or, inside a free-form value, as its object; a dict; an array); why
    they cannot (keys or items that differ); or ``None`` when ``mine`` is no such container."""
    if isinstance(mine, msgspec.Struct):
        if type(theirs) is type(mine):
            return [
                (getattr(mine, name), getattr(theirs, name), f"{where}.{wire}")
                for name, wire in _struct_fields(mine)
            ]
        if isinstance(theirs, dict):
            # A Struct in a free-form value, written as its object: what it holds must read
            # back (a field left out as its default is not written).
            return [
                (getattr(mine, name), theirs[wire], f"{where}.{wire}")
                for name, wire in _struct_fields(mine)
                if wire in theirs
            ]
        return None
    if isinstance(mine, dict) and isinstance(theirs, dict):
        if mine.keys() != theirs.keys():
            return "its keys do not read back the same"
        return [(child, theirs[key], f"{where}.{key}") for key, child in mine.items()]
    if isinstance(mine, list | tuple) and isinstance(theirs, list):
        if len(mine) != len(theirs):
            return "its items do not read back the same"
        return [
            (child, other, f"{where}[{i}]")
            for i, (child, other) in enumerate(zip(mine, theirs, strict=True))
        ]
    return None


def _read_back_as(mine: object, theirs: object) -> str | None:
    """How a value that is no container (or one read back as another kind) reads back as
    another thing, or ``None``: a datetime as another instant, a value of another type (an
    enum inside a free-form value reads back as its JSON form, an integer as a float), a
    number that is not exactly a JSON number."""
    if isinstance(mine, datetime) and isinstance(theirs, datetime | str):
        # A datetime field, or a datetime in a text or free-form field (written as text).
        if isinstance(theirs, datetime):
            same = mine == theirs and mine.utcoffset() == theirs.utcoffset()
        else:
            same = _whole_minutes(mine.utcoffset())
        if same:
            return None
        written = theirs.isoformat() if isinstance(theirs, datetime) else theirs
        return (
            f"{mine.isoformat()} would be written as {written}, another instant: "
            "RFC 3339 writes a UTC offset in whole minutes"
        )
    if isinstance(mine, Enum) and isinstance(theirs, str | int):
        return None  # a free-form value: written in its JSON form, as documented
    if type(mine) is not type(theirs) and not (
        isinstance(mine, int) and not isinstance(mine, bool) and type(theirs) is float
    ):
        return f"{mine!r} reads back as {theirs!r}"
    if mine != theirs:
        return f"{mine!r} reads back as {theirs!r}: it is not exactly a JSON number"
    return None


def _whole_minutes(offset: timedelta | None) -> bool:
    return offset is None or not offset % timedelta(minutes=1)


def json_equal(a: Any, b: Any, *, instants: bool = True) -> bool:
    """JSON equality: numbers by value (1 == 1.0), a boolean never equal to a number, and,
    with ``instants``, two RFC 3339 date-times with a zone by the instant they name
    (...56Z == ...56.000Z); without, every string as written."""
    if isinstance(a, str) and isinstance(b, str) and a != b:
        return instants and _same_instant(a, b)
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(json_equal(x, y, instants=instants) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(json_equal(a[k], b[k], instants=instants) for k in a)
        )
    return type(a) is type(b) and bool(a == b)


_DATE_TIME: Final = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:?\d\d)$")


def _same_instant(a: str, b: str) -> bool:
    if not (_DATE_TIME.match(a) and _DATE_TIME.match(b)):
        return False
    try:
        return datetime.fromisoformat(_micro(a)) == datetime.fromisoformat(_micro(b))
    except ValueError:
        return False


def _micro(text: str) -> str:
    """The date-time with at most 6 fraction digits (what datetime reads), upper-case Z."""
    text = text.upper().replace(" ", "T")
    return re.sub(r"\.(\d{6})\d+", r".\1", text)
