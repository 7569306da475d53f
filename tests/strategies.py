"""Hypothesis strategies derived from the spec IR, and a reference validator to judge them.

Nothing here is written per message: every strategy walks the resolved spec (``codegen.ir``), so
a message added to a spec is generated, mutated and judged without touching this file.

- :func:`message_object` draws a valid wire object (a dict, ``type`` included) of one message:
  every field rule (types, required/optional, nullable, defaults, const, enums, ranges, lengths in
  characters and UTF-8 bytes, patterns, not_blank, unique_by, nested types) and every cross-field
  rule hold. :func:`wire` turns it into the bytes (or text) that travel.
- :func:`mutation` damages a valid object in one targeted place (a dropped field, a wrong type, an
  out-of-range number, an over-long text, a broken rule, ...).
- :func:`expected_outcome` is an independent reading of the spec: what decoding a JSON value must
  give (a message, an ``UnknownMessage``, or an error), so mutated and random objects are judged
  exactly, not only "no crash".
- :func:`random_object`, :func:`json_values`, :func:`deep_json`: fuzz input, judged by
  :func:`expected_outcome` too.
- :func:`frame_bytes` draws valid binary frames; :func:`any_frame_bytes` bytes near them;
  :func:`frame_is_valid` judges any bytes.
- :func:`rule_breaking_values` and :func:`wrong_typed_values` give Python values for fields of
  messages built in code, to test ``encode``.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from codegen.ir import Field, Frame, Message, Protocol, Rule, TypeRef
from codegen.pipeline import load_protocols

PROTOCOLS: dict[str, Protocol] = {p.id: p for p in load_protocols()}
"""Both specs, resolved."""

MAX_ITEMS = 3
"""Generated arrays and maps hold at most min(max_length, MAX_ITEMS) items, so examples stay small."""

MAX_TEXT = 12
"""Generated free text holds at most this many characters beyond its minimum."""

BOUNDARY_BYTES = 4096
"""Texts with a UTF-8 byte limit up to this are sometimes drawn exactly at the limit."""

UNKNOWN_FIELD = "zz_not_a_field"

# Characters by the length of their UTF-8 encoding: text is drawn from all four, so byte limits
# are tested where characters and bytes differ. No lone surrogates (they are not UTF-8).
CHARS_BY_BYTES: dict[int, str] = {
    1: "aZ09_-~ ",
    2: "éßΩжعñ\u00a0",
    3: "€中ह☃ｱ\u2003\u3000\ufeff",
    4: "😀𝄞🎉𐍈🀄\U0010fffd",
}
WHITESPACE = " \t\n\r\u00a0\u2003\u3000"

CHARACTERS = st.one_of(
    st.characters(codec="utf-8"),  # every Unicode scalar value: no surrogates
    st.sampled_from("".join(CHARS_BY_BYTES.values())),
    st.sampled_from(WHITESPACE),
)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def text(min_size: int = 0, max_size: int = 8) -> st.SearchStrategy[str]:
    """Free text with 1-, 2-, 3- and 4-byte characters."""
    return st.text(CHARACTERS, min_size=min_size, max_size=max_size)


# --- JSON values ----------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # big integers too: JSON has no integer bound
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    text(max_size=8),
)


def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value (as Python), small."""
    return st.recursive(
        JSON_SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=MAX_ITEMS),
            st.dictionaries(text(max_size=5), inner, max_size=MAX_ITEMS),
        ),
        max_leaves=max_leaves,
    )


@st.composite
def deep_json(draw: st.DrawFn, max_depth: int = 100) -> Any:
    """A JSON value nested up to ``max_depth`` levels of arrays and objects."""
    value = draw(json_values(4))
    for _ in range(draw(st.integers(0, max_depth))):
        value = [value] if draw(st.booleans()) else {draw(text(max_size=3)): value}
    return value


def json_documents() -> st.SearchStrategy[Any]:
    return st.one_of(json_values(16), deep_json())


# --- the spec, walked -----------------------------------------------------------------------------


def all_types(protocol: Protocol) -> frozenset[str]:
    return _memo(("types", protocol.id), lambda: frozenset(m.type for m in protocol.messages))


def sender_types(protocol: Protocol, sender: str) -> frozenset[str]:
    return _memo(
        ("sender", protocol.id, sender),
        lambda: frozenset(m.type for m in protocol.sender(sender).messages),
    )


def envelope(protocol: Protocol, sender: str) -> tuple[Field, ...]:
    """The fields every message of ``sender`` carries, unknown types included."""
    return tuple(getattr(protocol.sender(sender), "envelope", ()))


def message(protocol: Protocol, message_type: str) -> Message:
    return _memo(
        ("msg", protocol.id, message_type),
        lambda: next(m for m in protocol.messages if m.type == message_type),
    )


_MEMO: dict[tuple[Any, ...], Any] = {}


def _memo(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """Build once per key: IR objects are not hashable (they hold dicts), so keys use ids."""
    if key not in _MEMO:
        _MEMO[key] = make()
    return _MEMO[key]


def pick(draw: st.DrawFn, items: Any) -> Any:
    """Draw one of ``items`` by index (``sampled_from`` would build the repr of IR objects)."""
    items = list(items)
    assert items
    return items[draw(st.integers(0, len(items) - 1))]


def _owner(
    protocol: Protocol, owner: tuple[str, str]
) -> tuple[tuple[Field, ...], tuple[Rule, ...]]:
    kind, name = owner
    if kind == "struct":
        s = protocol.struct(name)
        return s.fields, s.rules
    if kind == "envelope":
        return envelope(protocol, name), ()
    m = message(protocol, name)
    return m.fields, m.rules


def _bound(b: Any) -> Any:
    return None if b is None else b.value


def _anchored(pattern: str) -> re.Pattern[str]:
    """The spec's pattern, with ``$`` meaning the end of the text (Python's allows a newline)."""
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    return re.compile(pattern[:-1] + r"\Z")


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return _anchored(pattern)


def string_ok(field: Field, value: str) -> bool:
    """The string rules of a field (or of each string item of an array field)."""
    if field.pattern is not None and not _compiled(field.pattern).match(value):
        return False
    if field.not_blank and (not value or value.isspace()):
        return False
    if field.min_bytes is not None and utf8_size(value) < field.min_bytes.value:
        return False
    return not (field.max_bytes is not None and utf8_size(value) > field.max_bytes.value)


def _string_chars_ok(field: Field, value: str) -> bool:
    if field.min_length is not None and len(value) < field.min_length.value:
        return False
    return not (field.max_length is not None and len(value) > field.max_length.value)


VISIBLE_BY_BYTES: dict[int, str] = {
    k: "".join(c for c in v if not c.isspace()) for k, v in CHARS_BY_BYTES.items()
}


@st.composite
def _exact_bytes_text(draw: st.DrawFn, size: int, max_chars: int | None) -> str:
    """Non-blank text of exactly ``size`` UTF-8 bytes, multi-byte characters repeated."""
    alphabet = VISIBLE_BY_BYTES[2] + VISIBLE_BY_BYTES[3] + VISIBLE_BY_BYTES[4]
    unit = draw(st.text(st.sampled_from(alphabet), min_size=1, max_size=4))
    body = unit * (size // utf8_size(unit))
    body += "x" * (size - utf8_size(body))
    if max_chars is not None and len(body) > max_chars:
        body = "😀" * (size // 4) + "x" * (size % 4)
    return body


# --- datetimes (RFC 3339, with a zone) -------------------------------------------------------------

_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z"
)
"""RFC 3339's date-time (section 5.6; a space for the T as its note allows), the spec's reading:
a fraction of 1 to 9 digits, a zone required, Z or an offset with a colon."""

OFFSETS = [0, 60, 330, -480, 840, -720, 1439, -1439]
"""Zone offsets drawn, in minutes."""


def parse_datetime(text: str) -> _dt.datetime | None:
    """The instant an RFC 3339 date-time names (the calendar checked), or None."""
    match = _RFC3339.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, zulu, sign, off_h, off_m = match.groups()[6:]
    if zulu:
        zone = _dt.UTC
    else:
        if int(off_h) > 23 or int(off_m) > 59:
            return None
        offset = _dt.timedelta(hours=int(off_h), minutes=int(off_m))
        zone = _dt.timezone(-offset if sign == "-" else offset)
    try:
        moment = _dt.datetime(year, month, day, hour, minute, second, tzinfo=zone)
    except ValueError:  # 30 February, hour 24, second 60, year 0
        return None
    if fraction:
        micro = round(int(fraction.ljust(9, "0")) / 1000)
        try:
            moment += _dt.timedelta(microseconds=micro)
        except OverflowError:
            return None
    return moment


@st.composite
def _datetime_texts(draw: st.DrawFn) -> str:
    """A valid RFC 3339 date-time: any zone, with or without a fraction (exact to the
    microsecond, sometimes written with up to 9 digits), T and Z in either case."""
    moment = draw(st.datetimes(_dt.datetime(1, 1, 2), _dt.datetime(9999, 12, 30)))
    separator = draw(st.sampled_from("TTTt"))
    text = (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}{separator}"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )
    if moment.microsecond or draw(st.booleans()):
        digits = f"{moment.microsecond:06d}".rstrip("0") or "0"
        text += "." + digits + "0" * draw(st.integers(0, 9 - len(digits)))
    minutes = draw(st.sampled_from(OFFSETS))
    if minutes == 0 and draw(st.booleans()):
        return text + draw(st.sampled_from("ZZz"))
    sign = "-" if minutes < 0 else "+"
    return text + f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


BAD_DATETIMES = [
    "2026-05-14T12:34:56",  # no zone
    "2026-02-30T00:00:00Z",  # no such day
    "2023-02-29T00:00:00Z",
    "2026-05-14T24:00:00Z",
    "2026-05-14T12:34:60Z",
    "2026-05-14T12:34Z",
    "2026-05-14T12:34:56.Z",
    "2026-05-14T12:34:56+24:00",
    "2026-5-14T12:34:56Z",
    "20260514T123456Z",
    "0000-01-01T00:00:00Z",
    "2026-05-14T12:34:56 Z",
    "2026-05-14T12:34:56+05:30:00",
    "",
    "now",
]
"""Date-times the spec refuses (and voxwire does): see BUG 5 for the ones it accepts wrongly."""


def _string_values(field: Field) -> st.SearchStrategy[str]:
    min_chars = _bound(field.min_length) or 0
    max_chars = _bound(field.max_length)
    if field.pattern is not None:
        base = st.from_regex(field.pattern, fullmatch=True)
    else:
        if field.not_blank or (_bound(field.min_bytes) or 0) > 0:
            min_chars = max(min_chars, 1)
        top = min_chars + MAX_TEXT if max_chars is None else min(max_chars, min_chars + MAX_TEXT)
        max_bytes = _bound(field.max_bytes)

        def repair(value: str) -> str:
            # Cut characters off the end until the text fits its byte limit; make a blank text
            # non-blank by its first character.
            while max_bytes is not None and utf8_size(value) > max_bytes:
                value = value[:-1]
            if (field.not_blank and value.isspace()) or (min_chars and not value):
                value = "x" + value[1:]
            return value

        base = text(min_chars, top).map(repair)
        if max_bytes is not None and max_bytes <= BOUNDARY_BYTES:
            base = st.one_of(base, _exact_bytes_text(max_bytes, max_chars))
        if field.not_blank:
            # Sometimes blank-looking text that is not blank: spaces around one visible character.
            base = st.one_of(
                base,
                st.builds(
                    lambda a, c, b: a + c + b,
                    st.text(st.sampled_from(WHITESPACE), max_size=3),
                    st.sampled_from("x€😀\u200b"),
                    st.text(st.sampled_from(WHITESPACE), max_size=3),
                ),
            )
    return base.filter(lambda s: string_ok(field, s) and _string_chars_ok(field, s))


def _item_field(field: Field) -> Field:
    """The field an array's or map's items obey: its value rules, without the container's length."""
    from dataclasses import replace

    return _memo(
        ("item", id(field)),
        lambda: replace(
            field,
            type=field.type.element,
            min_length=None,
            max_length=None,
            unique_by=None,
            has_const=False,
            nullable=False,
        ),
    )


def _value(protocol_id: str, field: Field) -> st.SearchStrategy[Any]:
    """A present, non-null, valid value of ``field``."""
    return _memo(("value", protocol_id, id(field)), lambda: _make_value(protocol_id, field))


def _make_value(protocol_id: str, field: Field) -> st.SearchStrategy[Any]:
    protocol = PROTOCOLS[protocol_id]
    kind = field.type.kind
    if field.has_const:
        return st.just(field.const)
    if kind == "string":
        return _string_values(field)
    if kind == "datetime":
        return _datetime_texts()
    if kind == "integer":
        lo, hi = field.minimum.value, field.maximum.value
        return st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi))
    if kind == "number":
        lo, hi = _bound(field.minimum), _bound(field.maximum)
        ints = st.integers(
            -(2**53) if lo is None else math.ceil(lo), 2**53 if hi is None else math.floor(hi)
        )
        floats = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
        return st.one_of(floats, ints)
    if kind == "boolean":
        return st.booleans()
    if kind == "object":
        return st.dictionaries(text(max_size=5), json_values(6), max_size=MAX_ITEMS)
    if kind == "any":
        return json_values(8)
    if kind == "enum":
        assert field.type.enum is not None
        known = st.sampled_from([v.value for v in field.type.enum.values])
        return st.one_of(known, text(max_size=8)) if field.type.enum.open else known
    if kind == "struct":
        assert field.type.struct is not None
        return struct_object(protocol, field.type.struct)
    if kind in ("array", "map"):
        item = _value(protocol_id, _item_field(field))
        lo = _bound(field.min_length) or 0
        hi = min(_bound(field.max_length) or MAX_ITEMS, MAX_ITEMS)
        hi = max(hi, lo)
        if kind == "map":
            return st.dictionaries(text(max_size=6), item, min_size=lo, max_size=hi)
        if field.unique_by == "value":
            return st.lists(item, min_size=lo, max_size=hi, unique=True)
        if field.unique_by is not None:
            key = field.unique_by
            return st.lists(item, min_size=lo, max_size=hi, unique_by=lambda x: x.get(key))
        return st.lists(item, min_size=lo, max_size=hi)
    raise AssertionError(f"unknown kind {kind}")


def field_value(protocol: Protocol, field: Field) -> st.SearchStrategy[Any]:
    """A value of a present field: its const, its default, null when nullable, or any valid one."""
    return _memo(("field", protocol.id, id(field)), lambda: _make_field_value(protocol, field))


def _make_field_value(protocol: Protocol, field: Field) -> st.SearchStrategy[Any]:
    value = _value(protocol.id, field)
    options = [value]
    if field.nullable:
        options.append(st.none())
    if field.has_default:
        options.append(st.just(field.default))
    return st.one_of(*options)


# --- cross-field rules ----------------------------------------------------------------------------

_MISSING = object()


def is_set(value: Any) -> bool:
    """A ``requires`` rule's trigger: present, not null, not false."""
    return value is not _MISSING and value is not None and value is not False


def rule_holds(rule: Rule, obj: dict[str, Any], fields: tuple[Field, ...]) -> bool:
    present = [f.wire_name for f in rule.fields if f.wire_name in obj]
    if rule.kind == "at_most_one_of":
        return len(present) <= 1
    if rule.kind == "exactly_one_of":
        return len(present) == 1
    if rule.kind == "at_least_one_of":
        return len(present) >= 1
    if rule.kind == "min_fields":
        assert rule.count is not None
        return sum(f.wire_name in obj for f in fields) >= rule.count
    if rule.kind == "requires":
        assert rule.field is not None and rule.other is not None
        if not is_set(obj.get(rule.field.wire_name, _MISSING)):
            return True
        other = rule.other
        value = obj.get(other.wire_name, other.default if other.has_default else _MISSING)
        return value is not _MISSING and _same_json(value, rule.equals)
    raise AssertionError(f"unknown rule {rule.kind}")


def _repair(
    draw: st.DrawFn, protocol: Protocol, rule: Rule, obj: dict[str, Any], fields: tuple[Field, ...]
) -> None:
    """Make ``obj`` obey ``rule`` by a drawn, targeted change."""
    if rule_holds(rule, obj, fields):
        return
    names = [f.wire_name for f in rule.fields]
    if rule.kind in ("exactly_one_of", "at_most_one_of", "at_least_one_of"):
        present = [f for f in rule.fields if f.wire_name in obj]
        keep = pick(draw, present or list(rule.fields))
        if rule.kind != "at_least_one_of":
            for name in names:
                if name != keep.wire_name:
                    obj.pop(name, None)
        if keep.wire_name not in obj:
            obj[keep.wire_name] = draw(field_value(protocol, keep))
    elif rule.kind == "min_fields":
        absent = [f for f in fields if f.wire_name not in obj]
        for i in draw(st.permutations(range(len(absent)))):
            f = absent[i]
            if rule_holds(rule, obj, fields):
                break
            obj[f.wire_name] = draw(field_value(protocol, f))
    elif rule.kind == "requires":
        assert rule.field is not None and rule.other is not None
        trigger = rule.field
        choices = ["other"]
        if not trigger.required:
            choices.append("drop")
        if trigger.nullable:
            choices.append("null")
        how = draw(st.sampled_from(choices))
        if how == "other":
            obj[rule.other.wire_name] = rule.equals
        elif how == "drop":
            del obj[trigger.wire_name]
        else:
            obj[trigger.wire_name] = None


@st.composite
def _object(draw: st.DrawFn, protocol_id: str, owner: tuple[str, str]) -> dict[str, Any]:
    protocol = PROTOCOLS[protocol_id]
    fields, rules = _owner(protocol, owner)
    obj: dict[str, Any] = {}
    for f in fields:
        if not f.required and draw(st.booleans()):
            continue  # absent
        obj[f.wire_name] = draw(field_value(protocol, f))
    for rule in rules:
        _repair(draw, protocol, rule, obj, fields)
    assume(all(rule_holds(r, obj, fields) for r in rules))
    return obj


def struct_object(protocol: Protocol, name: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid object of the nested type ``name``."""
    return _memo(("struct", protocol.id, name), lambda: _object(protocol.id, ("struct", name)))


@st.composite
def _message_object(draw: st.DrawFn, protocol_id: str, message_type: str) -> dict[str, Any]:
    m = message(PROTOCOLS[protocol_id], message_type)
    obj = draw(_object(protocol_id, ("message", message_type)))
    # `type` anywhere: a reader must not assume it comes first.
    items = list(obj.items())
    items.insert(draw(st.integers(0, len(items))), ("type", m.type))
    return dict(items)


def message_object(protocol: Protocol, message_type: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid wire object of one message, ``type`` included."""
    return _memo(
        ("message", protocol.id, message_type), lambda: _message_object(protocol.id, message_type)
    )


def envelope_object(protocol: Protocol, sender: str) -> st.SearchStrategy[dict[str, Any]]:
    """A valid envelope of ``sender`` (empty for a sender without one)."""
    return _memo(
        ("envelope", protocol.id, sender), lambda: _object(protocol.id, ("envelope", sender))
    )


def any_message_object(protocol: Protocol) -> st.SearchStrategy[dict[str, Any]]:
    return _memo(
        ("any", protocol.id),
        lambda: st.one_of(*[message_object(protocol, m.type) for m in protocol.messages]),
    )


@st.composite
def wire(draw: st.DrawFn, obj: Any, as_text: bool | None = None) -> bytes | str:
    """``obj`` as it travels: JSON bytes (or a str), ASCII-escaped or not, compact or spaced."""
    text_ = json.dumps(
        obj,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
        allow_nan=True,
    )
    if as_text is None:
        as_text = draw(st.booleans())
    return text_ if as_text else text_.encode("utf-8")


# --- the reference validator ----------------------------------------------------------------------


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: a boolean is never a number; 1 and 1.0 are the same number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    return a is None and b is None


def is_json(value: Any) -> bool:
    """Can JSON carry it (and would a JSON parser give it back)?"""
    stack = [value]
    while stack:
        item = stack.pop()
        if item is None or isinstance(item, (bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in item):
                return False
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) and is_json(k) for k in item):
                return False
            stack.extend(item.values())
        else:
            return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and (
        not isinstance(value, float) or math.isfinite(value)
    )


def value_ok(protocol: Protocol, field: Field, value: Any) -> bool:
    """Does ``value`` (present) obey every rule of ``field``? An independent reading of the spec."""
    if value is None:
        return field.nullable or field.type.kind == "any"
    if field.has_const and not _same_json(value, field.const):
        return False
    return _typed_ok(protocol, field, field.type, value)


def _typed_ok(protocol: Protocol, field: Field, t: TypeRef, value: Any) -> bool:
    kind = t.kind
    if kind == "string":
        return (
            isinstance(value, str)
            and string_ok(field, value)
            and (t is not field.type or _string_chars_ok(field, value))
        )
    if kind == "datetime":
        return isinstance(value, str) and parse_datetime(value) is not None
    if kind in ("integer", "number"):
        if not (_is_int(value) if kind == "integer" else _is_number(value)):
            return False
        lo, hi = _bound(field.minimum), _bound(field.maximum)
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "object":
        return isinstance(value, dict) and is_json(value)
    if kind == "any":
        return is_json(value)
    if kind == "enum":
        assert t.enum is not None
        if t.enum.is_int:
            return _is_int(value) and value in {v.value for v in t.enum.values}
        if not isinstance(value, str):
            return False
        return t.enum.open or value in {v.value for v in t.enum.values}
    if kind == "struct":
        assert t.struct is not None
        s = protocol.struct(t.struct)
        return isinstance(value, dict) and object_ok(
            protocol, s.fields, s.rules, value, s.reject_unknown_fields
        )
    if kind in ("array", "map"):
        if kind == "array" and not isinstance(value, list):
            return False
        if kind == "map" and not (isinstance(value, dict) and is_json(list(value))):
            return False
        lo, hi = _bound(field.min_length), _bound(field.max_length)
        if (lo is not None and len(value) < lo) or (hi is not None and len(value) > hi):
            return False
        assert t.item is not None
        items = list(value.values()) if kind == "map" else value
        if not all(item is not None and _typed_ok(protocol, field, t.item, item) for item in items):
            return False
        if field.unique_by is not None:
            keys = [
                json.dumps(
                    x if field.unique_by == "value" else x.get(field.unique_by), sort_keys=True
                )
                for x in items
            ]
            return len(set(keys)) == len(keys)
        return True
    raise AssertionError(f"unknown kind {kind}")


def object_ok(
    protocol: Protocol,
    fields: tuple[Field, ...],
    rules: tuple[Rule, ...],
    obj: dict[str, Any],
    reject_unknown: bool,
    ignore: frozenset[str] = frozenset(),
) -> bool:
    by_name = {f.wire_name: f for f in fields}
    if not all(isinstance(k, str) and is_json(k) for k in obj):
        return False
    if reject_unknown and any(k not in by_name and k not in ignore for k in obj):
        return False
    if any(not is_json(v) for k, v in obj.items() if k not in by_name):
        return False
    for f in fields:
        if f.wire_name not in obj:
            if f.required:
                return False
        elif not value_ok(protocol, f, obj[f.wire_name]):
            return False
    return all(rule_holds(r, obj, fields) for r in rules)


@dataclass(frozen=True)
class Outcome:
    """What decoding must give: ``message`` (a Message), ``unknown``, or ``error`` (code or None)."""

    kind: str
    message: Message | None = None
    code: str | None = None


def expected_outcome(protocol: Protocol, obj: Any, sender: str, size: int | None = None) -> Outcome:
    """What decoding ``obj`` (a parsed JSON value; ``size`` its UTF-8 size) from ``sender`` gives."""
    codes = protocol.decode_errors
    if size is not None and size > protocol.max_message_bytes.value:
        return Outcome("error", code=codes["too_large"])
    if not is_json(obj):
        # NaN, infinities, lone surrogates: the text is not valid JSON. The code is left open: the
        # same text may also come from the wrong sender, and the spec orders no two failures.
        return Outcome("error")
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        return Outcome("error", code=codes["malformed"])
    t = obj["type"]
    if t in sender_types(protocol, sender):
        m = message(protocol, t)
        if object_ok(protocol, m.fields, m.rules, obj, False, frozenset({"type"})):
            return Outcome("message", message=m)
        return Outcome("error")
    if t in all_types(protocol):
        return Outcome("error", code=codes["wrong_sender"])
    if protocol.sender(sender).accepts_unknown:
        # A type added later: kept whole, if it carries the sender's envelope.
        if object_ok(protocol, envelope(protocol, sender), (), obj, False):
            return Outcome("unknown")
        return Outcome("error")
    return Outcome("error", code=codes["unknown_type"])


def normalized(
    protocol: Protocol,
    fields: tuple[Field, ...],
    obj: dict[str, Any],
    drop_defaults: bool = True,
) -> dict[str, Any]:
    """What encoding the decoded ``obj`` must write back: its known fields, defaults left out
    (with ``drop_defaults``), numbers as floats, date-times as the instants they name; nested
    objects likewise."""
    out: dict[str, Any] = {}
    for f in fields:
        if f.wire_name not in obj:
            continue
        value = obj[f.wire_name]
        if drop_defaults and f.has_default and _same_json(value, f.default):
            continue
        out[f.wire_name] = _normalized_value(protocol, f.type, value, drop_defaults)
    return out


def _normalized_value(protocol: Protocol, t: TypeRef, value: Any, drop_defaults: bool) -> Any:
    if value is None:
        return None
    if t.kind == "number":
        return float(value)
    if t.kind == "datetime":
        return parse_datetime(value) if isinstance(value, str) else value
    if t.kind == "struct":
        assert t.struct is not None
        s = protocol.struct(t.struct)
        return normalized(protocol, s.fields, value, drop_defaults)
    if t.kind == "array":
        assert t.item is not None
        return [_normalized_value(protocol, t.item, v, drop_defaults) for v in value]
    if t.kind == "map":
        assert t.item is not None
        return {k: _normalized_value(protocol, t.item, v, drop_defaults) for k, v in value.items()}
    return value


def strict_json_equal(a: Any, b: Any) -> bool:
    """Equality of parsed JSON where 1 and 1.0 differ, and so do 1 and true."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and a == 0:
        return math.copysign(1, a) == math.copysign(1, b)
    return bool(a == b)


# --- mutations ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    obj: dict[str, Any]
    what: str
    code: str | None = None
    """The error code the message's own sender must get if the object is refused (None: no
    single code follows from the spec)."""
    path: str | None = None
    """The JSON path the error must name (an item's path starts with it)."""


@dataclass
class _Site:
    """A JSON object in a valid message and the spec of its fields."""

    obj: dict[str, Any]
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...]
    path: str
    reject_unknown: bool = False


def _sites(
    protocol: Protocol,
    obj: dict[str, Any],
    fields: tuple[Field, ...],
    rules: tuple[Rule, ...],
    path: str,
    reject_unknown: bool = False,
) -> list[_Site]:
    out = [_Site(obj, fields, rules, path, reject_unknown)]
    for f in fields:
        value = obj.get(f.wire_name)
        if f.type.element.kind != "struct" or value is None:
            continue
        assert f.type.element.struct is not None
        s = protocol.struct(f.type.element.struct)
        if f.type.kind == "struct":
            children = [(value, f"{path}.{f.wire_name}")]
        elif f.type.kind == "array":
            children = [(v, f"{path}.{f.wire_name}[{i}]") for i, v in enumerate(value)]
        else:
            children = [(v, f"{path}.{f.wire_name}.{k}") for k, v in value.items()]
        for child, where in children:
            out += _sites(protocol, child, s.fields, s.rules, where, s.reject_unknown_fields)
    return out


def wrong_json_types(t: TypeRef) -> list[Any]:
    """JSON values of a type the field never accepts (null aside)."""
    by_kind: dict[str, list[Any]] = {
        "string": [1, True, [], {}, 1.5],
        "datetime": [1, True, [], {}, 1.5, 1778762096],
        "integer": ["1", 1.5, True, [], {}],
        "number": ["1", True, [], {}],
        "boolean": [0, 1, "true", [], {}],
        "object": [[], "x", 1, True],
        "any": [],
        "enum": [1, True, [], {}],
        "struct": [[], "x", 1, True],
        "array": [{}, "x", 1, True],
        "map": [[], "x", 1, True],
    }
    return by_kind[t.kind]


def _out_of_range(field: Field) -> list[Any]:
    lo, hi = _bound(field.minimum), _bound(field.maximum)
    out: list[Any] = []
    if field.type.element.kind == "integer":
        out += [hi + 1, lo - 1, 2**64, -(2**63) - 1, 10**30]
    else:
        if hi is not None:
            out += [hi + 1, math.nextafter(float(hi), math.inf), hi * 2 + 1e300]
        if lo is not None:
            out += [lo - 1, math.nextafter(float(lo), -math.inf), -1e300]
        out += [1e400, -1e400]  # written as 1e400: no double holds it
    return [
        v
        for v in out
        if (lo is not None and v < lo)
        or (hi is not None and v > hi)
        or (isinstance(v, float) and not math.isfinite(v))
    ]


def _bad_strings(field: Field) -> list[str]:
    """Strings that break one of the field's string rules."""
    out: list[str] = []
    lo, hi = _bound(field.min_length), _bound(field.max_length)
    lo_b, hi_b = _bound(field.min_bytes), _bound(field.max_bytes)
    if hi is not None:
        out.append("x" * (hi + 1))
        out.append("😀" * (hi + 1))
    if lo is not None and lo > 0:
        out.append("x" * (lo - 1))
    if hi_b is not None:
        out.append("é" * (hi_b // 2 + 1))  # over the limit in bytes, under it in characters
        out.append("😀" * (hi_b // 4 + 1))
        out.append("x" * (hi_b - 1) + "é")  # one byte over
    if lo_b is not None and lo_b > 0:
        out.append("")
    if field.not_blank:
        out += ["", " ", "\t\n \u3000"]
    if field.pattern is not None:
        out += ["", "\n", " "]
    return out


def mutation(protocol: Protocol, message_type: str) -> st.SearchStrategy[Mutation]:
    """A valid object of ``message_type`` damaged (or not) in one targeted place."""
    return _mutation(protocol.id, message_type)


@st.composite
def _mutation(draw: st.DrawFn, protocol_id: str, message_type: str) -> Mutation:
    protocol = PROTOCOLS[protocol_id]
    codes = protocol.decode_errors
    m = message(protocol, message_type)
    obj = copy.deepcopy(draw(message_object(protocol, message_type)))
    site = pick(draw, _sites(protocol, obj, m.fields, m.rules, "$"))
    target = site.obj
    # Every applicable change, by kind: a kind is drawn first, then one of its changes, so rare
    # kinds (a broken rule, a repeated unique item) are drawn as often as common ones. A change
    # returns the error code its own sender must get when the result is refused (None: no
    # single code follows from the spec).
    Change = Callable[[], "str | None"]
    ops: dict[str, list[tuple[str, Change]]] = {}

    def add(kind: str, name: str, change: Change) -> None:
        ops.setdefault(kind, []).append((name, change))

    def code_of(f: Field, cls: str) -> str:
        """A field's own code replaces invalid_value and too_many (spec-format: `code`)."""
        if f.code is not None and cls in ("invalid_value", "too_many"):
            return f.code
        return codes[cls]

    def setter(name: str, strategy: st.SearchStrategy[Any], code: str | None) -> Change:
        def change() -> str | None:
            target[name] = draw(strategy)
            return code

        return change

    def in_container(name: str, values: list[Any], code: str | None) -> Change:
        def change() -> str | None:
            container = target[name]
            key = (
                draw(st.integers(0, len(container) - 1))
                if isinstance(container, list)
                else pick(draw, sorted(container))
            )
            container[key] = pick(draw, values)
            return code

        return change

    for f in site.fields:
        name = f.wire_name
        present = name in target
        value = target.get(name)
        element = f.type.element
        filled = (
            present
            and isinstance(value, (list, dict))
            and f.type.kind in ("array", "map")
            and len(value) > 0
        )
        if present:

            def drop(f: Field = f) -> str | None:
                del target[f.wire_name]
                return codes["missing_field"] if f.required else None

            add("drop", name, drop)
            refuses_null = not f.nullable and f.type.kind != "any"
            add(
                "null", name, setter(name, st.none(), codes["wrong_type"] if refuses_null else None)
            )
            add("json_value", name, setter(name, json_values(6), None))
            if wrong_json_types(f.type):
                wrong = st.sampled_from(wrong_json_types(f.type))
                add("wrong_type", name, setter(name, wrong, codes["wrong_type"]))
        if element.kind in ("integer", "number") and _out_of_range(f):
            finite = [v for v in _out_of_range(f) if not isinstance(v, float) or math.isfinite(v)]
            infinite = [v for v in _out_of_range(f) if v not in finite]
            for values, code in ((finite, code_of(f, "invalid_value")), (infinite, None)):
                if not values:
                    continue
                if f.type.kind not in ("array", "map"):
                    add("out_of_range", name, setter(name, st.sampled_from(values), code))
                elif filled:
                    add("out_of_range", name, in_container(name, values, code))
        if f.type.kind == "datetime":
            bad_dt = st.sampled_from(BAD_DATETIMES)
            add("bad_datetime", name, setter(name, bad_dt, code_of(f, "invalid_value")))
        if element.kind == "string" and _bad_strings(f):
            code = code_of(f, "invalid_value")
            if f.type.kind not in ("array", "map"):
                add("bad_string", name, setter(name, st.sampled_from(_bad_strings(f)), code))
            elif filled:
                add("bad_string", name, in_container(name, _bad_strings(f), code))
        if present and f.pattern is not None and f.type.kind == "string" and value is not None:
            ends = st.sampled_from(["\n", "\r\n", " "]).map(lambda end, v=value: v + end)
            add("pattern", name, setter(name, ends, code_of(f, "invalid_value")))
        if element.kind == "enum" and not (element.enum and element.enum.is_int):
            bad_enum = st.sampled_from(["zz-not-a-value", "", "READ_ONLY", " cold"])
            code = (
                None if element.enum is None or element.enum.open else code_of(f, "invalid_value")
            )
            if f.type.kind == "array":

                def append_bad(
                    name: str = name, code: str | None = code, bad: Any = bad_enum
                ) -> str | None:
                    target.setdefault(name, []).append(draw(bad))
                    return code

                add("enum", name, append_bad)
            else:
                add("enum", name, setter(name, bad_enum, code))
        if f.has_const:
            c = f.const
            bad_const = (
                [c + "x", c.upper() + " ", ""]
                if isinstance(c, str)
                else [c + 1, c - 1, float(c) + 0.5]
            )

            def const(f: Field = f, bad_const: list[Any] = bad_const) -> str | None:
                bad = pick(draw, bad_const)
                target[f.wire_name] = bad
                same_type = type(bad) is type(f.const)
                return code_of(f, "invalid_value") if same_type else codes["wrong_type"]

            add("const", name, const)
        if filled and f.type.kind == "array":

            def duplicate(f: Field = f) -> str | None:
                items = target[f.wire_name]
                items.append(copy.deepcopy(items[0]))
                if f.max_length is not None and len(items) > f.max_length.value:
                    return code_of(f, "too_many")
                return code_of(f, "invalid_value") if f.unique_by is not None else None

            add("duplicate", name, duplicate)
        if filled and wrong_json_types(element):
            bad_items = [*wrong_json_types(element), None]
            add("bad_item", name, in_container(name, bad_items, codes["wrong_type"]))
        if (
            f.type.kind in ("array", "map")
            and f.max_length is not None
            and f.max_length.value <= 256
        ):

            def too_many(f: Field = f) -> str | None:
                item = draw(_value(protocol.id, _item_field(f)))
                count = f.max_length.value + draw(st.integers(1, 2))
                target[f.wire_name] = (
                    [copy.deepcopy(item) for _ in range(count)]
                    if f.type.kind == "array"
                    else {f"k{i}": copy.deepcopy(item) for i in range(count)}
                )
                return code_of(f, "too_many")

            add("too_many", name, too_many)

    unknown_code = codes["unknown_field"] if site.reject_unknown else None
    add("unknown_field", UNKNOWN_FIELD, setter(UNKNOWN_FIELD, json_values(4), unknown_code))

    for rule in site.rules:

        def break_rule(rule: Rule = rule) -> str | None:
            code = rule.code or codes["invalid_value"]
            if rule.kind in ("exactly_one_of", "at_least_one_of", "min_fields"):
                for g in rule.fields or site.fields:
                    if g.wire_name in target:
                        del target[g.wire_name]
                        if g.required:
                            code = codes["missing_field"]
            if rule.kind in ("exactly_one_of", "at_most_one_of") and draw(st.booleans()):
                for g in rule.fields:
                    if g.wire_name not in target:
                        target[g.wire_name] = draw(field_value(protocol, g))
            if rule.kind == "requires":
                assert rule.field is not None and rule.other is not None
                target[rule.field.wire_name] = draw(_value(protocol.id, rule.field).filter(is_set))
                target[rule.other.wire_name] = draw(
                    _value(protocol.id, rule.other).filter(lambda v: not _same_json(v, rule.equals))
                )
            return code

        add("rule", rule.kind, break_rule)

    if site.path == "$":

        def drop_type() -> str | None:
            del target["type"]
            return codes["malformed"]

        add("drop", "type", drop_type)
        retypes = st.one_of(
            st.sampled_from(sorted(all_types(protocol))),
            st.sampled_from(["zz.unknown", "", m.type.upper(), m.type + " "]),
            st.sampled_from([None, 1, [], {}]),
        )
        add("retype", "type", setter("type", retypes, None))

    kind = pick(draw, sorted(ops))
    name, change = pick(draw, ops[kind])
    code = change()
    if name == "type":
        path = None
    elif kind in ("rule", "unknown_field"):
        path = site.path
    else:
        path = f"{site.path}.{name}"
    return Mutation(obj, f"{kind} {site.path}.{name}", code, path)


# --- random objects -------------------------------------------------------------------------------


def _field_names(protocol: Protocol) -> tuple[str, ...]:
    return _memo(("names", protocol.id), lambda: _make_field_names(protocol))


def _make_field_names(protocol: Protocol) -> tuple[str, ...]:
    names = {f.wire_name for m in protocol.messages for f in m.fields}
    names |= {f.wire_name for s in protocol.structs for f in s.fields}
    return tuple(sorted(names))


def _all_fields(protocol: Protocol) -> tuple[Field, ...]:
    return _memo(("fields", protocol.id), lambda: _make_all_fields(protocol))


def _make_all_fields(protocol: Protocol) -> tuple[Field, ...]:
    seen: dict[tuple[str, str], Field] = {}
    for m in protocol.messages:
        for f in m.fields:
            seen.setdefault((f.wire_name, m.type), f)
    return tuple(seen.values())


def random_object(protocol: Protocol) -> st.SearchStrategy[dict[str, Any]]:
    """An object with a known ``type`` and random fields: random JSON values, or valid values of
    some field of the protocol under that field's name (often of another message)."""
    return _random_object(protocol.id)


@st.composite
def _random_object(draw: st.DrawFn, protocol_id: str) -> dict[str, Any]:
    protocol = PROTOCOLS[protocol_id]
    obj: dict[str, Any] = {"type": draw(st.sampled_from(sorted(all_types(protocol))))}
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            f = pick(draw, _all_fields(protocol))
            obj[f.wire_name] = draw(field_value(protocol, f))
        else:
            obj[draw(st.sampled_from(_field_names(protocol)))] = draw(json_values(6))
    return obj


# --- Python values for messages built in code -----------------------------------------------------


def rule_breaking_values(protocol: Protocol, field: Field) -> list[Any]:
    """Values of the right Python type that break a rule of ``field`` (empty: none exist)."""
    kind = field.type.kind
    out: list[Any] = []
    if field.has_const:
        c = field.const
        out.append(c + "x" if isinstance(c, str) else c + 1)
    if kind == "string":
        out += _bad_strings(field)
        out.append("a\ud800b")  # a lone surrogate: not UTF-8
    elif kind == "datetime":
        out.append(_dt.datetime(2026, 5, 14, 12, 34, 56))  # no zone
    elif kind in ("integer", "number"):
        out += [v for v in _out_of_range(field) if not (isinstance(v, float) and math.isinf(v))]
        if kind == "number":
            out += [math.nan, math.inf, -math.inf]
    elif kind == "enum":
        assert field.type.enum is not None
        out += [] if field.type.enum.open else ["zz-not-a-value"]
        out.append("a\ud800")
    elif kind in ("object", "any"):
        out += [
            {1: "key not a string"},
            {"x": math.nan},
            {"x": [math.inf]},
            {"x": {1, 2}},
            {"x": b"bytes"},
            {"x": "\udc80"},
        ]
        if kind == "any":
            out += [math.nan, object(), (1, {2: 3})]
    elif kind == "array":
        assert field.type.item is not None
        hi = _bound(field.max_length)
        if hi is not None and hi <= 256:
            out.append(("too_many", hi + 1))
        if field.unique_by is not None:
            out.append(("duplicate", 2))
        item = _item_field(field)
        for bad in rule_breaking_values(protocol, item):
            if not isinstance(bad, tuple):
                out.append(("item", bad))
    return [v for v in out if not (field.nullable and v is None)]


def wrong_typed_values(field: Field) -> list[Any]:
    """Python values of a type the field's annotation does not allow."""
    import msgspec

    kind = field.type.kind
    candidates: list[Any] = ["1", 1, 1.5, True, [], {}, b"x", object(), msgspec.UNSET]
    if not field.nullable:
        candidates.append(None)

    def fits(value: Any) -> bool:
        if value is None:
            return field.nullable or kind == "any"
        if value is msgspec.UNSET:
            return not field.required
        if kind in ("string", "enum"):
            return isinstance(value, str)
        if kind == "datetime":
            return isinstance(value, _dt.datetime)
        if kind == "integer":
            return _is_int(value)
        if kind == "number":
            return _is_int(value) or isinstance(value, float)
        if kind == "boolean":
            return isinstance(value, bool)
        if kind == "object":
            return isinstance(value, dict)
        if kind == "any":
            return True
        if kind in ("array",):
            return isinstance(value, list) and not value
        if kind == "map":
            return isinstance(value, dict) and not value
        return False

    return [v for v in candidates if not fits(v)]


# --- frames ---------------------------------------------------------------------------------------

_ORDER = {"little": "<", "big": ">"}
_FORMATS = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}


def frame_spec(protocol_id: str = "ovp") -> Frame:
    return PROTOCOLS[protocol_id].frames[0]


def header_struct(frame: Frame) -> struct.Struct:
    return struct.Struct(_ORDER[frame.byte_order] + "".join(_FORMATS[f.kind] for f in frame.header))


def _valid_header_values(frame: Frame) -> st.SearchStrategy[dict[str, int]]:
    parts = {}
    for f in frame.header:
        if f.const is not None:
            parts[f.name] = st.just(f.const)
        elif f.enum is not None:
            parts[f.name] = st.sampled_from([v.value for v in f.enum.values])
        elif f.flags:
            mask = sum(1 << bit for bit, _, _ in f.flags)
            parts[f.name] = st.integers(0, mask).map(lambda v, m=mask: v & m)
        else:
            top = 2 ** (8 * f.size) - 1
            parts[f.name] = st.one_of(st.sampled_from([0, top]), st.integers(0, top))
    return st.fixed_dictionaries(parts)


@st.composite
def frame_bytes(draw: st.DrawFn, frame: Frame | None = None) -> tuple[dict[str, int], bytes]:
    """A valid frame: its header values, and its bytes."""
    frame = frame or frame_spec()
    header = draw(_valid_header_values(frame))
    payload = draw(
        st.one_of(
            st.binary(min_size=frame.payload.size, max_size=frame.payload.size),
            st.sampled_from([b"\x00", b"\xff", b"\x00\x80"]).map(
                lambda unit: (unit * frame.payload.size)[: frame.payload.size]
            ),
        )
    )
    values = [header[f.name] for f in frame.header]
    return header, header_struct(frame).pack(*values) + payload


def frame_is_valid(buf: bytes, frame: Frame | None = None) -> bool:
    """The spec's judgement of any bytes as one frame."""
    frame = frame or frame_spec()
    if len(buf) != frame.size:
        return False
    values = header_struct(frame).unpack_from(buf)
    for f, v in zip(frame.header, values, strict=True):
        if f.const is not None and v != f.const:
            return False
        if f.enum is not None and v not in {e.value for e in f.enum.values}:
            return False
        if f.flags and v & ~sum(1 << bit for bit, _, _ in f.flags):
            return False
    return True


@st.composite
def any_frame_bytes(draw: st.DrawFn, frame: Frame | None = None) -> bytes:
    """Bytes near a frame: valid ones, one byte changed, cut or extended, or any length."""
    frame = frame or frame_spec()
    _, valid = draw(frame_bytes(frame))
    how = draw(st.sampled_from(["valid", "flip", "cut", "extend", "random", "sized", "header"]))
    if how == "valid":
        return valid
    if how == "flip":
        buf = bytearray(valid)
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] = draw(st.integers(0, 255))
        return bytes(buf)
    if how == "cut":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if how == "extend":
        return valid + draw(st.binary(min_size=1, max_size=3))
    if how == "sized":
        size = draw(st.sampled_from([0, 1, 11, 12, frame.size - 1, frame.size, frame.size + 1]))
        return draw(st.binary(min_size=size, max_size=size))
    if how == "header":
        head = draw(
            st.binary(min_size=header_struct(frame).size, max_size=header_struct(frame).size)
        )
        return head + valid[len(head) :]
    return draw(st.binary(max_size=2 * frame.size))
