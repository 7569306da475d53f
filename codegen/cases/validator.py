"""The spec's rules, read from the IR: a second, independent reading that judges every case.

:class:`Validator` lists every rule a JSON value breaks as a message, with its error code, without
running voxwire; :func:`canonical` is a valid message as its re-encoding reads.
"""

from __future__ import annotations

import copy
import enum
import json
import math
import re
from typing import Any

from codegen.ir import Field, Message, Protocol, Rule, TypeRef
from codegen.runtime_rules import json_equal

__all__ = ["MISSING", "Fault", "Validator", "canonical", "int_enum", "utf8_size"]


class _Missing(enum.Enum):
    MISSING = 0


MISSING = _Missing.MISSING

Fault = tuple[str, str, str]
"""(JSON path, check, error code) of one broken rule."""


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class Validator:
    """Judges a JSON value against a protocol's messages: every broken rule, with its code."""

    def __init__(self, protocol: Protocol) -> None:
        self.p = protocol
        self.codes = protocol.decode_errors
        self.structs = {s.name: s for s in protocol.structs}

    def message(self, obj: dict[str, Any], message: Message) -> list[Fault]:
        """Every fault of ``obj`` as a ``message`` (its type and sender are not judged)."""
        out: list[Fault] = []
        self.object(obj, message.fields, message.rules, False, "$", out)
        return out

    def object(
        self,
        obj: dict[str, Any],
        fields: tuple[Field, ...],
        rules: tuple[Rule, ...],
        reject: bool,
        path: str,
        out: list[Fault],
    ) -> None:
        known = {f.wire_name for f in fields} | ({"type"} if path == "$" else set())
        if reject:
            for key in obj:
                if key not in known:
                    out.append((f"{path}.{key}", "unknown_field", self.codes["unknown_field"]))
        for f in fields:
            where = f"{path}.{f.wire_name}"
            if f.wire_name not in obj:
                if f.required:
                    out.append((where, "missing", self.codes["missing_field"]))
                continue
            self.field(obj[f.wire_name], f, where, out)
        for rule in rules:
            if not self.rule_holds(obj, rule, fields):
                out.append((path, f"rule:{rule.kind}", rule.code or self.codes["invalid_value"]))

    def field(self, value: Any, f: Field, path: str, out: list[Fault]) -> None:
        if value is None:
            if not f.nullable and f.type.kind != "any":  # null is a JSON value too
                out.append((path, "wrong_type", self.codes["wrong_type"]))
            return
        ref = f.type
        if ref.kind in ("array", "map"):
            self.container(value, f, path, out)
            return
        self.value(value, ref, f, path, out, element=False)

    def container(self, value: Any, f: Field, path: str, out: list[Fault]) -> None:
        """An array or map field: its type, its length, each item, its uniqueness."""
        ref = f.type
        assert ref.item is not None
        if ref.kind == "array" and not isinstance(value, list):
            out.append((path, "wrong_type", self.codes["wrong_type"]))
            return
        if ref.kind == "map" and not isinstance(value, dict):
            out.append((path, "wrong_type", self.codes["wrong_type"]))
            return
        if f.max_length is not None and len(value) > f.max_length.value:
            out.append((path, "max_length", f.code or self.codes["too_many"]))
        if f.min_length is not None and len(value) < f.min_length.value:
            out.append((path, "min_length", f.code or self.codes["invalid_value"]))
        items = list(enumerate(value)) if isinstance(value, list) else list(value.items())
        for index, item in items:
            where = f"{path}[{index}]" if ref.kind == "array" else f"{path}.{index}"
            self.value(item, ref.item, f, where, out, element=True)
        if f.unique_by is not None and isinstance(value, list):
            keys = [
                json.dumps(
                    item if f.unique_by == "value" else item.get(f.unique_by),
                    sort_keys=True,
                )
                for item in value
                if f.unique_by == "value" or isinstance(item, dict)
            ]
            if len(set(keys)) != len(keys):
                out.append((path, "unique_by", f.code or self.codes["invalid_value"]))

    def value(
        self, value: Any, ref: TypeRef, f: Field, path: str, out: list[Fault], *, element: bool
    ) -> None:
        """One value of ``f``: the field itself, or an item of its array or map."""
        wrong = (path, "wrong_type", self.codes["wrong_type"])
        invalid = f.code or self.codes["invalid_value"]
        kind = ref.kind
        if kind == "any":
            return
        if not _has_type(value, ref):
            out.append(wrong)
            return
        if kind == "number" and isinstance(value, float) and not math.isfinite(value):
            out.append((path, "finite", invalid))
            return
        if f.has_const:
            if not json_equal(value, f.const):
                out.append((path, "const", invalid))
            return
        if kind == "string":
            for check in self.string_faults(value, f, element=element):
                out.append((path, check, invalid))
        elif kind in ("integer", "number"):
            if f.minimum is not None and value < f.minimum.value:
                out.append((path, "minimum", invalid))
            if f.maximum is not None and value > f.maximum.value:
                out.append((path, "maximum", invalid))
        elif kind == "enum":
            assert ref.enum is not None
            if not ref.enum.open and value not in [v.value for v in ref.enum.values]:
                out.append((path, "enum", invalid))
        elif kind == "struct":
            assert ref.struct is not None
            s = self.structs[ref.struct]
            self.object(value, s.fields, s.rules, s.reject_unknown_fields, path, out)

    def string_faults(self, text: str, f: Field, *, element: bool) -> list[str]:
        """The string rules of ``f`` that ``text`` breaks (lengths only for a string field)."""
        out = []
        if f.not_blank and (not text or text.isspace()):
            out.append("not_blank")
        if f.min_bytes is not None and utf8_size(text) < f.min_bytes.value:
            out.append("min_bytes")
        if f.max_bytes is not None and utf8_size(text) > f.max_bytes.value:
            out.append("max_bytes")
        if not element:
            if f.min_length is not None and len(text) < f.min_length.value:
                out.append("min_length")
            if f.max_length is not None and len(text) > f.max_length.value:
                out.append("max_length")
        if f.pattern is not None and re.fullmatch(f.pattern, text) is None:
            out.append("pattern")
        return out

    def rule_holds(self, obj: dict[str, Any], rule: Rule, fields: tuple[Field, ...]) -> bool:
        if rule.kind == "requires":
            assert rule.field is not None and rule.other is not None
            value = obj.get(rule.field.wire_name, MISSING)
            if value is MISSING or value is None or value is False:
                return True
            other = rule.other
            default = other.default if other.has_default else MISSING
            return json_equal(obj.get(other.wire_name, default), rule.equals)
        candidates = rule.fields or tuple(f for f in fields if not f.required)
        present = sum(1 for f in candidates if f.required or f.wire_name in obj)
        if rule.kind == "at_most_one_of":
            return present <= 1
        if rule.kind == "exactly_one_of":
            return present == 1
        if rule.kind == "at_least_one_of":
            return present >= 1
        assert rule.kind == "min_fields" and rule.count is not None
        return present >= rule.count


def int_enum(ref: TypeRef) -> bool:
    return ref.enum is not None and ref.enum.is_int


def _has_type(value: Any, ref: TypeRef) -> bool:
    """Whether ``value`` is of the JSON type of ``ref`` (not ``any``): null is of none."""
    kind = ref.kind
    if value is None:
        return False
    if kind in ("string", "datetime") or (kind == "enum" and not int_enum(ref)):
        return isinstance(value, str)
    if kind == "integer" or (kind == "enum" and int_enum(ref)):
        return not isinstance(value, bool) and isinstance(value, int)
    if kind == "number":
        return not isinstance(value, bool) and isinstance(value, int | float)
    if kind == "boolean":
        return isinstance(value, bool)
    return kind not in ("object", "struct") or isinstance(value, dict)


def canonical(obj: dict[str, Any], fields: tuple[Field, ...], protocol: Protocol) -> dict[str, Any]:
    """A valid object as its re-encoding reads: known fields only, those equal to their default
    left out."""
    structs = {s.name: s for s in protocol.structs}

    def value(v: Any, ref: TypeRef) -> Any:
        if v is None:
            return None
        if ref.kind == "array":
            assert ref.item is not None
            return [value(item, ref.item) for item in v]
        if ref.kind == "map":
            assert ref.item is not None
            return {k: value(item, ref.item) for k, item in v.items()}
        if ref.kind == "struct":
            assert ref.struct is not None
            return members(v, structs[ref.struct].fields)
        return copy.deepcopy(v)

    def members(o: dict[str, Any], fs: tuple[Field, ...]) -> dict[str, Any]:
        out = {"type": o["type"]} if "type" in o and fs is fields else {}
        for f in fs:
            if f.wire_name not in o:
                continue
            v = o[f.wire_name]
            if f.has_default and json_equal(v, f.default):
                continue
            out[f.wire_name] = value(v, f.type)
        return out

    return members(obj, fields)
