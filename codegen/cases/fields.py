"""The cases of each object's fields and rules: every object of a message with fields (a slot:
the message, or a nested type inside it), an unknown field in it, each field missing, null or of a
wrong type, each field's limits (:mod:`.limits`), and each rule across fields at its boundary.

A case is a mutation of an example message; it is written on the first example where it breaks
exactly the intended rule (:meth:`FieldCases.emit`), else skipped with the reason.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from codegen.cases.base import CaseBuilder, Mutation, json_path, json_text, lookup
from codegen.cases.limits import Limits
from codegen.cases.validator import MISSING, Fault, int_enum
from codegen.ir import Field, Message, Rule, TypeRef

__all__ = ["FieldCases"]

_Case = Callable[[str, Mutation, bool], None]
"""Adds a case of a rule across fields: its variant, the mutation, whether it breaks the rule."""


@dataclass(frozen=True)
class _Slot:
    """An object inside a message whose fields get cases: the message itself or a nested type."""

    path: tuple[str | int, ...]
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...]
    reject: bool
    owner: str
    """The message type or the type's name: what the spec's limit belongs to."""
    label: str
    """The id prefix of its fields (``tools[].``)."""


class FieldCases(CaseBuilder):
    def source(self, m: Message, slot: _Slot, f: Field | None, what: str) -> str:
        if slot.owner == m.type:
            item = f"messages {m.type}" + (f".{f.wire_name}" if f else "")
        else:
            item = f"types {slot.owner}" + (f".{f.wire_name}" if f else "")
            item += f" (at {m.type} {slot.label}{f.wire_name if f else ''})"
        return f"{self.spec} {item} {what}".rstrip()

    def slots(self, m: Message) -> list[tuple[_Slot, list[dict[str, Any]]]]:
        """Every object of ``m`` with fields, and the example messages that hold it."""
        out: list[tuple[_Slot, list[dict[str, Any]]]] = []
        root = _Slot((), m.fields, m.rules, False, m.type, "")
        todo = [root]
        while todo:
            slot = todo.pop(0)
            bases = self.bases(m, slot)
            if bases:
                out.append((slot, bases))
            else:
                self.skip(
                    "no example holds the object, and no example value of its type fits",
                    f"{m.type} {slot.label.rstrip('.')}",
                )
                continue
            for f in slot.fields:
                element = f.type.element
                if element.kind != "struct" or element.struct is None:
                    continue
                s = self.structs[element.struct]
                step: tuple[str | int, ...] = (
                    (f.wire_name, 0) if f.type.kind == "array" else (f.wire_name,)
                )
                suffix = "[]" if f.type.kind == "array" else ""
                todo.append(
                    _Slot(
                        slot.path + step,
                        s.fields,
                        s.rules,
                        s.reject_unknown_fields,
                        s.name,
                        f"{slot.label}{f.wire_name}{suffix}.",
                    )
                )
        return out

    def bases(self, m: Message, slot: _Slot) -> list[dict[str, Any]]:
        """The examples of ``m`` that hold the slot's object; else one given an example value."""
        found = [ex.json for ex in m.examples if isinstance(lookup(ex.json, slot.path), dict)]
        if found or not slot.path:
            return found
        for ex in m.examples:
            obj = copy.deepcopy(ex.json)
            if self.graft(m, obj, slot.path) and not self.judge(m, obj, json_text(obj)):
                return [obj]
        return []

    def graft(self, m: Message, obj: dict[str, Any], path: tuple[str | int, ...]) -> bool:
        """Give ``obj`` the objects along ``path`` from example values of their types."""
        container: Any = obj
        fields = m.fields
        steps = list(path)
        while steps:
            name = steps.pop(0)
            assert isinstance(name, str)
            f = next(x for x in fields if x.wire_name == name)
            struct = f.type.element.struct
            if struct is None or struct not in self.samples:
                return False
            if f.type.kind == "array":
                steps.pop(0)
                if not isinstance(container.get(name), list) or not container[name]:
                    container[name] = [copy.deepcopy(self.samples[struct])]
                container = container[name][0]
            else:
                if not isinstance(container.get(name), dict):
                    container[name] = copy.deepcopy(self.samples[struct])
                container = container[name]
            fields = self.structs[struct].fields
        return True

    def emit(
        self,
        case_id: str,
        m: Message,
        sender: str,
        slot: _Slot,
        bases: list[dict[str, Any]],
        mutate: Mutation,
        intended: Fault | None,
        source: str,
        covers: dict[str, Any] | None = None,
    ) -> bool:
        """Add the case on the first base where ``mutate`` breaks exactly what is intended.

        On failure ``self.reason`` says why no base would do.
        """
        self.reason = "it applies to no example"
        for base in bases:
            obj = copy.deepcopy(base)
            container = lookup(obj, slot.path)
            if not isinstance(container, dict) or not mutate(container):
                continue
            text = json_text(obj)
            faults = self.judge(m, obj, text)
            others = [f for f in faults if f != intended]
            if intended is None and not faults:
                expect = self.valid(m, obj)
            elif (
                intended is not None
                and intended in faults
                and all(f[2] == intended[2] for f in faults)
            ):
                expect = self.invalid(intended[2])
            else:
                if intended is not None and intended not in faults:
                    self.reason = "the value does not break the rule"
                elif all(f[1] == "too_large" for f in others):
                    self.reason = "the message limit binds before this one"
                else:
                    self.reason = "it breaks another rule wherever the examples allow it"
                continue
            self.add(case_id, "decode", sender, text, expect, source, covers)
            return True
        return False

    def slot_cases(self, m: Message, sender: str, slot: _Slot, bases: list[dict[str, Any]]) -> None:
        cpath = json_path(slot.path)
        prefix = f"{self.p.id}/decode/{m.type}/" + (
            slot.label.rstrip(".") + "/" if slot.label else ""
        )
        # An unknown field: ignored, or refused where the type rejects unknown fields.
        key = "conformance_unknown_field"

        def add_unknown(c: dict[str, Any]) -> bool:
            c[key] = 1
            return True

        if slot.reject:
            intended: Fault | None = (
                f"{cpath}.{key}",
                "unknown_field",
                self.codes["unknown_field"],
            )
            variant, why = "rejected", "unknown_fields: reject; decode_errors.unknown_field"
        else:
            intended, variant, why = None, "ignored", "unknown fields are ignored"
        if not self.emit(
            prefix + f"unknown-field/{variant}",
            m,
            sender,
            slot,
            bases,
            add_unknown,
            intended,
            self.source(m, slot, None, why),
            {"owner": slot.owner, "check": "unknown_field"},
        ):
            self.skip("an unknown field breaks another rule here", f"{slot.owner} unknown field")
        for f in slot.fields:
            self.field_cases(m, sender, slot, bases, f)
        for index, rule in enumerate(slot.rules):
            self.rule_cases(m, sender, slot, bases, index, rule)

    def seeds(self, slot: _Slot, bases: list[dict[str, Any]], f: Field) -> list[Any]:
        """Values ``f`` takes in the bases, then anywhere in the examples."""
        out = [
            c[f.wire_name]
            for base in bases
            if isinstance(c := lookup(base, slot.path), dict) and f.wire_name in c
        ]
        return out + self.field_samples.get((slot.owner, f.wire_name), [])

    def field_cases(
        self, m: Message, sender: str, slot: _Slot, bases: list[dict[str, Any]], f: Field
    ) -> None:
        name = f.wire_name
        fpath = f"{json_path(slot.path)}.{name}"
        prefix = f"{self.p.id}/decode/{m.type}/{slot.label}{name}/"
        # The bases that hold the field come first, so a mutation keeps its neighbours.
        # The smallest base that holds the field comes first, so a mutation keeps its
        # neighbours and the file stays small.
        ordered = sorted(bases, key=lambda b: (name not in lookup(b, slot.path), len(json_text(b))))
        wrong = self.codes["wrong_type"]

        def case(
            variant: str,
            mutate: Mutation,
            fault: tuple[str, str] | None,
            why: str,
            covers: dict[str, Any] | None = None,
            path: str = fpath,
        ) -> bool:
            intended = None if fault is None else (path, fault[0], fault[1])
            if covers is not None:
                covers = {"owner": slot.owner, "field": name, **covers}
            ok = self.emit(
                prefix + variant,
                m,
                sender,
                slot,
                ordered,
                mutate,
                intended,
                self.source(m, slot, f, why),
                covers,
            )
            if not ok:
                self.skip(self.reason, f"{m.type} {slot.label}{name} {variant}")
            return ok

        def put(value: Any) -> Mutation:
            def apply(c: dict[str, Any]) -> bool:
                c[name] = copy.deepcopy(value)
                return True

            return apply

        def put_item(value: Any) -> Mutation:
            def apply(c: dict[str, Any]) -> bool:
                current = c.get(name)
                rest = current[1:] if isinstance(current, list) else []
                c[name] = [copy.deepcopy(value), *rest]
                return True

            return apply

        def delete(c: dict[str, Any]) -> bool:
            return c.pop(name, MISSING) is not MISSING

        if f.required:
            case(
                "missing",
                delete,
                ("missing", self.codes["missing_field"]),
                "required; decode_errors.missing_field",
            )
        if f.nullable or f.type.kind == "any":
            case("null/valid", put(None), None, "nullable" if f.nullable else "any JSON value")
        else:
            case(
                "wrong-type/null",
                put(None),
                ("wrong_type", wrong),
                "not nullable; decode_errors.wrong_type",
            )
        seeds = self.seeds(slot, ordered, f)
        for variant, value in self.wrong_values(f.type, seeds):
            case(
                f"wrong-type/{variant}",
                put(value),
                ("wrong_type", wrong),
                f"type {_type_name(f.type)}; decode_errors.wrong_type",
            )
        limits = Limits(self, f, case, slot.owner)
        ref = f.type
        if ref.kind == "array" and ref.item is not None:
            items = [item for seed in seeds if isinstance(seed, list) for item in seed]
            for variant, value in self.wrong_values(ref.item, items):
                case(
                    f"item/wrong-type/{variant}",
                    put_item(value),
                    ("wrong_type", wrong),
                    f"items {_type_name(ref.item)}; decode_errors.wrong_type",
                    path=f"{fpath}[0]",
                )
            limits.array(seeds, put)
            if ref.item.kind not in ("struct", "object", "any"):
                limits.scalar(ref.item, items, put_item, element=True, path=f"{fpath}[0]")
        elif ref.kind == "map":
            if f.min_length is not None or f.max_length is not None:
                self.skip("map limits are not generated yet", f"{slot.owner}.{name}")
        else:
            limits.scalar(ref, seeds, put, element=False, path=fpath)

    def wrong_values(self, ref: TypeRef, seeds: list[Any]) -> list[tuple[str, Any]]:
        """Values of another JSON type than ``ref`` (none for ``any``)."""
        kind = ref.kind
        if kind == "enum":
            kind = "integer" if int_enum(ref) else "string"
        if kind in ("string", "datetime"):
            return [("number", 5)]
        if kind == "integer":
            whole = next((s for s in seeds if type(s) is int), 1)
            return [("string", str(whole)), ("boolean", True), ("float", float(whole))]
        if kind == "number":
            return [("string", "1"), ("boolean", True)]
        if kind == "boolean":
            return [("number", 1)]
        if kind in ("object", "struct", "map"):
            return [("array", [])]
        if kind == "array":
            return [("object", {})]
        return []

    def rule_cases(
        self,
        m: Message,
        sender: str,
        slot: _Slot,
        bases: list[dict[str, Any]],
        index: int,
        rule: Rule,
    ) -> None:
        cpath = json_path(slot.path)
        prefix = f"{self.p.id}/decode/{m.type}/{slot.label}rule/{index}/{rule.kind}/"
        code = rule.code or self.codes["invalid_value"]
        covers = {"owner": slot.owner, "check": f"rule:{rule.kind}", "rule": index}
        why = f"rules[{index}] {rule.kind}: {' '.join(rule.description.split())}"
        kind = "messages" if slot.owner == m.type else "types"
        source = f"{self.spec} {kind} {slot.owner} {why}; " + (
            f"rules[{index}].code" if rule.code else "decode_errors.invalid_value"
        )
        what = f"{slot.owner} rules[{index}] {rule.kind}"
        done = {"valid": False, "invalid": False}

        def case(variant: str, mutate: Mutation, broken: bool) -> None:
            intended = (cpath, f"rule:{rule.kind}", code) if broken else None
            if self.emit(
                prefix + variant, m, sender, slot, bases, mutate, intended, source, covers
            ):
                done["invalid" if broken else "valid"] = True
            else:
                self.skip(self.reason, f"{what} {variant}")

        def sample(f: Field) -> Any:
            if f.type.kind == "boolean":
                return True
            for value in self.seeds(slot, bases, f):
                if value is not None and value is not False:
                    return value
            return MISSING

        if rule.kind == "requires":
            made = self._requires_cases(rule, sample, case, what)
        else:
            made = self._count_cases(rule, slot, sample, case, what)
        if made and not (done["valid"] and done["invalid"]):
            self.skip("no boundary pair for the rule", what)

    def _requires_cases(
        self, rule: Rule, sample: Callable[[Field], Any], case: _Case, what: str
    ) -> bool:
        """A ``requires`` rule satisfied, broken, and not in force; ``False``: no example value
        sets the rule's fields (skipped, with that reason)."""
        assert rule.field is not None and rule.other is not None
        field, other = rule.field, rule.other
        value = sample(field)
        others = _other_choices(other, rule.equals)
        if value is MISSING or not others:
            self.skip("no example value sets the rule's fields", what)
            return False

        def requires(set_field: bool, other_value: Any) -> Mutation:
            def apply(c: dict[str, Any]) -> bool:
                c.pop(field.wire_name, None)
                if set_field:
                    c[field.wire_name] = copy.deepcopy(value)
                c[other.wire_name] = copy.deepcopy(other_value)
                return True

            return apply

        case("satisfied", requires(True, rule.equals), False)
        case("broken", requires(True, others[0]), True)
        case("unset", requires(False, others[0]), False)
        return True

    def _count_cases(
        self, rule: Rule, slot: _Slot, sample: Callable[[Field], Any], case: _Case, what: str
    ) -> bool:
        """A rule counting fields (``exactly_one_of``, ``min_fields``...) at and past its bound;
        ``False``: no example value sets enough of the rule's fields (skipped, with that reason)."""
        members = rule.fields or tuple(f for f in slot.fields if not f.required)
        values = {f.wire_name: sample(f) for f in members}
        names = [n for n, v in values.items() if v is not MISSING]

        def only(chosen: list[str]) -> Mutation:
            def apply(c: dict[str, Any]) -> bool:
                for f in members:
                    c.pop(f.wire_name, None)
                for n in chosen:
                    c[n] = copy.deepcopy(values[n])
                return True

            return apply

        if rule.kind == "min_fields":
            assert rule.count is not None
            if len(names) < rule.count:
                self.skip("no example value sets the rule's fields", what)
                return False
            case("at-limit", only(names[: rule.count]), False)
            case("under", only(names[: rule.count - 1]), True)
        else:
            for n in names:
                case(f"only-{n}", only([n]), False)
            case("none", only([]), rule.kind != "at_most_one_of")
            if len(names) > 1:
                case("two", only(names[:2]), rule.kind != "at_least_one_of")
        return True


def _type_name(ref: TypeRef) -> str:
    if ref.kind == "enum" and ref.enum is not None:
        return ref.enum.name
    if ref.kind == "struct" and ref.struct is not None:
        return ref.struct
    return ref.kind


def _other_choices(f: Field, equals: Any) -> list[Any]:
    """Valid values of ``f`` other than ``equals`` (to break a requires rule)."""
    if f.type.kind == "boolean":
        return [not equals]
    if f.type.kind == "enum" and f.type.enum is not None:
        return [v.value for v in f.type.enum.values if v.value != equals]
    return []
