"""The JSON Schema (2020-12) each protocol ships, whole or for one message."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = ["json_schema"]


def json_schema(protocol: str, message: str | None = None) -> dict[str, Any]:
    """The schema of ``protocol``, or a standalone schema of one message type (``say``).

    The standalone schema holds only the definitions the message needs. Raises ``KeyError``
    naming the known types for a type the protocol does not have.
    """
    # Beside the generated modules: the package's own folder in a wheel, generated/ in an
    # editable install, where the package's __init__.py is in runtime/ (docs/architecture.md).
    generated = Path(import_module(f"voxwire.{protocol}._api").__file__ or "")
    document: dict[str, Any] = json.loads(
        generated.with_name("schema.json").read_text(encoding="utf-8")
    )
    if message is None:
        return document
    types = import_module(f"voxwire.{protocol}").MESSAGE_TYPES
    if message not in types:
        raise KeyError(
            f"{protocol} has no message type {message!r}; known: {', '.join(sorted(types))}"
        )
    name = types[message].__name__
    return {
        "$schema": document["$schema"],
        "$id": document["$id"].removesuffix(".json") + f"/{message}.json",
        "title": f"{message} ({document['title']})",
        "$ref": f"#/$defs/{name}",
        "$defs": _reachable(document["$defs"], name),
    }


def _reachable(defs: dict[str, Any], root: str) -> dict[str, Any]:
    """The definitions ``root`` needs, itself included, in the document's order."""
    wanted: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(_refs(defs[name]))
    return {name: value for name, value in defs.items() if name in wanted}


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        found = [value["$ref"].rsplit("/", 1)[1]] if isinstance(value.get("$ref"), str) else []
        return found + [ref for child in value.values() for ref in _refs(child)]
    if isinstance(value, list):
        return [ref for child in value for ref in _refs(child)]
    return []
