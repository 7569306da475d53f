"""Wire messages derived from the spec's examples, valid and invalid, each with the rules it breaks.

The corpus is built from the IR alone, never from the exported JSON Schema, so that it can judge
the schema: ``tests/test_jsonschema.py`` hands every case to voxwire's decoder and to jsonschema
and compares both verdicts with what the case's ``violations`` predict.

A case's ``violations`` name the rules of the spec it breaks; empty means the spec calls it valid.
:data:`EXPRESSIBLE` is a rule the exported schema states; every other name is a rule that the
schema does not state or a validator reads differently, and the test lists each of those with its
reason and the verdict each side gives.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from codegen.ir import JSON_SAFE_INTEGER, Field, Message, Protocol, Rule

__all__ = [
    "ECMA_WHITESPACE",
    "EXPRESSIBLE",
    "UNKNOWN_TYPE",
    "Case",
    "Raw",
    "build_corpus",
    "dumps",
]

EXPRESSIBLE: Final = "expressible"
"""A rule the exported schema states: voxwire and jsonschema must both reject."""

UTF8_BYTES: Final = "utf8-bytes"
MIN_BYTES_WITHOUT_MIN_LENGTH: Final = "min-bytes-without-min-length"
UNIQUE_BY: Final = "unique-by"
INTEGER_FRACTION: Final = "integer-fraction"
MESSAGE_SIZE: Final = "message-size"
REQUIRES_NON_BOOLEAN: Final = "requires-non-boolean"
UNKNOWN_TYPE_ACCEPTED: Final = "unknown-type-accepted"
PATTERN_TRAILING_NEWLINE: Final = "pattern-trailing-newline"
BLANK_PYTHON_WHITESPACE: Final = "blank-python-whitespace"
BLANK_ECMA_WHITESPACE: Final = "blank-ecma-whitespace"
DATE_TIME_CALENDAR: Final = "date-time-calendar"

ECMA_WHITESPACE: Final = frozenset(
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""What ECMA-262's ``\\s`` matches (WhiteSpace and LineTerminator): the whitespace of the
``\\S`` pattern the schema writes for ``not_blank``."""

UNKNOWN_TYPE: Final = "voxwire.test.unknown_type"
UNKNOWN_FIELD: Final = "x_voxwire_test_unknown"

# One value of each JSON type, for "a value of the wrong JSON type".
_WRONG: Final[dict[str, Any]] = {
    "null": None,
    "boolean": True,
    "integer": 7,
    "number": 1.5,
    "string": "7",
    "array": [],
    "object": {},
}
_ALL_JSON_TYPES: Final = frozenset(_WRONG)


@dataclass(frozen=True)
class Raw:
    """A JSON value written exactly as ``text`` (``1.0``, ``5e0``), which json.dumps cannot."""

    text: str


Loc = tuple[str | int, ...]
"""Where a value sits in a message: keys and indices from the root."""

_DELETE: Final = object()
_MISSING: Final = object()


def dumps(value: Any) -> str:
    """Compact JSON, writing :class:`Raw` values as they are."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = (json.dumps(k, ensure_ascii=False) + ":" + dumps(v) for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True)
class Case:
    """One wire message, who sends it, and the rules of the spec it breaks."""

    protocol: str
    sender: str
    message: str | None
    """The wire type of the example it derives from (None for a root that is not an object)."""
    example: int
    kind: str
    """How it was made from the example: ``missing``, ``wrong_type:string``, ``over_max_items``..."""
    path: str
    """The JSON path it changes (``$`` for the whole message)."""
    schema: str
    """The ``$defs`` entry that judges it: the message's own, or the sender's union when the
    change concerns the type (a union of type-pinned messages judges a message of one of its
    types exactly as that message's definition does; the test checks that structure)."""
    raw: bytes
    violations: frozenset[str]

    @property
    def label(self) -> str:
        text = self.raw.decode("utf-8", "replace")
        if len(text) > 160:
            text = text[:157] + "..."
        return (
            f"{self.protocol} {self.sender} {self.message}#{self.example} {self.kind} "
            f"{self.path} breaks {sorted(self.violations) or 'nothing'}: {text}"
        )


def build_corpus(protocol: Protocol) -> list[Case]:
    """Every case of one protocol: the examples, their valid variants and their mutants."""
    return _Builder(protocol).run()


# -- the builder --------------------------------------------------------------------------------


def _path(loc: Loc) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)


def _get(root: Any, loc: Loc) -> Any:
    for key in loc:
        root = root[key]
    return root


def _with(root: dict[str, Any], changes: Sequence[tuple[Loc, Any]]) -> Any:
    out = copy.deepcopy(root)
    for loc, value in changes:
        if not loc:
            return value
        parent = _get(out, loc[:-1])
        if value is _DELETE:
            parent.pop(loc[-1], None)
        else:
            parent[loc[-1]] = value
    return out


def _json_types(f: Field) -> frozenset[str]:
    """The JSON types a value of ``f`` may have."""
    kind = f.type.kind
    if kind == "any":
        return _ALL_JSON_TYPES
    if kind == "enum":
        assert f.type.enum is not None
        kinds = {"integer" if f.type.enum.is_int else "string"}
    elif kind in ("struct", "object", "map"):
        kinds = {"object"}
    elif kind == "number":
        kinds = {"integer", "number"}
    elif kind == "datetime":
        kinds = {"string"}
    else:
        kinds = {kind}
    if f.nullable:
        kinds.add("null")
    return frozenset(kinds)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


class _Builder:
    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol
        self.structs = {s.name: s for s in protocol.structs}
        self.max_bytes = int(protocol.max_message_bytes.value)
        self.cases: list[Case] = []
        self.seen: set[tuple[str, str, bytes]] = set()
        self.donors: dict[tuple[str, str], Any] = {}
        for m in protocol.messages:
            for example in m.examples:
                self._collect_donors(m.type, m.fields, example.json)

    # Donors: a valid value of each field seen in any example, to add a field an example lacks.

    def _collect_donors(self, owner: str, fields: tuple[Field, ...], obj: dict[str, Any]) -> None:
        for f in fields:
            if f.wire_name not in obj:
                continue
            value = obj[f.wire_name]
            key = (owner, f.wire_name)
            better = value not in (None, [], {}) and self.donors.get(key) in (None, [], {})
            if key not in self.donors or better:
                self.donors[key] = value
            element = f.type.element
            if element.kind != "struct":
                continue
            assert element.struct is not None
            struct = self.structs[element.struct]
            values = value if isinstance(value, list) else [value]
            for item in values:
                if isinstance(item, dict):
                    self._collect_donors(struct.name, struct.fields, item)

    # Cases.

    def add(
        self,
        m: Message | None,
        example: int,
        sender: str,
        kind: str,
        loc: Loc,
        obj: Any,
        violations: set[str],
        schema: str,
    ) -> None:
        raw = dumps(obj).encode("utf-8")
        if len(raw) > self.max_bytes:
            violations = violations | {MESSAGE_SIZE}
        key = (sender, schema, raw)
        if key in self.seen:
            return
        self.seen.add(key)
        self.cases.append(
            Case(
                protocol=self.protocol.id,
                sender=sender,
                message=m.type if m else None,
                example=example,
                kind=kind,
                path=_path(loc),
                schema=schema,
                raw=raw,
                violations=frozenset(violations),
            )
        )

    def run(self) -> list[Case]:
        for m in self.protocol.messages:
            for index, example in enumerate(m.examples):
                self._top_level(m, index, example.json)
                self._object(m, index, example.json, (), m.type, m.fields, m.rules, False)
        for sender in self.protocol.senders:
            union = sender.union_name
            for kind, obj in (
                ("root_array", []),
                ("root_string", "session.start"),
                ("root_number", 1),
                ("root_null", None),
                ("root_without_type", {}),
            ):
                self.add(None, 0, sender.id, kind, (), obj, {EXPRESSIBLE}, union)
        return self.cases

    def _top_level(self, m: Message, index: int, base: dict[str, Any]) -> None:
        for sender in self.protocol.senders:
            union = sender.union_name
            if sender.id not in m.senders:
                self.add(m, index, sender.id, "wrong_sender", (), base, {EXPRESSIBLE}, union)
                continue
            self.add(m, index, sender.id, "example", (), base, set(), union)
            unknown = _with(base, [(("type",), UNKNOWN_TYPE)])
            broken = UNKNOWN_TYPE_ACCEPTED if sender.accepts_unknown else EXPRESSIBLE
            # What the sender may send, unknown types included, is the Any... union.
            judge = f"Any{union}" if sender.accepts_unknown else union
            self.add(m, index, sender.id, "unknown_type", ("type",), unknown, {broken}, judge)
            self.add(
                m,
                index,
                sender.id,
                "missing",
                ("type",),
                _with(base, [(("type",), _DELETE)]),
                {EXPRESSIBLE},
                union,
            )
            for json_type, value in _WRONG.items():
                if json_type != "string":
                    wrong = _with(base, [(("type",), value)])
                    self.add(
                        m,
                        index,
                        sender.id,
                        f"wrong_type:{json_type}",
                        ("type",),
                        wrong,
                        {EXPRESSIBLE},
                        union,
                    )
            # The message size: padded with an unknown field to the limit, then one byte over.
            padded = _with(base, [((UNKNOWN_FIELD,), "")])
            room = self.max_bytes - len(dumps(padded).encode("utf-8"))
            for extra, kind in ((0, "at_max_message_bytes"), (1, "over_max_message_bytes")):
                obj = _with(base, [((UNKNOWN_FIELD,), "a" * (room + extra))])
                self.add(m, index, sender.id, kind, (UNKNOWN_FIELD,), obj, set(), union)
        # Every optional field removed at once.
        removals: list[tuple[Loc, Any]] = [
            ((f.wire_name,), _DELETE) for f in m.fields if not f.required
        ]
        if removals:
            bare = _with(base, removals)
            rules = self._broken_rules(bare, m.fields, m.rules)
            self.add(
                m, index, m.senders[0], "optional_fields_removed", (), bare, rules, m.class_name
            )

    def _object(
        self,
        m: Message,
        index: int,
        base: dict[str, Any],
        loc: Loc,
        owner: str,
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        reject_unknown: bool,
    ) -> None:
        """Mutants of every field of the object at ``loc`` (a message, or a nested type)."""
        obj = _get(base, loc)
        sender = m.senders[0]

        def emit(
            kind: str, changes: Sequence[tuple[Loc, Any]], broken: set[str], where: Loc
        ) -> None:
            mutated = _with(base, changes)
            container = _get(mutated, loc)
            broken = broken | self._broken_rules(container, fields, rules)
            self.add(m, index, sender, kind, where, mutated, broken, m.class_name)

        for f in fields:
            floc = (*loc, f.wire_name)
            present = f.wire_name in obj
            value = obj.get(f.wire_name, _MISSING)
            if present:
                emit(
                    "missing" if f.required else "absent",
                    [(floc, _DELETE)],
                    {EXPRESSIBLE} if f.required else set(),
                    floc,
                )
            else:
                donor = self.donors.get((owner, f.wire_name), _MISSING)
                if donor is not _MISSING:
                    emit("added", [(floc, donor)], set(), floc)
                    value = donor
            for kind, new, broken in self._values(f, value):
                emit(kind, [(floc, new)], broken, floc)
            if not present:
                continue
            ref = f.type
            if ref.kind == "struct" and isinstance(value, dict):
                assert ref.struct is not None
                s = self.structs[ref.struct]
                self._object(
                    m, index, base, floc, s.name, s.fields, s.rules, s.reject_unknown_fields
                )
            elif ref.kind == "array" and isinstance(value, list) and value:
                assert ref.item is not None
                iloc = (*floc, 0)
                if ref.item.kind == "struct":
                    assert ref.item.struct is not None
                    s = self.structs[ref.item.struct]
                    self._object(
                        m, index, base, iloc, s.name, s.fields, s.rules, s.reject_unknown_fields
                    )
                else:
                    # An item obeys the field's value rules (range, pattern, bytes, blank); the
                    # field's lengths count items.
                    item = dataclasses.replace(
                        f,
                        type=ref.item,
                        required=True,
                        nullable=False,
                        has_default=False,
                        has_const=False,
                        min_length=None,
                        max_length=None,
                        unique_by=None,
                    )
                    for kind, new, broken in self._values(item, value[0]):
                        emit(f"item_{kind}", [(iloc, new)], broken, iloc)
        defaults = [((*loc, f.wire_name), f.default) for f in fields if f.has_default]
        if defaults:
            emit("defaults_written", defaults, set(), loc)
        emit(
            "unknown_field",
            [((*loc, UNKNOWN_FIELD), 1)],
            {EXPRESSIBLE} if reject_unknown else set(),
            (*loc, UNKNOWN_FIELD),
        )
        # Rules: make each one false by adding or removing its fields.
        for rule in rules:
            names = [x.wire_name for x in rule.fields]
            if rule.kind in ("exactly_one_of", "at_most_one_of") and len(names) > 1:
                adds = [
                    ((*loc, n), self.donors.get((owner, n), "x")) for n in names if n not in obj
                ]
                emit(f"rule_{rule.kind}_all", adds, set(), loc)
            if rule.kind in ("exactly_one_of", "at_least_one_of"):
                emit(f"rule_{rule.kind}_none", [((*loc, n), _DELETE) for n in names], set(), loc)
            if rule.kind == "min_fields":
                emit(
                    "rule_min_fields", [((*loc, x.wire_name), _DELETE) for x in fields], set(), loc
                )

    def _broken_rules(
        self, obj: Any, fields: tuple[Field, ...], rules: tuple[Rule, ...]
    ) -> set[str]:
        """The names of the rules across fields that ``obj`` breaks (the spec's reading)."""
        if not isinstance(obj, dict):
            return set()
        broken: set[str] = set()
        for rule in rules:
            present = [x.wire_name for x in rule.fields if x.wire_name in obj]
            if rule.kind == "exactly_one_of":
                bad = len(present) != 1
            elif rule.kind == "at_most_one_of":
                bad = len(present) > 1
            elif rule.kind == "at_least_one_of":
                bad = not present
            elif rule.kind == "min_fields":
                assert rule.count is not None
                bad = sum(f.wire_name in obj for f in fields) < rule.count
            elif rule.kind == "requires":
                assert rule.field is not None and rule.other is not None
                value = obj.get(rule.field.wire_name)
                is_set = value is not None and value is not False
                default = rule.other.default if rule.other.has_default else _MISSING
                other = obj.get(rule.other.wire_name, default)
                bad = is_set and not _same(other, rule.equals)
                if bad and rule.field.type.kind != "boolean":
                    broken.add(REQUIRES_NON_BOOLEAN)
                    continue
            else:  # pragma: no cover - a new kind of rule: teach the corpus
                raise AssertionError(f"unknown rule kind {rule.kind}")
            if bad:
                broken.add(EXPRESSIBLE)
        return broken

    # Values of one field (or of one item of an array field, ``ref`` then being the item type).

    def _values(self, f: Field, current: Any) -> Iterator[tuple[str, Any, set[str]]]:
        """Values of field ``f`` (or of an item of an array field) and the rules each breaks."""
        ref = f.type
        for json_type, value in _WRONG.items():
            if json_type not in _json_types(f):
                yield f"wrong_type:{json_type}", value, {EXPRESSIBLE}
        if f.nullable:
            yield "null", None, set()
        if f.has_const:
            yield from self._const(f.const)
            return
        kind = ref.kind
        if kind == "integer":
            yield from self._integers(f, current)
        elif kind == "number":
            yield from self._numbers(f)
        elif kind == "string":
            yield from self._strings(f, current)
        elif kind == "datetime":
            yield "datetime_utc", "2026-05-14T12:34:56Z", set()
            yield "datetime_offset", "2026-05-14T14:34:56.5+02:00", set()
            yield "datetime_no_zone", "2026-05-14T12:34:56", {EXPRESSIBLE}
            yield "datetime_not_a_date", "yesterday", {EXPRESSIBLE}
            yield "datetime_30_february", "2026-02-30T12:34:56Z", {DATE_TIME_CALENDAR}
        elif kind == "enum":
            assert ref.enum is not None
            values = [v.value for v in ref.enum.values]
            for v in values:
                yield f"enum_value:{v}", v, set()
            if ref.enum.open:
                yield "open_enum_new_value", "voxwire-test-new-value", set()
                yield "open_enum_empty", "", set()
            else:
                yield "enum_out_of_set", "voxwire-test-not-a-value", {EXPRESSIBLE}
                yield "enum_case", str(values[0]).upper() + "X", {EXPRESSIBLE}
        elif kind == "array":
            yield from self._arrays(f, current)

    def _const(self, const: Any) -> Iterator[tuple[str, Any, set[str]]]:
        if isinstance(const, bool):
            yield "const_other", not const, {EXPRESSIBLE}
        elif isinstance(const, int):
            yield "const_other", const + 1, {EXPRESSIBLE}
            yield "integer_fraction", Raw(f"{const}.0"), {INTEGER_FRACTION}
        elif isinstance(const, str):
            yield "const_other", const + "x", {EXPRESSIBLE}
            yield (
                "const_case",
                const.upper() if const.upper() != const else const.lower(),
                {EXPRESSIBLE},
            )

    def _integers(self, f: Field, current: Any) -> Iterator[tuple[str, Any, set[str]]]:
        assert f.minimum is not None and f.maximum is not None  # the IR bounds every integer
        lo, hi = int(f.minimum.value), int(f.maximum.value)
        ok = current if type(current) is int and lo <= current <= hi else lo
        yield "integer_fraction", Raw(f"{ok}.0"), {INTEGER_FRACTION}
        yield "integer_exponent", Raw(f"{ok}e0"), {INTEGER_FRACTION}
        yield "integer_minimum", lo, set()
        yield "integer_maximum", hi, set()
        for kind, value in (
            ("integer_below_minimum", lo - 1),
            ("integer_above_maximum", hi + 1),
            ("integer_2**53", 2**53),
            ("integer_-2**53", -(2**53)),
            ("integer_10**30", 10**30),
        ):
            if not lo <= value <= hi:
                yield kind, value, {EXPRESSIBLE}
        assert hi <= JSON_SAFE_INTEGER and lo >= -JSON_SAFE_INTEGER

    def _numbers(self, f: Field) -> Iterator[tuple[str, Any, set[str]]]:
        lo = f.minimum.value if f.minimum is not None else None
        hi = f.maximum.value if f.maximum is not None else None
        if lo is not None:
            yield "number_minimum", lo, set()
            yield "number_below_minimum", lo - 0.25, {EXPRESSIBLE}
        if hi is not None:
            yield "number_maximum", hi, set()
            yield "number_above_maximum", hi + 0.25, {EXPRESSIBLE}
        integral = math.ceil(lo) if lo is not None else 0
        if hi is None or integral <= hi:
            yield "number_written_as_integer", integral, set()

    def _strings(self, f: Field, current: Any) -> Iterator[tuple[str, Any, set[str]]]:
        now = current if isinstance(current, str) else None
        candidates: list[tuple[str, str]] = [("empty", "")]
        if f.max_length is not None:
            n = int(f.max_length.value)
            candidates += [("at_max_length", "a" * n), ("over_max_length", "a" * (n + 1))]
            if now:  # the example's own characters, so that a pattern does not hide the length
                cycled = now * (n // len(now) + 2)
                candidates += [
                    ("at_max_length_cycled", cycled[:n]),
                    ("over_max_length_cycled", cycled[: n + 1]),
                ]
        if f.min_length is not None and f.min_length.value > 0:
            candidates.append(("under_min_length", "a" * (int(f.min_length.value) - 1)))
        if f.max_bytes is not None:
            n = int(f.max_bytes.value)
            candidates += [
                ("at_max_bytes", "a" * n),
                ("over_max_bytes_ascii", "a" * (n + 1)),
                ("at_max_bytes_utf8", "é" * (n // 2)),
                ("over_max_bytes_utf8", "é" * (n // 2 + 1)),
                ("over_max_bytes_utf8_4", "𝄞" * (n // 4 + 1)),
            ]
        if f.min_bytes is not None:
            candidates.append(("under_min_bytes", "a" * (int(f.min_bytes.value) - 1)))
        if f.pattern is not None and now is not None:
            candidates += [
                ("pattern_non_ascii_suffix", now + "é"),
                ("pattern_leading_space", " " + now),
                ("pattern_trailing_newline", now + "\n"),
            ]
        if f.not_blank:
            candidates += [
                ("blank_spaces", "   "),
                ("blank_mixed", " \t\r\n"),
                ("blank_ideographic_space", "\u3000"),
                ("blank_unit_separator", "\x1f"),  # str.isspace() and Python's \s; not ECMA's
                ("blank_next_line", "\x85"),  # the same
                ("blank_bom", "\ufeff"),  # ECMA's \s; not str.isspace()
                ("not_blank_padded", " x "),
            ]
        seen: set[str] = set()
        for kind, text in candidates:
            if text not in seen:
                seen.add(text)
                yield kind, text, self._string_violations(f, text)

    def _string_violations(self, f: Field, text: str) -> set[str]:
        """The rules of the spec ``text`` breaks as the value of string field ``f``."""
        broken: set[str] = set()
        chars, size = len(text), len(text.encode("utf-8"))
        if (
            (f.max_length is not None and chars > f.max_length.value)
            or (f.min_length is not None and chars < f.min_length.value)
            # A string of more characters than a byte limit breaks it whatever they are.
            or (f.max_bytes is not None and chars > f.max_bytes.value)
        ):
            broken.add(EXPRESSIBLE)
        if f.max_bytes is not None and size > f.max_bytes.value:
            broken.add(UTF8_BYTES)
        if f.min_bytes is not None and size < f.min_bytes.value:
            # A character is 1 to 4 bytes: fewer than min_bytes / 4 characters break the limit
            # whatever they are, which minLength can say.
            few = chars < math.ceil(f.min_bytes.value / 4)
            broken.add(MIN_BYTES_WITHOUT_MIN_LENGTH if few else UTF8_BYTES)
        if f.pattern is not None and re.fullmatch(f.pattern, text) is None:
            # Python's re.search lets $ match before a final newline; ECMA-262's $ does not.
            dollar = re.search(f.pattern, text) is not None
            broken.add(PATTERN_TRAILING_NEWLINE if dollar else EXPRESSIBLE)
        if f.not_blank:
            python_blank = text == "" or text.isspace()
            ecma_blank = all(ch in ECMA_WHITESPACE for ch in text)
            if python_blank and ecma_blank:
                broken.add(EXPRESSIBLE)
            elif python_blank:
                broken.add(BLANK_PYTHON_WHITESPACE)
            elif ecma_blank:
                broken.add(BLANK_ECMA_WHITESPACE)
        return broken

    def _arrays(self, f: Field, current: Any) -> Iterator[tuple[str, Any, set[str]]]:
        low = int(f.min_length.value) if f.min_length is not None else 0
        yield "empty_array", [], {EXPRESSIBLE} if low > 0 else set()
        if not isinstance(current, list) or not current:
            return
        first = current[0]
        if f.max_length is not None:
            n = int(f.max_length.value)
            yield "at_max_items", self._distinct(f, first, n), set()
            broken = {EXPRESSIBLE} | ({UNIQUE_BY} if f.unique_by else set())
            yield "over_max_items", [first] * (n + 1), broken
        if f.unique_by is not None and (f.max_length is None or f.max_length.value >= 2):
            broken = {EXPRESSIBLE} if f.unique_by == "value" else {UNIQUE_BY}
            yield "duplicate_items", [first, copy.deepcopy(first)], broken

    def _distinct(self, f: Field, first: Any, n: int) -> list[Any]:
        """``n`` copies of ``first``, told apart by their unique_by key when there is one."""
        items = [copy.deepcopy(first) for _ in range(n)]
        if f.unique_by is not None and f.unique_by != "value":
            for i, item in enumerate(items):
                item[f.unique_by] = f"n{i}_{item[f.unique_by]}"
        elif f.unique_by == "value":
            items = [f"{first}_{i}" for i in range(n)]
        return items
