"""JSON Schema 2020-12 of every message, nested type, enum and sender union of a protocol.

The schema is built from the IR, not from the Structs, so it is a second, independent reading of
the spec. What JSON Schema cannot say is listed in ``NOT_EXPRESSIBLE`` and in the schema's
``$comment``.
"""

from __future__ import annotations

from typing import Any

from codegen.ir import Field, Protocol, Rule, TypeRef

__all__ = ["NOT_EXPRESSIBLE", "export_schema", "message_schema"]

NOT_EXPRESSIBLE = (
    "limits in UTF-8 bytes (maxLength counts characters; x-max-bytes records the limit)",
    "blank text: not_blank is approximated by the pattern \\S, whose whitespace is ECMA-262's",
    "uniqueness of one field of array items (unique_by; x-unique-by records it)",
    "integers written with a fraction or exponent (1.0, 1e2): JSON Schema calls them integers",
    "the largest message, counted on the encoded bytes",
    "a rule that a set field must be true rather than present (requires on non-booleans)",
)

_PRIMITIVE = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "any": {},
}


def export_schema(protocol: Protocol) -> dict[str, Any]:
    """One schema document: ``$defs`` hold every definition; each sender's union is a oneOf."""
    defs: dict[str, Any] = {}
    for enum in protocol.enums:
        values = [v.value for v in enum.values]
        base: dict[str, Any] = {"description": enum.description}
        if enum.open:
            base.update({"type": "string", "examples": values})
        else:
            base["enum"] = values
        defs[enum.name] = base
    for struct in protocol.structs:
        defs[struct.name] = _object(
            struct.description, struct.fields, struct.rules, struct.reject_unknown_fields, None
        )
    for message in protocol.messages:
        defs[message.class_name] = _object(
            message.summary, message.fields, message.rules, False, message.type
        )
    for sender in protocol.senders:
        defs[sender.union_name] = {
            "description": f"Every message the {sender.id} may send.",
            "oneOf": [{"$ref": f"#/$defs/{m.class_name}"} for m in sender.messages],
        }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://voxwire.invalid/schema/{protocol.id}.json",
        "$comment": (
            f"Generated from {protocol.spec_file} (sha256 {protocol.spec_sha256}). Not expressible "
            "here, enforced by voxwire: " + "; ".join(NOT_EXPRESSIBLE) + "."
        ),
        "title": f"{protocol.title} {protocol.version}",
        "description": protocol.description,
        "$defs": defs,
    }


def message_schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    """A standalone schema for one definition of ``document`` (a message, type or union)."""
    return {
        "$schema": document["$schema"],
        "$id": f"{document['$id']}#{name}",
        "$ref": f"#/$defs/{name}",
        "$defs": document["$defs"],
    }


def _object(
    description: str,
    fields: tuple[Field, ...],
    rules: tuple[Rule, ...],
    reject: bool,
    tag: str | None,
) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    if tag is not None:
        properties["type"] = {"const": tag}
        required.append("type")
    for f in fields:
        properties[f.wire_name] = _field(f)
        if f.required:
            required.append(f.wire_name)
    schema: dict[str, Any] = {
        "type": "object",
        "description": " ".join(description.split()),
        "properties": properties,
    }
    if required:
        schema["required"] = required
    if reject:
        schema["additionalProperties"] = False
    constraints = [c for c in (_rule(r) for r in rules) if c]
    if constraints:
        schema["allOf"] = constraints
    return schema


def _field(f: Field) -> dict[str, Any]:
    if f.has_const:
        schema: dict[str, Any] = {"const": f.const}
    elif f.type.kind in ("array", "map"):
        assert f.type.item is not None
        item = _value(f.type.item, f)
        if f.type.kind == "array":
            schema = {"type": "array", "items": item}
            if f.min_length is not None:
                schema["minItems"] = f.min_length.value
            if f.max_length is not None:
                schema["maxItems"] = f.max_length.value
            if f.unique_by == "value":
                schema["uniqueItems"] = True
            elif f.unique_by is not None:
                schema["x-unique-by"] = f.unique_by
        else:
            schema = {"type": "object", "additionalProperties": item}
            if f.min_length is not None:
                schema["minProperties"] = f.min_length.value
            if f.max_length is not None:
                schema["maxProperties"] = f.max_length.value
    else:
        schema = _value(f.type, f)
        if f.type.kind == "string":
            if f.min_length is not None:
                schema["minLength"] = f.min_length.value
            if f.max_length is not None:
                schema["maxLength"] = min(
                    f.max_length.value, schema.get("maxLength", f.max_length.value)
                )
    if f.nullable:
        schema = {"anyOf": [schema, {"type": "null"}]}
    schema["description"] = " ".join(f.description.split())
    if f.has_default:
        schema["default"] = f.default
    return schema


def _value(ref: TypeRef, f: Field) -> dict[str, Any]:
    """The schema of one value of ``f`` (the field, or an item of it)."""
    if ref.kind == "enum":
        assert ref.enum is not None
        return {"$ref": f"#/$defs/{ref.enum.name}"}
    if ref.kind == "struct":
        return {"$ref": f"#/$defs/{ref.struct}"}
    schema = dict(_PRIMITIVE[ref.kind])
    if ref.kind == "string":
        patterns = [p for p in (f.pattern, r"\S" if f.not_blank else None) if p]
        if len(patterns) == 1:
            schema["pattern"] = patterns[0]
        elif patterns:
            schema["allOf"] = [{"pattern": p} for p in patterns]
        if f.min_bytes is not None:
            schema["x-min-bytes"] = f.min_bytes.value
        if f.max_bytes is not None:
            schema["x-max-bytes"] = f.max_bytes.value
            # A string of more characters than the byte limit breaks it too.
            schema["maxLength"] = f.max_bytes.value
    if ref.kind in ("integer", "number"):
        if f.minimum is not None:
            schema["minimum"] = f.minimum.value
        if f.maximum is not None:
            schema["maximum"] = f.maximum.value
    return schema


def _rule(rule: Rule) -> dict[str, Any] | None:
    names = [f.wire_name for f in rule.fields]
    if rule.kind == "at_most_one_of":
        return {"not": {"required": names}} if len(names) == 2 else None
    if rule.kind == "exactly_one_of":
        return {"oneOf": [{"required": [n]} for n in names]}
    if rule.kind == "at_least_one_of":
        return {"anyOf": [{"required": [n]} for n in names]}
    if rule.kind == "min_fields":
        return {"minProperties": rule.count}
    if rule.kind == "requires" and rule.field is not None and rule.other is not None:
        if rule.field.type.kind != "boolean":
            return None
        return {
            "if": {
                "properties": {rule.field.wire_name: {"const": True}},
                "required": [rule.field.wire_name],
            },
            "then": {
                "properties": {rule.other.wire_name: {"const": rule.equals}},
                "required": [rule.other.wire_name],
            },
        }
    return None
