"""Read a spec file: YAML with line numbers, checked against the spec format's JSON Schema.

Every problem is collected, never raised one at a time, and each names the file, the line and the
YAML path, so a spec author fixes them all in one pass.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

__all__ = ["FORMAT_SCHEMA", "Problem", "RawSpec", "SpecError", "format_path", "load"]

FORMAT_SCHEMA = Path(__file__).resolve().parent.parent / "spec" / "spec-format.schema.json"

PathT = tuple[str | int, ...]

ANCHORED = r"^\^.*\$$"
"""The format schema's pattern for a field's ``pattern``: an anchored regular expression."""


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with a spec file."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}: {where}{self.message}"


class SpecError(Exception):
    """A spec that cannot be used; ``problems`` lists every reason, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass
class RawSpec:
    """A spec file's data, with the line of every YAML path, before it is resolved."""

    path: Path
    display: str
    data: dict[str, Any]
    sha256: str
    lines: dict[PathT, int] = field(repr=False)

    def line(self, path: PathT) -> int:
        """The line of ``path``, or of its nearest ancestor the file spells out."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    def problem(self, path: PathT, message: str) -> Problem:
        return Problem(self.display, self.line(path), format_path(path), message)


def format_path(path: PathT) -> str:
    """``('messages', 3, 'fields', 0)`` as ``messages[3].fields[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load(path: Path, display: str | None = None, schema: Path = FORMAT_SCHEMA) -> RawSpec:
    """Read and check one spec file against ``schema`` (the spec format's, unless another one's,
    such as the flows'); raise :class:`SpecError` with every problem."""
    shown = display or str(path)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise SpecError([Problem(shown, 1, "", f"cannot read the spec: {exc.strerror}")]) from None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = blob.count(b"\n", 0, exc.start) + 1
        byte = blob[exc.start]
        problem = Problem(shown, line, "", f"not UTF-8: {exc.reason} (byte 0x{byte:02x})")
        raise SpecError([problem]) from None
    problems: list[Problem] = []
    try:
        node, data = _parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = getattr(exc, "problem", None) or str(exc)
        context, where = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and where is not None and where.line + 1 != line:
            # An unclosed bracket or quote is noticed lines later: say where it was opened.
            reason += f" ({context} at line {where.line + 1})"
        raise SpecError([Problem(shown, line, "", f"bad YAML: {reason}")]) from None
    lines: dict[PathT, int] = {}
    if node is not None:
        _index(node, (), lines, problems, shown)
    if not isinstance(data, dict):
        raise SpecError([Problem(shown, 1, "", "the spec must be a YAML mapping")])
    raw = RawSpec(path, shown, data, hashlib.sha256(blob).hexdigest(), lines)
    for error in _validator(schema).iter_errors(data):
        location: PathT = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and error.validator_value is False:
            # One problem per unknown key, on the key's own line.
            known = error.schema.get("properties", {})
            for key in error.instance:
                if key not in known:
                    problems.append(raw.problem((*location, key), f"unknown key {key!r}"))
            continue
        problems.append(raw.problem(location, _schema_message(error)))
    if problems:
        raise SpecError(problems)
    return raw


def _parse(text: str) -> tuple[yaml.Node | None, Any]:
    """The YAML's node tree (for line numbers) and its data, parsed once: by libyaml where PyYAML
    has it (ten times faster); a problem is reported by the pure-Python parser, which says most."""
    if yaml.__with_libyaml__:
        try:
            return _parse_with(yaml.CSafeLoader, text)
        except yaml.YAMLError:
            pass
    return _parse_with(yaml.SafeLoader, text)


def _parse_with(loader_class: Any, text: str) -> tuple[yaml.Node | None, Any]:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        return node, None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


@cache
def _validator(path: Path) -> jsonschema.Draft202012Validator:
    schema = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _schema_message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, made short and specific for a spec author."""
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed", "unknown key(s)")
    if error.validator in ("oneOf", "anyOf") and error.context:
        # Say what the closest alternative wanted, not that none matched.
        best = min(error.context, key=lambda e: len(list(e.absolute_schema_path)))
        return _schema_message(best)
    if error.validator == "pattern" and error.validator_value == ANCHORED:
        return f"pattern {error.instance!r} is not anchored (^...$)"
    if error.validator == "required":
        return error.message.replace("is a required property", "is required")
    message = error.message
    return message if len(message) <= 160 else message[:157] + "..."


def _index(
    node: yaml.Node, path: PathT, lines: dict[PathT, int], problems: list[Problem], shown: str
) -> None:
    """Record the line of every path, and refuse duplicate keys (YAML would keep the last)."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    Problem(
                        shown,
                        line,
                        format_path((*path, key)),
                        f"duplicate key {key!r} (first at line {seen[key]})",
                    )
                )
            seen[key] = line
            _index(value_node, (*path, key), lines, problems, shown)
            lines[(*path, key)] = line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, (*path, index), lines, problems, shown)
