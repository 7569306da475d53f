"""The Python view of the IR: annotations, defaults and check bodies, ready to print.

Templates only loop over what this module prepares and print it; every decision about how a spec
construct becomes Python (a ``Meta`` constraint msgspec enforces while decoding, or a line of a
generated check) is made here.
"""

from __future__ import annotations

import json
import re
import struct
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from codegen import names
from codegen.ir import (
    JSON_SAFE_INTEGER,
    Bound,
    Constant,
    Enum,
    Field,
    FieldSet,
    Protocol,
    Rule,
    TypeRef,
)

__all__ = [
    "PyCheck",
    "PyClass",
    "PyEnum",
    "PyField",
    "PyFrame",
    "PyModel",
    "build",
    "build_frames",
    "docstring",
    "wrap",
]

LINE_LENGTH = 100
"""The line length of generated Python (pyproject.toml: tool.ruff.line-length)."""


@dataclass(frozen=True)
class PyField:
    attr: str
    annotation: str
    default: str | None
    """The right-hand side after ``=``, or ``None`` for a required field."""
    doc: list[str]


@dataclass(frozen=True)
class PyClass:
    name: str
    base: str
    tag: str | None
    doc: list[str]
    fields: list[PyField]
    reject_unknown: bool
    shared_defaults: list[tuple[str, str, str]]
    """(attribute, module constant, literal) of each default a value must be made identical to:
    msgspec's omit_defaults leaves a field out only when its value *is* the default object."""
    check: str | None = None
    """The check function a message runs whenever it is built (its ``__post_init__``)."""
    check_when: str | None = None
    """A condition on ``self`` that is false only where inline tests prove the rules hold, so
    the check is called only when it is true (it then names the problem, or finds none);
    ``None``: the check is always called."""


@dataclass(frozen=True)
class PyEnum:
    name: str
    base: str
    doc: list[str]
    members: list[tuple[str, str, list[str]]]
    """(member name, value literal, docstring lines)."""


@dataclass(frozen=True)
class PyCheck:
    function: str
    class_name: str
    message_type: str | None
    doc: list[str]
    body: list[str]
    """Indented lines of the function body."""
    rules: list[str]
    """The value rules of ``voxwire._rules`` the body calls."""
    fast: list[str] | None
    """Inline tests on ``self`` that, all true, prove the rules hold (``PyClass.check_when``)."""


@dataclass(frozen=True)
class PyModel:
    protocol: Protocol
    enums: list[PyEnum]
    structs: list[PyClass]
    messages: list[PyClass]
    checks: list[PyCheck]
    field_codes: list[tuple[str, str, str]]
    """(wire type, JSON path, error code) where a field's rules use their own code."""
    uses_meta: bool


def docstring(*parts: str) -> list[str]:
    """The paragraphs of a docstring, whitespace folded; the filter ``doc`` wraps them."""
    paragraphs = []
    for part in parts:
        for paragraph in part.strip().split("\n\n"):
            text = " ".join(paragraph.split())
            if text:
                paragraphs.append(text.replace('"""', "'''").replace("\\", "\\\\"))
    return paragraphs


def wrap(paragraphs: list[str], indent: int) -> list[str]:
    """Paragraphs as lines that fit the line length at ``indent``, a blank line between."""
    width = LINE_LENGTH - indent - 6  # room for the quotes at both ends
    lines: list[str] = []
    for paragraph in paragraphs:
        if lines:
            lines.append("")
        lines.extend(textwrap.wrap(paragraph, width, break_on_hyphens=False) or [""])
    return lines


def limit_phrases(f: Field, constant: Callable[[Constant], str], quote: str) -> list[str]:
    """The limits of ``f`` in words ("≤ 4096 UTF-8 bytes (MAX_LINE_BYTES)", "not blank").

    ``constant`` spells a constant (a name in a docstring, a link in the reference), ``quote``
    marks code ("``" in reST docstrings, "`" in Markdown).
    """

    def bound(value: Bound, unit: str) -> str:
        named = f" ({constant(value.constant)})" if value.constant is not None else ""
        return " ".join(part for part in (str(value.value), unit) if part) + named

    out = []
    unit_len = "characters" if f.type.kind == "string" else "items"
    if f.has_const:
        out.append(f"always {quote}{json.dumps(f.const)}{quote}")
    if f.minimum is not None and f.minimum.value != -JSON_SAFE_INTEGER:
        out.append("≥ " + bound(f.minimum, ""))
    if f.maximum is not None and f.maximum.value != JSON_SAFE_INTEGER:
        out.append("≤ " + bound(f.maximum, ""))
    for value, sign, unit in (
        (f.min_length, "≥", unit_len),
        (f.max_length, "≤", unit_len),
        (f.min_bytes, "≥", "UTF-8 bytes"),
        (f.max_bytes, "≤", "UTF-8 bytes"),
    ):
        if value is not None:
            out.append(f"{sign} {bound(value, unit)}")
    if f.pattern is not None:
        out.append(f"matches {quote}{f.pattern}{quote}")
    if f.not_blank:
        out.append("not blank")
    if f.unique_by is not None:
        out.append("unique" if f.unique_by == "value" else f"unique {quote}{f.unique_by}{quote}")
    if f.type.element.kind == "integer" and not out:
        out.append("a JSON-safe integer")
    return out


def build(protocol: Protocol) -> PyModel:
    """Prepare everything the templates of ``protocol`` print."""
    return _Builder(protocol).build()


def _literal(value: Any) -> str:
    if isinstance(value, str) and "\\" in value and not value.endswith("\\") and '"' not in value:
        return f'r"{value}"'
    return repr(value)


def _needs_shared_default(f: Field) -> bool:
    """Whether a value equal to ``f``'s default can be another object than the default.

    None, booleans, enum members and the small ints CPython caches are single objects; a float,
    a larger int or a string decoded from the wire is a new one, which omit_defaults (comparing
    by identity) would write back.
    """
    if not f.has_default or f.type.kind == "enum":
        return False
    value = f.default
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, int) and f.type.kind != "number":
        return not -5 <= value <= 256
    return isinstance(value, int | float | str)


def _default_literal(f: Field) -> str:
    """The default as Python writes it: a float for a number field, even when the spec says 0."""
    return repr(float(f.default)) if f.type.kind == "number" else repr(f.default)


def _bound(bound: Bound) -> str:
    if bound.constant is not None:
        return bound.constant.py_name
    if bound.value == JSON_SAFE_INTEGER:
        return names.JSON_SAFE_INTEGER
    if bound.value == -JSON_SAFE_INTEGER:
        return "-" + names.JSON_SAFE_INTEGER
    return repr(bound.value)


class _Builder:
    def __init__(self, protocol: Protocol) -> None:
        self.p = protocol
        self.error_codes = {e.code: e.py_name for e in protocol.errors}
        self.uses_meta = False
        self.structs = {s.name: s for s in protocol.structs}
        self._field_set_classes = {fs.class_name for fs in protocol.field_sets}
        self._members: dict[str, tuple[tuple[Field, ...], tuple[Rule, ...]]] = {
            **{s.name: (s.fields, s.rules) for s in protocol.structs},
            **{fs.class_name: (fs.fields, ()) for fs in protocol.field_sets},
            **{s.envelope_name: (s.envelope, ()) for s in protocol.senders if s.envelope_name},
            **{m.class_name: (m.fields, m.rules) for m in protocol.messages},
        }
        self._checked: dict[str, bool] = {}
        self._rules_called: set[str] = set()
        """The value rules the check being built calls."""

    # -- classes ------------------------------------------------------------------------------

    def build(self) -> PyModel:
        enums = [self._enum(e) for e in self.p.enums]
        structs = [
            self._class(
                s.name,
                names.OBJECT_BASE,
                None,
                docstring(s.description),
                s.fields,
                s.reject_unknown_fields,
            )
            for s in self.p.structs
        ]
        structs += [
            self._class(
                fs.class_name, names.OBJECT_BASE, None, self._field_set_doc(fs), fs.fields, False
            )
            for fs in self.p.field_sets
        ]
        structs += [  # a sender that includes several field sets: a class of them all
            self._class(
                s.envelope_name,
                names.OBJECT_BASE,
                None,
                docstring(f"The fields every message the {s.id} sends carries."),
                s.envelope,
                False,
            )
            for s in self.p.senders
            if s.envelope_name is not None and s.envelope_name not in self._field_set_classes
        ]
        messages = [
            self._class(
                m.class_name,
                f"{m.base.class_name}, {names.MESSAGE_BASE}"
                if m.base is not None
                else names.MESSAGE_BASE,
                m.type,
                docstring(m.summary, m.description, f"Sent by: {', '.join(m.senders)}."),
                m.own_fields,
                False,
                shared_from=m.fields,
            )
            for m in self.p.messages
        ]
        checks: list[PyCheck] = []
        for s in self.p.structs:
            check = self._check(s.name, None, s.fields, s.rules)
            if check is not None:
                checks.append(check)
        for fs in self.p.field_sets:
            check = self._check(fs.class_name, None, fs.fields, ())
            if check is not None:
                checks.append(check)
        message_checks: dict[str, PyCheck] = {}
        for m in self.p.messages:
            check = self._check(
                m.class_name, m.type, m.own_fields, m.rules, base=m.base, free_form=m.fields
            )
            if check is not None:
                checks.append(check)
                message_checks[m.class_name] = check
        return PyModel(
            protocol=self.p,
            enums=enums,
            structs=structs,
            messages=[_with_check(c, message_checks.get(c.name)) for c in messages],
            checks=checks,
            field_codes=self._field_codes(),
            uses_meta=self.uses_meta,
        )

    def _field_set_doc(self, fs: FieldSet) -> list[str]:
        senders = [u for u in fs.users if u in {s.id for s in self.p.senders}]
        if senders:
            who = f"Fields every message the {' and the '.join(senders)} sends carries"
        else:
            who = f"Fields the messages {', '.join(fs.users)} carry"
        unknown = any(
            s.accepts_unknown and s.envelope_name == fs.class_name for s in self.p.senders
        )
        return docstring(
            f"{who} (the ``{fs.name}`` field set).",
            "A message of a type this version does not know must still carry them: decoding "
            f"checks them before it returns an ``{names.UNKNOWN_MESSAGE}``."
            if unknown
            else "",
        )

    def _enum(self, e: Enum) -> PyEnum:
        return PyEnum(
            name=e.name,
            base="IntEnum" if e.is_int else "StrEnum",
            doc=docstring(
                e.description,
                "An open set: these are the known values; any string is accepted."
                if e.open
                else "",
            ),
            members=[(v.py_name, repr(v.value), docstring(v.description)) for v in e.values],
        )

    def _class(
        self,
        name: str,
        base: str,
        tag: str | None,
        doc: list[str],
        fields: tuple[Field, ...],
        reject: bool,
        shared_from: tuple[Field, ...] | None = None,
    ) -> PyClass:
        """``shared_from``: every field, inherited ones included (for the shared defaults)."""
        shared = [
            (f.py_name, names.default_constant(name, f.py_name), _default_literal(f))
            for f in (shared_from if shared_from is not None else fields)
            if _needs_shared_default(f)
        ]
        constants = {attr: constant for attr, constant, _ in shared}
        return PyClass(
            name=name,
            base=base,
            tag=tag,
            doc=doc,
            fields=[self._field(f, constants.get(f.py_name)) for f in fields],
            reject_unknown=reject,
            shared_defaults=shared,
        )

    def _field(self, f: Field, shared_default: str | None = None) -> PyField:
        annotation = self._annotation(f)
        default: str | None = None
        if shared_default is not None:
            default = shared_default
        elif f.has_default:
            if isinstance(f.default, list | dict):
                if f.default:
                    raise ValueError(
                        f"{f.wire_name}: only empty list/object defaults are supported"
                    )
                default = f"msgspec.field(default_factory={type(f.default).__name__})"
            elif (
                f.type.kind == "enum"
                and f.type.enum is not None
                and not f.type.enum.open
                and f.default is not None
            ):
                member = next(v.py_name for v in f.type.enum.values if v.value == f.default)
                default = f"{f.type.enum.name}.{member}"
            else:
                default = repr(f.default)
        elif not f.required:
            annotation += " | UnsetType"
            default = "UNSET"
        if f.nullable:
            annotation += " | None"
        if f.py_name != f.wire_name:
            if default is None:
                default = f'msgspec.field(name="{f.wire_name}")'
            elif default.startswith("msgspec.field("):
                default = default.replace(
                    "msgspec.field(", f'msgspec.field(name="{f.wire_name}", ', 1
                )
            else:
                default = f'msgspec.field(name="{f.wire_name}", default={default})'
        limits = limit_phrases(f, lambda c: c.py_name, "``")
        rule = f"Limits: {', '.join(limits)}." if limits else ""
        return PyField(f.py_name, annotation, default, docstring(f.description, rule))

    def _annotation(self, f: Field) -> str:
        ref = f.type
        if f.has_const:
            return f"Literal[{f.const!r}]"
        if ref.kind in ("array", "map"):
            assert ref.item is not None
            inner = self._scalar(ref.item, f, item=True)
            outer = f"list[{inner}]" if ref.kind == "array" else f"dict[str, {inner}]"
            return self._meta(outer, self._length_meta(f))
        return self._scalar(ref, f, item=False)

    def _scalar(self, ref: TypeRef, f: Field, *, item: bool) -> str:
        kind = ref.kind
        if kind == "string":
            meta = [] if item else self._length_meta(f)
            if f.pattern is not None:
                # msgspec searches with Python's re, whose $ also matches before a final newline.
                meta.append(f"pattern={_literal(f.pattern[:-1] + chr(92) + 'Z')}")
            return self._meta("str", meta)
        if kind in ("integer", "number"):
            meta = []
            if f.minimum is not None:
                meta.append(f"ge={_bound(f.minimum)}")
            if f.maximum is not None:
                meta.append(f"le={_bound(f.maximum)}")
            return self._meta("int" if kind == "integer" else "float", meta)
        if kind == "boolean":
            return "bool"
        if kind == "datetime":
            # msgspec parses RFC 3339 in C and checks the calendar; tz=True refuses a naive time.
            return self._meta("datetime", ["tz=True"])
        if kind == "object":
            return "dict[str, Any]"
        if kind == "any":
            return "Any"
        if kind == "enum":
            assert ref.enum is not None
            return "str" if ref.enum.open else ref.enum.name
        assert ref.struct is not None
        return ref.struct

    def _length_meta(self, f: Field) -> list[str]:
        meta = []
        if f.min_length is not None:
            meta.append(f"min_length={_bound(f.min_length)}")
        if f.max_length is not None:
            meta.append(f"max_length={_bound(f.max_length)}")
        return meta

    def _meta(self, base: str, meta: list[str]) -> str:
        if not meta:
            return base
        self.uses_meta = True
        return f"Annotated[{base}, Meta({', '.join(meta)})]"

    # -- checks -------------------------------------------------------------------------------

    def _needs(self, name: str) -> bool:
        """Whether a class has rules its typed decoding cannot carry (memoised)."""
        if name not in self._checked:
            fields, rules = self._members[name]
            self._checked[name] = bool(rules) or any(self._field_needs(f) for f in fields)
        return self._checked[name]

    def _field_needs(self, f: Field) -> bool:
        element = f.type.element
        own = f.max_bytes is not None or f.min_bytes is not None or f.not_blank
        own = own or f.unique_by is not None
        if element.kind == "struct" and element.struct is not None:
            return own or self._needs(element.struct)
        return own

    def _code(self, code: str | None, default: str) -> str:
        code_name = self.error_codes[code or self.p.decode_errors[default]]
        return f"{names.ERRORS_MODULE}.{names.ERROR_CODE}.{code_name}"

    def _free_form(self, ref: TypeRef) -> bool:
        """Whether a value of type ``ref`` may hold any JSON, nested to any depth."""
        if ref.kind in ("object", "any"):
            return True
        if ref.item is not None:
            return self._free_form(ref.item)
        if ref.kind == "struct" and ref.struct is not None:
            return any(self._free_form(f.type) for f in self._members[ref.struct][0])
        return False

    def _check(
        self,
        name: str,
        message_type: str | None,
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        base: FieldSet | None = None,
        free_form: tuple[Field, ...] = (),
    ) -> PyCheck | None:
        """A class's check; a message's also bounds the nesting of its free-form values
        (``free_form``: all its fields), which its typed decoding cannot bound."""
        deep = [f for f in free_form if self._free_form(f.type)]
        if not self._needs(name) and not deep:
            return None
        self._rules_called = set()
        body: list[str] = []
        if base is not None and self._needs(base.class_name):
            body.append(f"{names.check_function(base.class_name)}(value, path, message_type)")
        for f in fields:
            body.extend(self._field_lines(f))
        if rules:
            body.extend(self._rule_lines(fields, rules))
        for f in deep:
            body.extend(self._nesting_lines(f))
        what = f"``{message_type}``" if message_type else f"``{name}``"
        return PyCheck(
            function=names.check_function(name),
            class_name=name,
            message_type=message_type,
            doc=docstring(f"Check the rules of {what} that its typed decoding cannot carry."),
            body=body,
            rules=sorted(self._rules_called),
            fast=self._fast(fields, rules, base, deep),
        )

    # -- the inline tests a message's __post_init__ runs before its check ----------------------

    def _fast(
        self,
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        base: FieldSet | None,
        deep: list[Field],
    ) -> list[str] | None:
        """Tests on ``self``, each cheaper than its rule and true only where the rule holds
        (a text of at most limit/4 characters is within limit UTF-8 bytes); ``None`` when a
        rule has no such test (items of arrays, nested objects with checks of their own), and
        the check then always runs."""
        tests: list[str] = []
        if base is not None and self._needs(base.class_name):
            inherited = self._fast(self._members[base.class_name][0], (), None, [])
            if inherited is None:
                return None
            tests += inherited
        for f in fields:
            test = self._fast_field(f)
            if test is None:
                return None
            tests += test
        for r in rules:
            tests.append(self._fast_rule(fields, r))
        for f in deep:
            if f.type.kind == "struct":
                return None
            value = f"self.{f.py_name}"
            limit = self.p.max_nesting_depth
            rule = names.rule("free_form_problem")
            shallow = f'{rule}({value}, "$", ".{f.wire_name}", 2, {limit.py_name}) is None'
            if int(limit.value) > 2:  # a flat object in a field is 2 deep: one C call
                shallow = f"({names.rule('flat_object')}({value}) or {shallow})"
            tests.append(_or_absent(f, value, shallow))
        return tests

    def _fast_field(self, f: Field) -> list[str] | None:
        value = f"self.{f.py_name}"
        element = f.type.element
        if element.kind == "struct" and element.struct is not None and self._needs(element.struct):
            return None
        if f.type.kind in ("array", "map"):
            if element.kind == "string" and _text_rules(f):
                return None
            return [_or_absent(f, value, f"len({value}) < 2")] if f.unique_by else []
        if element.kind != "string" or f.has_const:
            return []
        tests = [_INLINE[rule].format(v=value, bound=bound) for rule, bound in _text_rules(f)]
        return [_or_absent(f, value, " and ".join(tests))] if tests else []

    def _fast_rule(self, fields: tuple[Field, ...], r: Rule) -> str:
        if r.kind in ("at_most_one_of", "exactly_one_of", "at_least_one_of", "min_fields"):
            candidates = r.fields if r.fields else tuple(f for f in fields if not f.required)
            count = " + ".join(
                "1" if f.required else f"(self.{f.py_name} is not UNSET)" for f in candidates
            )
            bound = {
                "at_most_one_of": "<= 1",
                "exactly_one_of": "== 1",
                "at_least_one_of": ">= 1",
                "min_fields": f">= {r.count}",
            }[r.kind]
            return f"{count} {bound}"
        assert r.field is not None and r.other is not None
        same = "is" if r.equals is None or isinstance(r.equals, bool) else "=="
        return (
            f"(self.{r.field.py_name} in (UNSET, None, False) "
            f"or self.{r.other.py_name} {same} {r.equals!r})"
        )

    def _nesting_lines(
        self, f: Field, owner: str = "value", where: str = "", depth: int = 2
    ) -> list[str]:
        """The bound on the nesting of a free-form value, found through nested objects; the
        message is 1 deep, its fields' values 2."""
        value = f"{owner}.{f.py_name}"
        where = f"{where}.{f.wire_name}"
        guard = _present(f, value)
        if f.type.kind == "struct" and f.type.struct is not None:
            inner = [
                line
                for g in self._members[f.type.struct][0]
                if self._free_form(g.type)
                for line in self._nesting_lines(g, value, where, depth + 1)
            ]
            if guard:
                return [f"if {' and '.join(guard)}:", *("    " + line for line in inner)]
            return inner
        limit = self.p.max_nesting_depth.py_name
        call = f'{self._rule("free_form_problem")}({value}, path, "{where}", {depth}, {limit})'
        code = self._code(None, "malformed")
        return [  # not `problem`: the other rules' problem is a str, this one a (path, detail)
            f"if {' and '.join([*guard, f'(too_deep := {call}) is not None'])}:",
            f"    raise {self._error}({code}, too_deep[1], path=too_deep[0], "
            "message_type=message_type)",
        ]

    @property
    def _error(self) -> str:
        """The exception the checks raise, spelled through the errors module."""
        return f"{names.ERRORS_MODULE}.{names.PROTOCOL_ERROR}"

    def _rule(self, function: str) -> str:
        """A value rule's function name, recorded for the check's imports."""
        self._rules_called.add(names.rule(function))
        return function

    def _raise(self, code: str, where: str, problem: str = "problem") -> str:
        path = f'f"{{path}}{where}"'
        error = self._error
        return f"raise {error}({code}, {problem}, path={path}, message_type=message_type)"

    def _chain(self, conditions: list[str], calls: list[str], code: str, where: str) -> list[str]:
        """``if <conditions> and (problem := a or b) is not None: raise ...``"""
        test = " and ".join([*conditions, f"(problem := {' or '.join(calls)}) is not None"])
        return [f"if {test}:", f"    {self._raise(code, where)}"]

    def _field_lines(self, f: Field) -> list[str]:
        """The checks of one field: a chain of rule calls per value, an item loop for arrays."""
        value = f"value.{f.py_name}"
        where = f".{f.wire_name}"
        guard = _present(f, value)
        invalid = self._code(f.code, "invalid_value")
        ref = f.type
        lines: list[str] = []
        if ref.kind in ("array", "map"):
            if f.unique_by is not None:
                keys = "item" if f.unique_by == "value" else f"item.{names.attribute(f.unique_by)}"
                lines += self._chain(
                    guard, [f"{self._rule('unique')}([{keys} for item in {value}])"], invalid, where
                )
            item_where = f"{where}[{{index}}]" if ref.kind == "array" else f"{where}.{{index}}"
            iterate = f"enumerate({value})" if ref.kind == "array" else f"{value}.items()"
            item = names.item_variable(f.py_name)  # one name per loop: each has its own type
            body = self._value_lines(f, item, item_where, invalid)
            if body:
                loop = [f"for index, {item} in {iterate}:", *("    " + line for line in body)]
                if guard:
                    loop = [f"if {' and '.join(guard)}:", *("    " + line for line in loop)]
                lines += loop
            return lines
        body = self._value_lines(f, value, where, invalid)
        if len(body) == 2 and body[0].startswith("if "):  # one chain: fold the guard in
            return [f"if {' and '.join([*guard, body[0][3:-1]])}:", body[1]]
        if body and guard:
            return [f"if {' and '.join(guard)}:", *("    " + line for line in body)]
        return body

    def _value_lines(self, f: Field, value: str, where: str, invalid: str) -> list[str]:
        """Checks of one value (the field, or one item of an array or map)."""
        calls: list[str] = []
        element = f.type.element
        if element.kind == "string" and not f.has_const:
            for rule, bound in _text_rules(f):
                arguments = value if bound is None else f"{value}, {bound}"
                calls.append(f"{self._rule(rule)}({arguments})")
        if calls:
            return self._chain([], calls, invalid, where)
        if element.kind == "struct" and element.struct is not None and self._needs(element.struct):
            return [
                f'{names.check_function(element.struct)}({value}, f"{{path}}{where}", message_type)'
            ]
        return []

    def _rule_lines(self, fields: tuple[Field, ...], rules: tuple[Rule, ...]) -> list[str]:
        lines: list[str] = []
        for r in rules:
            code = self._code(r.code, "invalid_value")
            if r.kind in ("at_most_one_of", "exactly_one_of", "at_least_one_of", "min_fields"):
                candidates = r.fields if r.fields else tuple(f for f in fields if not f.required)
                present = ", ".join(
                    f'"{f.wire_name}"'
                    if f.required
                    else f'*(("{f.wire_name}",) if value.{f.py_name} is not UNSET else ())'
                    for f in candidates
                )
                names_tuple = ", ".join(f'"{f.wire_name}"' for f in candidates)
                arguments = {
                    "at_most_one_of": f"({present},)",
                    "exactly_one_of": f"({present},), ({names_tuple},)",
                    "at_least_one_of": f"({present},), ({names_tuple},)",
                    "min_fields": f"({present},), {r.count}",
                }[r.kind]
                call = f"{self._rule(r.kind)}({arguments})"
            else:
                assert r.field is not None and r.other is not None
                f, other = r.field, r.other
                is_set = f"value.{f.py_name} not in (UNSET, None, False)"
                pair = f'("{f.wire_name}", "{other.wire_name}")'
                arguments = f"{is_set}, value.{other.py_name}, {r.equals!r}, {pair}"
                call = f"{self._rule('requires')}({arguments})"
            lines.append(f"if (problem := {call}) is not None:")
            detail = f'f"{{problem}}: {_escape(r.description)}"'
            lines.append(
                f"    raise {self._error}({code}, {detail}, path=path, message_type=message_type)"
            )
        return lines

    def _field_codes(self) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []

        def walk(fields: tuple[Field, ...], mtype: str, prefix: str, seen: tuple[str, ...]) -> None:
            for f in fields:
                path = f"{prefix}.{f.wire_name}"
                if f.code is not None:
                    out.append((mtype, path, f.code))
                element = f.type.element
                if element.kind == "struct" and element.struct and element.struct not in seen:
                    inner = self.structs[element.struct]
                    suffix = "[]" if f.type.kind == "array" else ""
                    walk(inner.fields, mtype, path + suffix, (*seen, element.struct))

        for m in self.p.messages:
            walk(m.fields, m.type, "$", ())
        return out


def _text_rules(f: Field) -> list[tuple[str, str | None]]:
    """The value rules of a text field (or of each text item), each with its bound if it has
    one, in the order the checks apply them."""
    rules: list[tuple[str, str | None]] = []
    if f.not_blank:
        rules.append(("not_blank", None))
    if f.min_bytes is not None:
        rules.append(("min_bytes", _bound(f.min_bytes)))
    if f.max_bytes is not None:
        rules.append(("max_bytes", _bound(f.max_bytes)))
    return rules


_INLINE: Final = {
    "not_blank": "{v} and not {v}.isspace()",
    "min_bytes": "len({v}) >= {bound}",  # a character is at least 1 UTF-8 byte
    "max_bytes": "len({v}) * 4 <= {bound}",  # and at most 4
}
"""Each text rule's inline test (``PyClass.check_when``), true only where the rule holds."""


def _or_absent(f: Field, value: str, test: str) -> str:
    """``test`` of field ``f``, or true when the field holds no value to check."""
    guard = _present(f, value)
    if not guard:
        return test
    absent = " or ".join(g.replace(" is not ", " is ") for g in guard)
    return f"({absent} or ({test}))" if " and " in test else f"({absent} or {test})"


def _with_check(c: PyClass, check: PyCheck | None) -> PyClass:
    if check is None:
        return c
    return replace(c, check=check.function, check_when=_unless(check.fast))


def _unless(tests: list[str] | None) -> str | None:
    """The condition under which a check must run: not all of ``tests`` hold."""
    if not tests:
        return None
    if len(tests) == 1 and tests[0].endswith(" is None") and " or " not in tests[0]:
        return tests[0].removesuffix(" is None") + " is not None"
    return f"not ({' and '.join(tests)})"


def _escape(text: str) -> str:
    return (
        " ".join(text.split())
        .replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("{", "{{")
        .replace("}", "}}")
    )


@dataclass(frozen=True)
class PyFrame:
    """A binary frame layout, ready to print as a struct-based codec."""

    name: str
    doc: list[str]
    size_constant: str
    header_struct: str
    size: int
    struct_format: str
    header: list[tuple[str, str, list[str]]]
    """(attribute, annotation, docstring lines) of each header field."""
    defaults: dict[str, str]
    payload: str
    fields: list[tuple[str, str, list[str]]]
    """(attribute, annotation, docstring lines) of the frame's fields in the constructor's
    order: the header's and the payload's required ones, then those with defaults (each group
    in wire order)."""
    payload_offset: int
    payload_size: int
    payload_doc: list[str]
    flags: list[tuple[str, str, int, list[str]]]
    """(constant name, property name, mask, docstring lines) of each named bit."""
    decode_lines: list[str]
    """Checks of the unpacked header values (names bound), before the payload is touched."""
    header_test: str
    """The same checks as one condition, true when the header breaks any of them."""
    read_test: str
    """``header_test`` for values read from a frame, which are never negative: a mask of low
    bits and values 0 to n are tested by one comparison each."""
    layout_struct: str
    layout_format: str
    """The whole frame as one ``struct`` format: the header, then the payload as bytes."""
    refusal: str
    error: str


def _present(f: Field, value: str) -> list[str]:
    """The conditions under which field ``f``, spelled ``value``, holds a value to check."""
    guard = []
    if not f.required and not f.has_default:
        guard.append(f"{value} is not UNSET")
    if f.nullable:
        guard.append(f"{value} is not None")
    return guard


def _frame_raise(code: str, detail: str, field: str) -> str:
    return f'    raise {names.PROTOCOL_ERROR}({code}, {detail}, path="{field}")'


_STRUCT_CODES = {"u8": "B", "u16": "H", "u32": "I"}


def build_frames(protocol: Protocol) -> list[PyFrame]:
    """The frame layouts of ``protocol`` as printable codecs."""
    error_names = {e.code: e.py_name for e in protocol.errors}
    frames = []
    for frame in protocol.frames:
        order = "<" if frame.byte_order == "little" else ">"
        code = f"{names.ERROR_CODE}." + error_names[frame.error]
        lines: list[str] = []
        tests: list[str] = []
        read_tests: list[str] = []
        header = []
        defaults = {}
        flag_specs = []
        for f in frame.header:
            annotation = "int"
            if f.const is not None:
                defaults[f.name] = repr(f.const)
                tests.append(f"{f.name} != {f.const}")
                read_tests.append(tests[-1])
                lines.append(f"if {tests[-1]}:")
                lines.append(
                    _frame_raise(code, f'f"{f.name} is {{{f.name}}}, not {f.const}"', f.name)
                )
            if f.flags:
                mask = sum(1 << bit for bit, _, _ in f.flags)
                defaults[f.name] = "0"
                tests.append(f"{f.name} & ~{mask:#04x}")
                low_bits = mask & (mask + 1) == 0
                read_tests.append(f"{f.name} > {mask:#04x}" if low_bits else tests[-1])
                lines.append(f"if {tests[-1]}:")
                lines.append(
                    _frame_raise(code, f'f"reserved bits set in {{{f.name}:#04x}}"', f.name)
                )
                for bit, flag, description in f.flags:
                    flag_specs.append((names.flag(flag), flag, 1 << bit, docstring(description)))
            if f.enum is not None:
                allowed = names.enum_values(f.enum.name)
                tests.append(f"{f.name} not in {allowed}")
                values = sorted(int(v.value) for v in f.enum.values)
                from_zero = values == list(range(len(values)))
                read_tests.append(f"{f.name} > {values[-1]}" if from_zero else tests[-1])
                lines.append(f"if {tests[-1]}:")
                detail = f'f"{f.name} {{{f.name}}} is not one of {{sorted({allowed})}}"'
                lines.append(_frame_raise(code, detail, f.name))
            header.append((f.name, annotation, docstring(f.description)))
        header_format = "".join(_STRUCT_CODES[f.kind] for f in frame.header)
        if frame.payload.offset != struct.calcsize(order + header_format) or (
            frame.payload.offset + frame.payload.size != frame.size
        ):
            raise ValueError(
                f"frame {frame.name}: the payload must fill the frame after the header"
            )
        payload = (
            frame.payload.name,
            "bytes | bytearray | memoryview",
            docstring(frame.payload.description),
        )
        fields = [f for f in header if f[0] not in defaults] + [payload]
        fields += [f for f in header if f[0] in defaults]
        frames.append(
            PyFrame(
                name=frame.name,
                doc=docstring(frame.description),
                size_constant=names.frame_size(frame.name),
                header_struct=names.frame_header(frame.name),
                size=frame.size,
                struct_format=order + header_format,
                header=header,
                defaults=defaults,
                payload=frame.payload.name,
                fields=fields,
                payload_offset=frame.payload.offset,
                payload_size=frame.payload.size,
                payload_doc=docstring(frame.payload.description),
                flags=flag_specs,
                decode_lines=lines,
                header_test=" or ".join(tests) or "False",
                read_test=" or ".join(read_tests) or "False",
                layout_struct=names.frame_layout(frame.name),
                layout_format=f"{order}{header_format}{frame.payload.size}s",
                refusal=names.frame_refusal(frame.name),
                error=code,
            )
        )
    return frames


@dataclass(frozen=True)
class PySend:
    """One typed send method of a role."""

    method: str
    class_name: str
    params: list[tuple[str, str, str | None]]
    """(keyword, annotation, default literal or ``None`` when required) of each argument."""
    doc: list[str]
    args: list[tuple[str, str]]
    """(keyword, the field's first sentence) of each argument, for the docstring."""


@dataclass(frozen=True)
class PyRole:
    """The typed API of one role: what it sends (one method each) and what its ``on()`` takes."""

    role: str
    sends_class: str
    receives_class: str
    sent_union: str
    """The union of what the role sends (the send hook's ``kind``)."""
    sent_types: str
    received_types: str
    sends: list[PySend]
    receives: list[tuple[str, str]]
    """(wire type, class) of each message the other end sends."""
    envelope: list[str]
    """The wire names of the fields the core fills on every message the role sends."""
    sends_doc: list[str]
    receives_doc: list[str]


@dataclass(frozen=True)
class PyRoles:
    roles: list[PyRole]
    type_imports: list[str]
    """The message module's names the signatures use."""
    uses_unset: bool
    uses_any_value: bool
    uses_datetime: bool


def build_roles(protocol: Protocol) -> PyRoles:
    """The typed API of both ends of ``protocol``: each sender is a role, the other its peer."""
    if len(protocol.senders) != 2:
        raise ValueError(f"{protocol.id}: a typed API needs exactly two senders")
    used: set[str] = set()
    annotations: list[str] = []
    roles = []
    for own, peer in (protocol.senders, protocol.senders[::-1]):
        envelope = {f.wire_name for f in own.envelope}
        sends = []
        for m in own.messages:
            if m.stamped:
                continue
            params = []
            args = []
            for f in m.fields:
                if f.wire_name in envelope or f.stamped:
                    continue
                annotation, default = _param(f, used)
                annotations.append(annotation)
                params.append((f.py_name, annotation, default))
                args.append((f.py_name, _first_sentence(f.description)))
            sends.append(
                PySend(
                    method=names.send_method(m.type),
                    class_name=m.class_name,
                    params=params,
                    doc=docstring(
                        m.summary,
                        f"Sends ``{m.type}`` (:class:`{m.class_name}`); the arguments are its "
                        "fields.",
                    ),
                    args=args,
                )
            )
            used.add(m.class_name)
        receives = [(m.type, m.class_name) for m in peer.messages]
        used.update(name for _, name in receives)
        filled = [f.wire_name for f in own.envelope]
        stamped = sorted(
            {
                f"{m.type}.{f.wire_name}"
                for m in own.messages
                if not m.stamped
                for f in m.fields
                if f.stamped
            }
        )
        core_sends = [m.type for m in own.messages if m.stamped]
        notes = []
        if filled:
            notes.append(f"The core fills the envelope ({', '.join(filled)}) of every message.")
        if stamped:
            notes.append(f"It fills these fields too: {', '.join(stamped)}.")
        if core_sends:
            notes.append(
                f"No method here for {', '.join(core_sends)}: the core sends them, or the "
                "adapter through methods of its own."
            )
        sends_doc = docstring(
            f"A typed send method for each message the {own.role} sends ({own.title}).",
            f"Each calls ``{names.SEND_HOOK}(kind, fields)``, which the adapter implements: its "
            "one send path, given the message class and the arguments that were passed (an "
            f"argument left ``UNSET`` is absent). {' '.join(notes)}",
        )
        receives_doc = docstring(
            f"The typed ``{names.ON}()`` of the {own.role}: a handler for each message type the "
            f"{peer.role} sends, called with that message.",
            f"A type the {peer.role} does not send (unknown, or one only the {own.role} sends) "
            f"raises ``ValueError`` at once; a known one goes to ``{names.ON_HOOK}(message_type, "
            "handler)``, which the adapter implements.",
        )
        roles.append(
            PyRole(
                role=own.role,
                sends_class=names.role_sends(own.role),
                receives_class=names.role_receives(own.role),
                sent_union=own.union_name,
                sent_types=names.union_types(own.union_name),
                received_types=names.union_types(peer.union_name),
                sends=sends,
                receives=receives,
                envelope=filled,
                sends_doc=sends_doc,
                receives_doc=receives_doc,
            )
        )
        used.update({own.union_name, names.union_types(own.union_name)})
        used.add(names.union_types(peer.union_name))
    text = " ".join(annotations)
    return PyRoles(
        roles=roles,
        type_imports=sorted(used),
        uses_unset="UNSET" in text or "UnsetType" in text,
        uses_any_value=re.search(r"\bAny\b", text) is not None,
        uses_datetime=re.search(r"\bdatetime\b", text) is not None,
    )


def _first_sentence(text: str) -> str:
    """The first sentence of a field's description (an ``Args:`` entry), as a docstring holds it."""
    (paragraph,) = docstring(text.split("\n\n")[0])
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _param(f: Field, used: set[str]) -> tuple[str, str | None]:
    """The annotation and default of ``f`` as a keyword argument of a typed send.

    The annotation is the plain type (the message's constraints are checked when it is
    encoded); a list or object default, which a signature cannot share, is ``UNSET`` (absent).
    """
    annotation = _plain(f.type, f, used)
    default: str | None = None
    if f.has_default and not isinstance(f.default, list | dict):
        enum = f.type.enum if f.type.kind == "enum" else None
        if enum is not None and not enum.open and f.default is not None:
            member = next(v.py_name for v in enum.values if v.value == f.default)
            default = f"{enum.name}.{member}"
        elif f.default is None:
            default = "None"
        else:
            default = _default_literal(f)
    elif not f.required:
        annotation += " | UnsetType"
        default = "UNSET"
    if f.nullable:
        annotation += " | None"
    return annotation, default


def _plain(ref: TypeRef, f: Field, used: set[str]) -> str:
    if f.has_const and ref is f.type:
        return f"Literal[{f.const!r}]"
    if ref.kind in ("array", "map"):
        assert ref.item is not None
        inner = _plain(ref.item, f, used)
        return f"list[{inner}]" if ref.kind == "array" else f"dict[str, {inner}]"
    if ref.kind == "enum":
        assert ref.enum is not None
        if ref.enum.open:
            return "str"
        used.add(ref.enum.name)
        return ref.enum.name
    if ref.kind == "struct":
        assert ref.struct is not None
        used.add(ref.struct)
        return ref.struct
    return {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "datetime": "datetime",
        "object": "dict[str, Any]",
        "any": "Any",
    }[ref.kind]
