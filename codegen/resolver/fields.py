"""The resolver's fields: type references, bounds, fields, rules across fields, nested types.

A field is resolved against what the earlier phases know (constants for its bounds, enums and
type names for its type, error codes for its code) and checked for what a JSON Schema cannot
say: a limit that suits its type, an anchored pattern, a default among the enum's values.
"""

from __future__ import annotations

import re
from typing import Any

from codegen import names
from codegen.ir import JSON_SAFE_INTEGER, Bound, Field, FieldSet, Rule, Struct, TypeRef
from codegen.loader import PathT
from codegen.resolver.ledger import Ledger

__all__ = ["PRIMITIVES", "FieldResolver"]

PRIMITIVES = ("string", "integer", "number", "boolean", "datetime", "object", "any")


class FieldResolver(Ledger):
    def _type_names(self) -> list[tuple[str, PathT]]:
        """Every enum's, type's and frame's name, with where it is spelled; each name once."""
        data = self.raw.data
        self.struct_names = {t["name"] for t in data.get("types", [])}
        named: list[tuple[str, PathT]] = [
            (x["name"], (key, i, "name"))
            for key in ("enums", "types", "frames")
            for i, x in enumerate(data.get(key, []))
        ]
        self._unique([n for n, _ in named], (), "type name", None, [w for _, w in named])
        return named

    def _field_sets(self) -> dict[str, tuple[Field, ...]]:
        """The fields of each field set; each set's class and users go to ``self.field_sets``."""
        data = self.raw.data
        field_sets = {
            name: tuple(
                self._field(f, ("field_sets", name, i), f"field set {name}")
                for i, f in enumerate(fields)
            )
            for name, fields in data.get("field_sets", {}).items()
        }
        users: dict[str, list[str]] = {name: [] for name in field_sets}
        for sender in data["senders"]:
            for name in sender.get("include", []):
                users.setdefault(name, []).append(sender["id"])
        for message in data["messages"]:
            for name in message.get("include", []):
                users.setdefault(name, []).append(message["type"])
        self.field_sets = {
            name: FieldSet(name, names.field_set_class(name), fields, tuple(users[name]))
            for name, fields in field_sets.items()
        }
        return field_sets

    def _structs(self) -> tuple[Struct, ...]:
        structs = tuple(
            self._struct(t, ("types", i)) for i, t in enumerate(self.raw.data.get("types", []))
        )
        self._check_struct_cycles(structs)
        return structs

    def _type_ref(self, spelled: str, item: str | None, values: str | None, path: PathT) -> TypeRef:
        if spelled == "array" or spelled == "map":
            inner = item if spelled == "array" else values
            key = "items" if spelled == "array" else "values"
            if inner is None:
                self.fail(path, f"{spelled} needs {key}")
                return TypeRef("any")
            return TypeRef(spelled, item=self._type_ref(inner, None, None, (*path[:-1], key)))
        if item is not None or values is not None:
            self.fail(path, f"items/values only go with array/map, not {spelled}")
        if spelled in PRIMITIVES:
            return TypeRef(spelled)
        if spelled in self.enums:
            return TypeRef("enum", enum=self.enums[spelled])
        if spelled in self.struct_names:
            return TypeRef("struct", struct=spelled)
        self.fail(path, f"unknown type {spelled!r}")
        return TypeRef("any")

    def _bound(self, value: int | float | str | None, path: PathT) -> Bound | None:
        if value is None:
            return None
        if isinstance(value, str):
            constant = self.constants.get(value)
            if constant is None:
                self.fail(path, f"unknown constant {value!r}")
                return None
            if not isinstance(constant.value, (int, float)) or isinstance(constant.value, bool):
                self.fail(path, f"constant {value!r} is not a number")
                return None
            return Bound(constant.value, constant)
        return Bound(value, None)

    def _field(self, f: dict[str, Any], path: PathT, owner: str) -> Field:
        ref = self._type_ref(f["type"], f.get("items"), f.get("values"), (*path, "type"))
        element = ref.element.kind
        limits = self._limits(f, ref, path)
        pattern = f.get("pattern")
        if pattern is not None:
            self._check_pattern(pattern, element, (*path, "pattern"))
        if f.get("not_blank") and element != "string":
            self.fail((*path, "not_blank"), "not_blank needs a string field")
        unique_by = f.get("unique_by")
        if unique_by is not None:
            self._check_unique_by(unique_by, ref, (*path, "unique_by"))
        self._code(f.get("code"), (*path, "code"))
        has_default = "default" in f
        enum = ref.enum if ref.kind == "enum" else None
        if (
            has_default
            and enum is not None
            and not enum.open
            and f["default"] not in [v.value for v in enum.values]
        ):
            self.fail((*path, "default"), f"default {f['default']!r} is not a value of {enum.name}")
        required = f.get("required", True) and not has_default
        if has_default and f.get("required") is True:
            self.fail((*path, "required"), "a field with a default is not required")
        return Field(
            wire_name=f["name"],
            py_name=names.attribute(f["name"]),
            type=ref,
            required=required,
            nullable=f.get("nullable", False),
            has_default=has_default,
            default=f.get("default"),
            has_const="const" in f,
            const=f.get("const"),
            minimum=limits["minimum"],
            maximum=limits["maximum"],
            min_length=limits["min_length"],
            max_length=limits["max_length"],
            min_bytes=limits["min_bytes"],
            max_bytes=limits["max_bytes"],
            pattern=pattern,
            not_blank=bool(f.get("not_blank")),
            unique_by=unique_by,
            code=f.get("code"),
            stamped=f.get("stamped", False),
            description=f["description"].strip(),
            source=f.get("source"),
            decisions=self._decisions(f, path, f"{owner}, field {f['name']}"),
        )

    def _limits(self, f: dict[str, Any], ref: TypeRef, path: PathT) -> dict[str, Bound | None]:
        """The field's bounds, each checked against its type; an integer without a range gets
        the JSON-safe one."""
        element = ref.element.kind
        limits = {
            key: self._bound(f.get(key), (*path, key))
            for key in ("minimum", "maximum", "min_length", "max_length", "min_bytes", "max_bytes")
        }
        for key in ("minimum", "maximum"):
            if limits[key] is not None and element not in ("integer", "number"):
                self.fail((*path, key), f"{key} needs an integer or number field, not {f['type']}")
        for key in ("min_bytes", "max_bytes"):
            if limits[key] is not None and element != "string":
                self.fail((*path, key), f"{key} needs a string field, not {f['type']}")
        for key in ("min_length", "max_length"):
            if limits[key] is not None and ref.kind not in ("string", "array", "map"):
                self.fail((*path, key), f"{key} needs a string, array or map field")
        if element == "integer":
            # Every integer is bounded; unbounded ones get the JSON-safe range.
            if limits["minimum"] is None:
                limits["minimum"] = Bound(-JSON_SAFE_INTEGER, None)
            if limits["maximum"] is None:
                limits["maximum"] = Bound(JSON_SAFE_INTEGER, None)
        return limits

    def _check_pattern(self, pattern: str, element: str, path: PathT) -> None:
        if element != "string":
            self.fail(path, "pattern needs a string field")
        elif not (pattern.startswith("^") and pattern.endswith("$")):
            self.fail(path, f"pattern {pattern!r} is not anchored (^...$)")
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                self.fail(path, f"bad regular expression: {exc}")

    def _check_unique_by(self, unique_by: str, ref: TypeRef, path: PathT) -> None:
        if ref.kind != "array":
            self.fail(path, "unique_by needs an array field")
        elif ref.element.kind == "struct":
            inner = next(t for t in self.raw.data["types"] if t["name"] == ref.element.struct)
            if unique_by not in {x["name"] for x in inner["fields"]}:
                self.fail(path, f"{ref.element.struct} has no field {unique_by!r}")
        elif unique_by != "value":
            self.fail(path, "an array of values is unique_by: value")

    def _fields(self, data: list[dict[str, Any]], path: PathT, owner: str) -> tuple[Field, ...]:
        return tuple(self._field(f, (*path, i), owner) for i, f in enumerate(data))

    def _rules(
        self, data: list[dict[str, Any]], fields: tuple[Field, ...], path: PathT
    ) -> tuple[Rule, ...]:
        by_name = {f.wire_name: f for f in fields}
        rules = []
        for i, r in enumerate(data):
            where = (*path, i)
            kind = r["kind"]
            needs = {
                "at_most_one_of": ("fields",),
                "exactly_one_of": ("fields",),
                "at_least_one_of": ("fields",),
                "requires": ("field", "other", "equals"),
                "min_fields": ("count",),
            }[kind]
            for key in needs:
                if key not in r:
                    self.fail(where, f"a {kind} rule needs {key}")
            picked = []
            for j, name in enumerate(r.get("fields", [])):
                if name not in by_name:
                    self.fail((*where, "fields", j), f"no field {name!r} here")
                else:
                    picked.append(by_name[name])
            for key in ("field", "other"):
                if key in r and r[key] not in by_name:
                    self.fail((*where, key), f"no field {r[key]!r} here")
            self._code(r.get("code"), (*where, "code"))
            rules.append(
                Rule(
                    kind=kind,
                    fields=tuple(picked),
                    field=by_name.get(r.get("field", "")),
                    other=by_name.get(r.get("other", "")),
                    equals=r.get("equals"),
                    count=r.get("count"),
                    code=r.get("code"),
                    description=r["description"].strip(),
                )
            )
        return tuple(rules)

    def _check_names(self, fields: tuple[Field, ...], paths: list[PathT]) -> None:
        self._unique([f.wire_name for f in fields], (), "field", None, paths)

    def _struct(self, t: dict[str, Any], path: PathT) -> Struct:
        fields = self._fields(t["fields"], (*path, "fields"), f"type {t['name']}")
        self._check_names(fields, [(*path, "fields", i) for i in range(len(fields))])
        return Struct(
            name=t["name"],
            description=t["description"].strip(),
            reject_unknown_fields=t.get("unknown_fields", "ignore") == "reject",
            fields=fields,
            rules=self._rules(t.get("rules", []), fields, (*path, "rules")),
            source=t.get("source"),
            decisions=self._decisions(t, path, f"type {t['name']}"),
        )

    def _check_struct_cycles(self, structs: tuple[Struct, ...]) -> None:
        graph = {
            s.name: {f.type.element.struct for f in s.fields if f.type.element.kind == "struct"}
            for s in structs
        }
        for index, s in enumerate(structs):
            stack, seen = list(graph[s.name]), set()
            while stack:
                name = stack.pop()
                if name == s.name:
                    self.fail(("types", index), f"type {s.name} contains itself")
                    break
                if name is not None and name not in seen:
                    seen.add(name)
                    stack.extend(graph.get(name, ()))
