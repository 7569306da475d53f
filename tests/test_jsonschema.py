"""The exported JSON Schema against voxwire, for both protocols, and against an independent oracle.

1. Each protocol ships ``voxwire/<id>/schema.json``, a valid JSON Schema 2020-12 with a definition
   for every message, sender union, nested type and enum.
2. Every spec example is valid for its message's definition and for its sender's union, and decodes.
3. A corpus (tests/schema_corpus.py) mutates every example systematically; voxwire and jsonschema
   must give the verdict the spec predicts for every case. Where they may not agree, the reason is
   listed in :data:`DISAGREEMENTS` (the rules ``NOT_EXPRESSIBLE`` names, a quirk of the
   validator, and the exporter's bugs), and the test holds each listed disagreement to the cases
   that produce it, in both directions.
4. datamodel-code-generator turns each schema into msgspec Structs (an oracle written by someone
   else); it must decode every example to the same values as voxwire.

The schema is read under two readings of JSON Schema's ``pattern``: python-jsonschema's (Python's
``re``) and ECMA-262's, the dialect the JSON Schema specification prescribes. They differ on
``$`` before a final newline and on what ``\\s`` calls whitespace, and the schema's ``not_blank``
approximation (``\\S``) only shows its gap under ECMA-262.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import msgspec
import pytest
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.protocols import Validator

from codegen import jsonschema_export
from codegen.ir import Protocol, Rule
from codegen.jsonschema_export import NOT_EXPRESSIBLE
from tests.schema_corpus import (
    ECMA_WHITESPACE,
    EXPRESSIBLE,
    UNKNOWN_TYPE,
    Case,
    build_corpus,
)
from voxwire import brisvox, ovp
from voxwire._codec import UnknownMessage
from voxwire.conformance import json_equal
from voxwire.schema import json_schema

PROTOCOLS = ("brisvox", "ovp")
CODECS: dict[str, Any] = {"brisvox": brisvox, "ovp": ovp}
DIALECTS = ("python", "ecma")
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def _schema_file(protocol_id: str) -> Path:
    """The shipped schema.json: beside the generated modules, in a wheel as in an editable
    install (where the protocol package's __init__.py is in runtime/, see docs/architecture.md)."""
    api = importlib.import_module(f"voxwire.{protocol_id}._api")
    return Path(api.__file__ or "").with_name("schema.json")


# -- the expected disagreements -----------------------------------------------------------------


@dataclass(frozen=True)
class Disagreement:
    """What each side does with a case that breaks only this rule."""

    voxwire_rejects: bool
    python_rejects: bool
    """python-jsonschema as it is (``pattern`` run by Python's ``re.search``)."""
    ecma_rejects: bool
    """jsonschema with ``pattern`` read as ECMA-262, as JSON Schema prescribes."""
    reason: str
    not_expressible: str | None = None
    """The start of the ``NOT_EXPRESSIBLE`` entry this stands for."""

    def rejects(self, dialect: str) -> bool:
        return self.python_rejects if dialect == "python" else self.ecma_rejects


DISAGREEMENTS: dict[str, Disagreement] = {
    EXPRESSIBLE: Disagreement(True, True, True, "a rule the schema states: no disagreement"),
    "utf8-bytes": Disagreement(
        True, False, False,
        "a string within its limit in characters but over (or under) it in UTF-8 bytes: "
        "maxLength counts characters, x-max-bytes is not a JSON Schema keyword",
        not_expressible="limits in UTF-8 bytes",
    ),
    "min-bytes-without-min-length": Disagreement(
        True, True, True,
        "'' for a field of min_bytes 1: the schema states minLength ceil(min_bytes / 4)",
    ),
    "blank-python-whitespace": Disagreement(
        True, True, False,
        "text made of U+001C..U+001F or U+0085: whitespace to str.isspace() (voxwire's not_blank) "
        "and to Python's \\s, not to ECMA-262's, so an ECMA reading of the \\S pattern accepts it",
        not_expressible="blank text",
    ),
    "blank-ecma-whitespace": Disagreement(
        False, False, True,
        "text made of U+FEFF: whitespace to ECMA-262's \\s, not to str.isspace(); voxwire "
        "accepts it and an ECMA reading of the \\S pattern rejects it",
        not_expressible="blank text",
    ),
    "unique-by": Disagreement(
        True, False, False,
        "two array items with the same unique_by field: uniqueItems compares whole items",
        not_expressible="uniqueness of one field of array items",
    ),
    "integer-fraction": Disagreement(
        True, False, False,
        "an integer written 5.0 or 5e0: JSON Schema's integer is a number with no fraction, "
        "msgspec's int a literal with none",
        not_expressible="integers written with a fraction or exponent",
    ),
    "message-size": Disagreement(
        True, False, False,
        "a message over max_message_bytes once encoded: a schema sees values, not bytes",
        not_expressible="the largest message",
    ),
    "requires-non-boolean": Disagreement(
        True, True, True,
        "a `requires` rule whose field is not a boolean is broken: if/then states it",
    ),
    "unknown-type-accepted": Disagreement(
        False, False, False,
        "a message of a type nobody sends, from a sender whose unknown types the spec accepts: "
        "the union's last branch takes it",
    ),
    "date-time-calendar": Disagreement(
        True, False, False,
        "a date-time in the form but not on the calendar (30 February): the pattern checks each "
        "field's range, the decoder the date",
        not_expressible="the calendar of a date-time",
    ),
    "pattern-trailing-newline": Disagreement(
        True, False, True,
        "a value that matches a ^...$ pattern but for a final newline: python-jsonschema runs "
        "patterns with re.search, whose $ also matches before a final newline; ECMA-262's $ "
        "(and voxwire, which compiles $ as \\Z) does not. A quirk of the validator, not of the "
        "schema",
    ),
}  # fmt: skip


STATED_SINCE = {"min-bytes-without-min-length", "requires-non-boolean", "unknown-type-accepted"}
"""Rows whose three verdicts agree: rules the exporter once missed and now states. The corpus
keeps labelling their cases, so the fixes stay tested."""


def expected_rejects(case: Case, side: str) -> bool:
    """Whether ``side`` (voxwire, python or ecma) rejects ``case``, by the listed rules."""
    rows = [DISAGREEMENTS[name] for name in case.violations]
    if side == "voxwire":
        return any(row.voxwire_rejects for row in rows)
    return any(row.rejects(side) for row in rows)


# -- validators ---------------------------------------------------------------------------------


def ecma_regex(pattern: str) -> str:
    """A Python regular expression that matches what ECMA-262 ``pattern`` matches.

    Only what differs between the dialects and our patterns use is translated (``$``, ``.``,
    ``\\s``, ``\\S``); anything else that differs raises, so a new pattern cannot be misread.
    """
    space = "".join(f"\\u{ord(c):04x}" for c in sorted(ECMA_WHITESPACE))
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            escaped = pattern[i + 1]
            if escaped == "s":
                out.append(space if in_class else f"[{space}]")
            elif escaped == "S" and not in_class:
                out.append(f"[^{space}]")
            elif escaped.isalnum():
                raise ValueError(f"{pattern!r}: \\{escaped} is not translated to Python")
            else:
                out.append(ch + escaped)  # an escaped punctuation character: the same in both
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
            out.append(ch)
        elif ch == "[":
            if pattern[i + 1 : i + 2] == "]" or pattern[i + 1 : i + 3] == "^]":
                raise ValueError(f"{pattern!r}: an empty class reads differently in Python")
            in_class = True
            out.append(ch)
        elif ch == "$":
            out.append(r"\Z")  # the end of the input, not before a final newline
        elif ch == ".":
            out.append("[^\n\r\u2028\u2029]")
        elif ch == "(" and pattern[i + 1 : i + 2] == "?" and pattern[i + 2 : i + 3] not in ":=!":
            raise ValueError(f"{pattern!r}: (?{pattern[i + 2]} is not translated to Python")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


@functools.cache
def _ecma_compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(ecma_regex(pattern))


def _ecma_pattern(
    validator: Validator, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _ecma_compiled(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r} (ECMA-262)")


EcmaValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _ecma_pattern}
)
VALIDATOR_CLASSES: dict[str, Any] = {"python": Draft202012Validator, "ecma": EcmaValidator}


def load_schema(protocol_id: str) -> dict[str, Any]:
    """The schema as the installed package ships it."""
    resource = _schema_file(protocol_id)
    return json.loads(resource.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@functools.cache
def validator(protocol_id: str, name: str, dialect: str) -> Any:
    """A validator for one definition of the protocol's schema."""
    document = load_schema(protocol_id)
    return VALIDATOR_CLASSES[dialect]({"$ref": f"#/$defs/{name}", "$defs": document["$defs"]})


def walk(schema: Any) -> Iterator[dict[str, Any]]:
    """Every subschema of a schema document."""
    if isinstance(schema, dict):
        yield schema
        for key, value in schema.items():
            if key not in ("const", "default", "examples", "enum"):
                yield from walk(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from walk(item)


@pytest.fixture(scope="module")
def corpora(protocols: dict[str, Protocol]) -> dict[str, list[Case]]:
    return {pid: build_corpus(protocols[pid]) for pid in PROTOCOLS}


@dataclass(frozen=True)
class Verdicts:
    voxwire_rejects: bool
    decoded: str | None
    """The class voxwire decoded to, or its error code."""
    python_rejects: bool
    ecma_rejects: bool

    def rejects(self, side: str) -> bool:
        return bool(getattr(self, f"{side}_rejects"))


def _voxwire(protocol_id: str, case: Case) -> tuple[bool, str]:
    codec = CODECS[protocol_id]
    try:
        message = codec.decode(case.raw, sender=case.sender)
    except codec.ProtocolError as exc:
        return True, str(exc.code)
    return False, type(message).__name__


@pytest.fixture(scope="module")
def verdicts(corpora: dict[str, list[Case]]) -> dict[str, list[tuple[Case, Verdicts]]]:
    """What voxwire and both readings of the schema say of every case, computed once."""
    out: dict[str, list[tuple[Case, Verdicts]]] = {}
    for pid, cases in corpora.items():
        rows = []
        for case in cases:
            vox_rejects, decoded = _voxwire(pid, case)
            instance = json.loads(case.raw)
            python = not validator(pid, case.schema, "python").is_valid(instance)
            ecma = not validator(pid, case.schema, "ecma").is_valid(instance)
            rows.append((case, Verdicts(vox_rejects, decoded, python, ecma)))
        out[pid] = rows
    return out


def _report(failures: list[str], total: int, what: str) -> str:
    shown = "\n".join(failures[:25])
    more = f"\n... and {len(failures) - 25} more" if len(failures) > 25 else ""
    return f"{len(failures)} of {total} cases: {what}\n{shown}{more}"


# -- 1. the schema file --------------------------------------------------------------------------


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_schema_is_shipped_in_the_package_and_valid_2020_12(protocol_id: str) -> None:
    resource = _schema_file(protocol_id)
    assert resource.is_file(), f"voxwire.{protocol_id} ships no schema.json"
    document = load_schema(protocol_id)
    assert document["$schema"] == DRAFT_2020_12
    Draft202012Validator.check_schema(document)
    # Every $ref points at a definition.
    refs = {s["$ref"] for s in walk(document) if "$ref" in s}
    assert refs <= {f"#/$defs/{name}" for name in document["$defs"]}
    assert all(comment in document["$comment"] for comment in NOT_EXPRESSIBLE)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_schema_defines_every_message_union_type_and_enum(
    protocols: dict[str, Protocol], protocol_id: str
) -> None:
    protocol = protocols[protocol_id]
    defs = load_schema(protocol_id)["$defs"]
    expected = (
        {m.class_name for m in protocol.messages}
        | {s.union_name for s in protocol.senders}
        | {
            f"{kind}{s.union_name}"
            for s in protocol.senders
            if s.accepts_unknown
            for kind in ("Any", "Unknown")
        }
        | {t.name for t in protocol.structs}
        | {e.name for e in protocol.enums}
    )
    assert set(defs) == expected
    assert {s.union_name for s in protocol.senders} >= (
        {"ServerMessage", "AgentMessage"}
        if protocol_id == "brisvox"
        else {"ServerMessage", "ClientMessage"}
    )
    for m in protocol.messages:
        definition = defs[m.class_name]
        assert definition["type"] == "object"
        assert list(definition["properties"]) == ["type", *(f.wire_name for f in m.fields)]
        assert definition["properties"]["type"] == {"const": m.type}
        assert definition["required"] == ["type", *(f.wire_name for f in m.fields if f.required)]
    for t in protocol.structs:
        definition = defs[t.name]
        assert list(definition["properties"]) == [f.wire_name for f in t.fields]
        assert definition.get("required", []) == [f.wire_name for f in t.fields if f.required]
        assert definition.get("additionalProperties", True) is not t.reject_unknown_fields
    for e in protocol.enums:
        values = [v.value for v in e.values]
        assert defs[e.name].get("enum" if not e.open else "examples") == values


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_sender_unions_are_oneofs_of_type_pinned_messages(
    protocols: dict[str, Protocol], protocol_id: str
) -> None:
    """A union whose every branch pins ``type`` by a distinct const judges a message of one of
    its types exactly as that message's definition does; the corpus relies on it to judge
    field mutants by the message's own definition."""
    protocol = protocols[protocol_id]
    defs = load_schema(protocol_id)["$defs"]
    for sender in protocol.senders:
        union = defs[sender.union_name]
        assert set(union) == {"description", "oneOf"}
        assert union["oneOf"] == [{"$ref": f"#/$defs/{m.class_name}"} for m in sender.messages]
        tags = [defs[m.class_name]["properties"]["type"]["const"] for m in sender.messages]
        assert len(set(tags)) == len(tags)
        assert all("type" in defs[m.class_name]["required"] for m in sender.messages)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_the_ecma_reading_translates_every_pattern_of_the_schema(protocol_id: str) -> None:
    patterns = {s["pattern"] for s in walk(load_schema(protocol_id)) if "pattern" in s}
    assert r"\S" in patterns
    for pattern in patterns:
        re.compile(ecma_regex(pattern))  # raises on what it cannot translate
    assert re.search(ecma_regex(r"\S"), "\ufeff") is None
    assert re.search(ecma_regex(r"\S"), "\x1f") is not None
    assert re.search(ecma_regex("^[a-z]+$"), "abc\n") is None
    assert re.search("^[a-z]+$", "abc\n") is not None  # Python's reading


# -- 2. the examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_every_example_is_valid_for_its_message_and_union_and_decodes(
    protocols: dict[str, Protocol], protocol_id: str, dialect: str
) -> None:
    protocol = protocols[protocol_id]
    codec = CODECS[protocol_id]
    checked = 0
    for m in protocol.messages:
        assert m.examples
        own = validator(protocol_id, m.class_name, dialect)
        for index, example in enumerate(m.examples):
            where = f"{m.type} example {index}"
            errors = [e.message for e in own.iter_errors(example.json)]
            assert not errors, f"{where} breaks {m.class_name}: {errors}"
            for sender_id in m.senders:
                union = validator(protocol_id, protocol.sender(sender_id).union_name, dialect)
                assert union.is_valid(example.json), f"{where} breaks the {sender_id}'s union"
                decoded = codec.decode(json.dumps(example.json), sender=sender_id)
                assert type(decoded).__name__ == m.class_name, where
                checked += 1
    assert checked >= len(protocol.messages)


# -- 3. the corpus: valid and invalid messages ---------------------------------------------------

REQUIRED_KINDS = (
    "example",
    "missing",
    "absent",
    "wrong_type:null",
    "wrong_type:string",
    "wrong_type:object",
    "wrong_type:array",
    "wrong_type:boolean",  # an integer set to true, among others
    "wrong_type:number",  # an integer set to 1.5, among others
    "integer_fraction",
    "integer_exponent",
    "integer_2**53",
    "integer_below_minimum",
    "over_max_length",
    "pattern_non_ascii_suffix",
    "pattern_trailing_newline",
    "enum_out_of_set",
    "over_max_items",
    "duplicate_items",
    "unknown_type",
    "wrong_sender",
    "unknown_field",
    "over_max_message_bytes",
    "const_other",
    "blank_spaces",
    "blank_bom",
    "optional_fields_removed",
    "null",
)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_the_corpus_mutates_every_example_in_every_way(
    protocols: dict[str, Protocol], corpora: dict[str, list[Case]], protocol_id: str
) -> None:
    protocol = protocols[protocol_id]
    cases = corpora[protocol_id]
    kinds = Counter(c.kind for c in cases)
    fields = [f for m in protocol.messages for f in m.fields]
    fields += [f for t in protocol.structs for f in t.fields]
    required = [*REQUIRED_KINDS]
    if any(f.max_bytes is not None for f in fields):  # Brisvox only: OVP counts characters
        required += ["over_max_bytes_utf8", "over_max_bytes_utf8_4"]
    assert not [k for k in required if not kinds[k]], kinds
    examples = {(c.message, c.example) for c in cases if c.kind == "missing" and c.path != "$.type"}
    every = {(m.type, i) for m in protocol.messages for i in range(len(m.examples))}
    assert {(c.message, c.example) for c in cases if c.kind == "example"} == every
    assert examples <= every and len(examples) >= len(every) * 0.9
    assert len([c for c in cases if c.violations]) > 2000
    assert len([c for c in cases if not c.violations]) > 500
    assert {name for c in cases for name in c.violations} <= set(DISAGREEMENTS)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_voxwire_rejects_exactly_the_cases_that_break_a_rule(
    protocols: dict[str, Protocol],
    verdicts: dict[str, list[tuple[Case, Verdicts]]],
    protocol_id: str,
) -> None:
    classes = {m.type: m.class_name for m in protocols[protocol_id].messages}
    rows = verdicts[protocol_id]
    failures = []
    for case, seen in rows:
        expected = expected_rejects(case, "voxwire")
        if seen.voxwire_rejects != expected:
            verdict = "accepted" if expected else "rejected"
            failures.append(f"{verdict} ({seen.decoded}): {case.label}")
        elif not expected:
            unknown = case.kind == "unknown_type"
            wanted = UnknownMessage.__name__ if unknown else classes[str(case.message)]
            if seen.decoded != wanted:
                failures.append(f"decoded to {seen.decoded}, not {wanted}: {case.label}")
    assert not failures, _report(failures, len(rows), "voxwire's verdict is not the spec's")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_jsonschema_rejects_exactly_the_cases_that_break_a_rule_it_states(
    verdicts: dict[str, list[tuple[Case, Verdicts]]], protocol_id: str, dialect: str
) -> None:
    rows = verdicts[protocol_id]
    failures = [
        f"{'accepted' if seen.rejects(dialect) is False else 'rejected'}: {case.label}"
        for case, seen in rows
        if seen.rejects(dialect) != expected_rejects(case, dialect)
    ]
    assert not failures, _report(failures, len(rows), f"jsonschema ({dialect}) disagrees")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_nothing_voxwire_accepts_is_rejected_by_jsonschema(
    verdicts: dict[str, list[tuple[Case, Verdicts]]], protocol_id: str, dialect: str
) -> None:
    """The reverse direction, over the examples and every valid variant voxwire decodes."""
    allowed = {n for n, d in DISAGREEMENTS.items() if not d.voxwire_rejects and d.rejects(dialect)}
    accepted = [(case, seen) for case, seen in verdicts[protocol_id] if not seen.voxwire_rejects]
    assert len(accepted) > 500
    failures = [
        case.label
        for case, seen in accepted
        if seen.rejects(dialect) and not case.violations & allowed
    ]
    assert not failures, _report(failures, len(accepted), "voxwire accepts, jsonschema rejects")


@pytest.mark.parametrize("name", [n for n in DISAGREEMENTS if n != EXPRESSIBLE])
def test_each_listed_disagreement_happens_where_listed(
    verdicts: dict[str, list[tuple[Case, Verdicts]]], name: str
) -> None:
    """Every listed disagreement is produced by some case breaking that rule alone, and each of
    those cases gets exactly the listed verdicts (so the list cannot go stale)."""
    row = DISAGREEMENTS[name]
    alone = [
        (case, seen)
        for rows in verdicts.values()
        for case, seen in rows
        if case.violations == frozenset({name})
    ]
    assert alone, f"no case breaks only {name}: the corpus or the list is stale"
    for case, seen in alone:
        got = (seen.voxwire_rejects, seen.python_rejects, seen.ecma_rejects)
        assert got == (row.voxwire_rejects, row.python_rejects, row.ecma_rejects), case.label
    disagrees = len({row.voxwire_rejects, row.python_rejects, row.ecma_rejects}) == 2
    assert disagrees != (name in STATED_SINCE)


def test_the_listed_disagreements_are_what_not_expressible_names() -> None:
    named = {d.not_expressible for d in DISAGREEMENTS.values() if d.not_expressible}
    for prefix in named:
        assert [e for e in NOT_EXPRESSIBLE if e.startswith(prefix)], f"{prefix!r} is not listed"
    for entry in NOT_EXPRESSIBLE:
        matches = [p for p in named if entry.startswith(p)]
        assert len(matches) == 1, f"NOT_EXPRESSIBLE {entry!r} has no expected disagreement here"
    # A disagreement that is neither in NOT_EXPRESSIBLE nor a reported bug is a validator quirk.
    sides = {(True, True, True), (False, False, False)}
    quirks = [
        n
        for n, d in DISAGREEMENTS.items()
        if not d.not_expressible
        and (d.voxwire_rejects, d.python_rejects, d.ecma_rejects) not in sides
    ]
    assert quirks == ["pattern-trailing-newline"]


# -- rules the exporter once missed (each was a strict xfail until fixed) -------------------------


def _cases_breaking(verdicts: dict[str, list[tuple[Case, Verdicts]]], name: str) -> list[Any]:
    return [(c, s) for rows in verdicts.values() for c, s in rows if c.violations == {name}]


def test_schema_states_requires_rules_on_non_boolean_fields(
    verdicts: dict[str, list[tuple[Case, Verdicts]]],
) -> None:
    cases = _cases_breaking(verdicts, "requires-non-boolean")
    assert {c.message for c, _ in cases} == {"command.result", "screen.share"}
    assert [c.label for c, s in cases if not (s.python_rejects and s.ecma_rejects)] == []


def test_schema_states_min_bytes_1_as_min_length(
    verdicts: dict[str, list[tuple[Case, Verdicts]]],
) -> None:
    cases = _cases_breaking(verdicts, "min-bytes-without-min-length")
    assert cases
    assert [c.label for c, s in cases if not (s.python_rejects and s.ecma_rejects)] == []


def test_sender_union_accepts_unknown_types_where_voxwire_does(
    protocols: dict[str, Protocol], verdicts: dict[str, list[tuple[Case, Verdicts]]]
) -> None:
    for pid in PROTOCOLS:
        for sender in protocols[pid].senders:
            typed = validator(pid, sender.union_name, "python")
            assert not typed.is_valid({"type": UNKNOWN_TYPE})  # the typed union: known types only
            if not sender.accepts_unknown:
                continue
            anything = validator(pid, f"Any{sender.union_name}", "python")
            # A type of the protocol that this sender may not send stays out.
            others = {m.type for m in protocols[pid].messages} - {m.type for m in sender.messages}
            for t in sorted(others):
                assert not anything.is_valid({"type": t}), (pid, sender.id, t)
            example = next(m.examples[0].json for m in sender.messages)
            assert anything.is_valid({**example, "type": UNKNOWN_TYPE})
            envelope = {f.wire_name for f in sender.envelope}
            assert not anything.is_valid({"type": UNKNOWN_TYPE}) or not envelope
    cases = _cases_breaking(verdicts, "unknown-type-accepted")
    assert [c.label for c, s in cases if s.python_rejects or s.ecma_rejects] == []


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_message_schema_returns_a_valid_2020_12_schema(
    protocols: dict[str, Protocol], protocol_id: str
) -> None:
    for m in protocols[protocol_id].messages:
        schema = json_schema(protocol_id, m.type)
        Draft202012Validator.check_schema(schema)
        assert schema["$ref"] == f"#/$defs/{m.class_name}"


def test_at_most_one_of_three_fields_is_exported(protocols: dict[str, Protocol]) -> None:
    transfer = next(m for m in protocols["brisvox"].messages if m.type == "transfer")
    fields = tuple(f for f in transfer.fields if f.wire_name in ("summary", "reason", "id"))
    rule = Rule(
        kind="at_most_one_of", fields=fields, field=None, other=None, equals=None, count=None,
        code=None, description="At most one of summary, reason and id.",
    )  # fmt: skip
    constraint = jsonschema_export._rule(rule)
    assert constraint is not None
    check = Draft202012Validator(constraint)
    assert check.is_valid({"summary": "s"}) and check.is_valid({})
    assert not check.is_valid({"summary": "s", "reason": "r"})
    assert not check.is_valid({"id": "c1", "reason": "r"})


# -- 4. datamodel-code-generator as an independent oracle ----------------------------------------

ORACLE_LIMITATIONS = {
    # What datamodel-code-generator 0.89.0 drops when it writes msgspec Structs from our schema.
    # Only valid messages go through the oracle, so neither needs a workaround; the test below
    # checks each still holds, so the list cannot go stale.
    "additionalProperties": "`additionalProperties: false` (OVP SessionPatch) is not written "
    "forbid_unknown_fields=True, not even with --extra-fields forbid (its pydantic output does "
    "write extra='forbid'): the oracle's SessionPatch accepts unknown fields",
    "cross-field rules": "the rules across fields (allOf of oneOf / anyOf / not / if-then / "
    "minProperties) have no msgspec form and are dropped: the oracle's ToolResult takes both "
    "result and error",
}


def _generate_oracle(schema_path: Path, target: Path, name: str) -> ModuleType:
    command = [
        sys.executable, "-m", "datamodel_code_generator",
        "--input", str(schema_path), "--input-file-type", "jsonschema",
        "--output-model-type", "msgspec.Struct", "--output", str(target),
        "--disable-timestamp", "--formatters", "builtin",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    spec = importlib.util.spec_from_file_location(name, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # msgspec resolves the postponed annotations through it
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def oracles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ModuleType]]:
    """Each protocol's shipped schema.json run through datamodel-code-generator, once."""
    folder = tmp_path_factory.mktemp("oracle")
    out = {}
    for pid in PROTOCOLS:
        schema_path = folder / f"{pid}.schema.json"
        schema_path.write_text(_schema_file(pid).read_text(encoding="utf-8"), encoding="utf-8")
        out[pid] = _generate_oracle(schema_path, folder / f"oracle_{pid}.py", f"_oracle_{pid}")
    yield out
    for pid in PROTOCOLS:
        sys.modules.pop(f"_oracle_{pid}", None)


def omit_defaults(value: Any) -> Any:
    """``value`` with every field equal to its default unset, recursively.

    The one normalisation the comparison needs, applied to both sides. voxwire's Structs are
    ``omit_defaults``, so a field equal to its spec default mostly drops out of ``to_builtins``,
    while the oracle's Structs keep their defaults (``interrupt: false``, ``mode: "cold"``). And
    msgspec's omit_defaults compares by identity, so voxwire itself keeps a default that came
    from the wire as a new object (``"timeout_ms": 5000``, ``"speech_rate": 1``): compared by
    value here, on both sides, with each Struct's own default (the oracle's comes from the
    schema's ``default``). Tags, enums, null versus absent and numbers need nothing: the oracle
    reads ``type`` as a msgspec tag, to_builtins writes enums as their values, and both keep null
    apart from absent.
    """
    if isinstance(value, msgspec.Struct):
        changes = {}
        for f in msgspec.structs.fields(value):
            v = getattr(value, f.name)
            if f.default is not msgspec.NODEFAULT and _json_equal(v, f.default):
                changes[f.name] = msgspec.UNSET
            else:
                changes[f.name] = omit_defaults(v)
        return msgspec.structs.replace(value, **changes)
    if isinstance(value, list):
        return [omit_defaults(v) for v in value]
    return value


def _json_equal(a: Any, b: Any) -> bool:
    if a is msgspec.UNSET or b is msgspec.UNSET:
        return a is b
    a, b = msgspec.to_builtins(a), msgspec.to_builtins(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_the_oracle_has_a_model_for_every_message_type_and_union(
    protocols: dict[str, Protocol], oracles: dict[str, ModuleType], protocol_id: str
) -> None:
    protocol, oracle = protocols[protocol_id], oracles[protocol_id]
    for m in protocol.messages:
        model = getattr(oracle, m.class_name)
        config = model.__struct_config__
        assert (config.tag_field, config.tag) == ("type", m.type), m.class_name
    for t in protocol.structs:
        assert issubclass(getattr(oracle, t.name), msgspec.Struct)
    for sender in protocol.senders:
        assert hasattr(oracle, sender.union_name)


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_the_oracle_and_voxwire_decode_every_example_alike(
    protocols: dict[str, Protocol], oracles: dict[str, ModuleType], protocol_id: str
) -> None:
    protocol, oracle, codec = protocols[protocol_id], oracles[protocol_id], CODECS[protocol_id]
    compared = normalised = 0
    for m in protocol.messages:
        model = getattr(oracle, m.class_name)
        for index, example in enumerate(m.examples):
            raw = json.dumps(example.json).encode()
            theirs = msgspec.json.decode(raw, type=model)
            for sender_id in m.senders:
                ours = codec.decode(raw, sender=sender_id)
                expected = msgspec.to_builtins(omit_defaults(ours))
                # date-times compare by instant: the oracle keeps the text, voxwire a datetime
                assert json_equal(msgspec.to_builtins(omit_defaults(theirs)), expected), (
                    m.type,
                    index,
                )
                # The oracle's union of that sender picks the same message by its tag.
                union = getattr(oracle, protocol.sender(sender_id).union_name)
                picked = msgspec.json.decode(raw, type=union)
                assert type(picked).__name__ == m.class_name
                compared += 1
            # The normalisation is needed: some examples leave a default out, or write it.
            normalised += msgspec.to_builtins(theirs) != msgspec.to_builtins(omit_defaults(theirs))
    assert compared == sum(len(m.examples) * len(m.senders) for m in protocol.messages)
    assert normalised > 0


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_the_oracle_decodes_every_valid_variant_like_voxwire(
    oracles: dict[str, ModuleType],
    verdicts: dict[str, list[tuple[Case, Verdicts]]],
    protocol_id: str,
) -> None:
    """Beyond the examples: every case the spec calls valid (nulls, open enum values, bounds,
    defaults written out, unknown fields, optional fields removed or added...), read by the
    definition that judges it (a message, or a sender's union)."""
    oracle, codec = oracles[protocol_id], CODECS[protocol_id]
    valid = [c for c, _ in verdicts[protocol_id] if not c.violations]
    assert len(valid) > 500
    failures = []
    for case in valid:
        theirs = msgspec.json.decode(case.raw, type=getattr(oracle, case.schema))
        ours = codec.decode(case.raw, sender=case.sender)
        if not json_equal(
            msgspec.to_builtins(omit_defaults(theirs)), msgspec.to_builtins(omit_defaults(ours))
        ):
            failures.append(case.label)
    assert not failures, _report(failures, len(valid), "the oracle reads it otherwise")


@pytest.mark.parametrize("protocol_id", PROTOCOLS)
def test_encode_leaves_out_every_field_equal_to_its_default(
    verdicts: dict[str, list[tuple[Case, Verdicts]]], protocol_id: str
) -> None:
    codec = CODECS[protocol_id]
    failures = []
    for case, _ in verdicts[protocol_id]:
        if not case.violations and case.kind != "unknown_type":
            message = codec.decode(case.raw, sender=case.sender)
            written = json.loads(codec.encode(message))
            if written != msgspec.to_builtins(omit_defaults(message)):
                failures.append(f"{codec.encode(message)[:160]!r} from {case.label}")
    assert not failures, _report(failures, len(verdicts[protocol_id]), "a default is written")


@pytest.mark.parametrize("limitation", list(ORACLE_LIMITATIONS))
def test_the_oracle_limitations_listed_still_hold(
    oracles: dict[str, ModuleType], limitation: str
) -> None:
    if limitation == "additionalProperties":
        model = oracles["ovp"].SessionPatch
        assert load_schema("ovp")["$defs"]["SessionPatch"]["additionalProperties"] is False
        assert model.__struct_config__.forbid_unknown_fields is False
        patch = msgspec.json.decode(b'{"voice_id": "v", "surprise": 1}', type=model)
        assert patch.voice_id == "v"
    else:
        both = b'{"type":"tool.result","id":1,"result":1,"error":"e"}'
        assert load_schema("brisvox")["$defs"]["ToolResult"]["allOf"]
        decoded = msgspec.json.decode(both, type=oracles["brisvox"].ToolResult)
        assert decoded.result == 1 and decoded.error == "e"
        with pytest.raises(brisvox.ProtocolError):
            brisvox.decode(both, sender="agent")
