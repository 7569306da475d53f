"""The field values a flow's step shows (``fields: {seq: 0, reason: caller_hangup}``), checked
against the spec: each must be a field of the step's message (or frame) and a value it may carry,
so a diagram cannot show what the protocol refuses. They are drawn as ``name=value``."""

from __future__ import annotations

import json
import re
from typing import Any

from codegen.cases.validator import Validator
from codegen.ir import Frame, Message, Protocol

__all__ = ["ASIDE_WITH_VALUES", "field_problems", "frame_field_problems", "shown"]

ASIDE_WITH_VALUES = re.compile(r"\w=")
"""What an ``aside`` (free words beside the fields) may not hold: a ``name=value`` pair, which
belongs in ``fields`` where it is checked."""

_BARE = re.compile(r"^[A-Za-z0-9_.:+-]+$")


def field_problems(protocol: Protocol, message: Message, fields: dict[str, Any]) -> list[str]:
    """What is wrong with ``fields`` as values of ``message``: one line a field."""
    known = {f.wire_name: f for f in message.fields}
    validator = Validator(protocol)
    problems = []
    for name, value in fields.items():
        f = known.get(name)
        if f is None:
            problems.append(f"{message.type} has no field {name!r} (known: {', '.join(known)})")
            continue
        faults: list[tuple[str, str, str]] = []
        validator.field(value, f, name, faults)
        if faults:
            checks = ", ".join(sorted({check for _, check, _ in faults}))
            problems.append(
                f"{name}={shown(value)} is not a value of {message.type}.{name} ({checks})"
            )
    return problems


def frame_field_problems(frame: Frame, fields: dict[str, Any]) -> list[str]:
    """What is wrong with ``fields`` as header values of ``frame``."""
    header = {f.name: f for f in frame.header}
    problems = []
    for name, value in fields.items():
        f = header.get(name)
        if f is None:
            problems.append(
                f"{frame.name} has no header field {name!r} (known: {', '.join(header)})"
            )
            continue
        allowed = f.enum is not None and [v.value for v in f.enum.values]
        if isinstance(value, bool) or not isinstance(value, int):
            why = "not an integer"
        elif not 0 <= value < 2 ** (8 * f.size):
            why = f"does not fit a {f.kind}"
        elif f.const is not None and value != f.const:
            why = f"it is always {f.const}"
        elif allowed and value not in allowed:
            why = f"not one of {allowed}"
        elif f.flags and value & ~sum(1 << bit for bit, _, _ in f.flags):
            why = "sets a reserved bit"
        else:
            continue
        problems.append(f"{name}={shown(value)} is not a value of {frame.name}.{name}: {why}")
    return problems


def shown(value: Any) -> str:
    """A value as a diagram shows it: a plain word bare, any other text quoted, JSON else."""
    if isinstance(value, str) and _BARE.match(value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
