"""Check every example of a spec against its message's definition, with file and line.

The definition is the JSON Schema the spec exports (types, required fields, enums, patterns,
ranges, lengths, cross-field rules). What JSON Schema cannot express (UTF-8 byte limits, blank
text, unique_by, integers written 1.0) is held to the generated decoders by the test suite, which
decodes every example.
"""

from __future__ import annotations

import jsonschema

from codegen.ir import Protocol
from codegen.jsonschema_export import export_schema
from codegen.loader import Problem, RawSpec

__all__ = ["check_examples"]


def check_examples(protocol: Protocol, raw: RawSpec) -> list[Problem]:
    """Every way an example breaks its message's schema; empty when all are valid."""
    document = export_schema(protocol)
    problems = []
    by_type = {m.type: m for m in protocol.messages}
    for i, item in enumerate(raw.data["messages"]):
        message = by_type[item["type"]]
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"#/$defs/{message.class_name}", "$defs": document["$defs"]}
        )
        for j, example in enumerate(item["examples"]):
            for error in validator.iter_errors(example["json"]):
                where = ("messages", i, "examples", j, "json", *error.absolute_path)
                problems.append(
                    raw.problem(where, f"example breaks {message.type}: {_short(error)}")
                )
    return problems


def _short(error: jsonschema.ValidationError) -> str:
    rule = error.schema.get("description") if isinstance(error.schema, dict) else None
    if error.validator in ("anyOf", "oneOf", "not", "minProperties") and rule:
        return f"breaks the rule: {rule}"  # a cross-field rule: its own words, not jsonschema's
    message = error.message
    return message if len(message) <= 160 else message[:157] + "..."
