"""The Python view of the IR: the classes, enums and checks a protocol's modules print.

Templates only loop over what this module and its siblings prepare and print it; every decision
about how a spec construct becomes Python is made there. This module makes the message, nested
type, field set and enum classes (each field's annotation, with the ``Meta`` constraints msgspec
enforces while decoding, and its default); :mod:`codegen.pychecks` writes the checks msgspec cannot
carry, :mod:`codegen.pyframes` the binary frame codecs, :mod:`codegen.pyroles` the roles' typed
send and ``on()`` API, and :mod:`codegen.pytext` spells docstrings, limits and literals for all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from codegen import names
from codegen.ir import Enum, Field, FieldSet, Protocol, TypeRef
from codegen.pychecks import CheckBuilder, PyCheck
from codegen.pytext import bound_literal, default_literal, docstring, limit_phrases

__all__ = [
    "PyClass",
    "PyEnum",
    "PyField",
    "PyModel",
    "build",
]


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
class PyModel:
    protocol: Protocol
    enums: list[PyEnum]
    structs: list[PyClass]
    messages: list[PyClass]
    checks: list[PyCheck]
    field_codes: list[tuple[str, str, str]]
    """(wire type, JSON path, error code) where a field's rules use their own code."""
    uses_meta: bool


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


class _Builder:
    def __init__(self, protocol: Protocol) -> None:
        self.p = protocol
        self.uses_meta = False
        self._field_set_classes = {fs.class_name for fs in protocol.field_sets}
        self.checks = CheckBuilder(protocol)

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
            check = self.checks.check(s.name, None, s.fields, s.rules)
            if check is not None:
                checks.append(check)
        for fs in self.p.field_sets:
            check = self.checks.check(fs.class_name, None, fs.fields, ())
            if check is not None:
                checks.append(check)
        message_checks: dict[str, PyCheck] = {}
        for m in self.p.messages:
            check = self.checks.check(
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
            field_codes=self.checks.field_codes(),
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
            (f.py_name, names.default_constant(name, f.py_name), default_literal(f))
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
                meta.append(f"ge={bound_literal(f.minimum)}")
            if f.maximum is not None:
                meta.append(f"le={bound_literal(f.maximum)}")
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
            meta.append(f"min_length={bound_literal(f.min_length)}")
        if f.max_length is not None:
            meta.append(f"max_length={bound_literal(f.max_length)}")
        return meta

    def _meta(self, base: str, meta: list[str]) -> str:
        if not meta:
            return base
        self.uses_meta = True
        return f"Annotated[{base}, Meta({', '.join(meta)})]"


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
