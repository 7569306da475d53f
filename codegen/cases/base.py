"""The case list the builders add to, and how a case is written and judged.

:class:`CaseBuilder` holds the protocol, the cases so far and the limits skipped (with why), the
example values each field and nested type takes, and the :class:`~.validator.Validator` that
judges each case; the families of cases (:mod:`.messages`, :mod:`.fields`, :mod:`.frames`) build
on it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

from codegen.cases.validator import MISSING, Fault, Validator, canonical, utf8_size
from codegen.ir import Field, Message, Protocol

__all__ = ["CaseBuilder", "Mutation", "json_path", "json_text", "lookup"]

Mutation = Callable[[dict[str, Any]], bool]
"""Changes a container object in place; ``False`` when it does not apply to this one."""


def json_text(obj: Any) -> str:
    """A message as a compact JSON text, non-ASCII written as itself (as the protocols send)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_path(path: Iterable[str | int]) -> str:
    """A path in a message as the cases name it (``$.tools[0].name``)."""
    out = "$"
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}"
    return out


def lookup(obj: Any, path: Iterable[str | int]) -> Any:
    """The value at ``path`` in ``obj``, or ``MISSING``."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or len(obj) <= step:
                return MISSING
        elif not isinstance(obj, dict) or step not in obj:
            return MISSING
        obj = obj[step]
    return obj


class CaseBuilder:
    """The cases of one protocol so far, and what every family of cases reads."""

    def __init__(self, protocol: Protocol) -> None:
        self.p = protocol
        self.v = Validator(protocol)
        self.codes = protocol.decode_errors
        self.structs = {s.name: s for s in protocol.structs}
        self.max = int(protocol.max_message_bytes.value)
        self.spec = protocol.spec_file
        self.cases: list[dict[str, Any]] = []
        self.ids: set[str] = set()
        self.skipped: dict[str, list[str]] = {}
        self.reason = ""
        self.samples: dict[str, dict[str, Any]] = {}
        """A struct's first value in any example."""
        self.field_samples: dict[tuple[str, str], list[Any]] = {}
        """Every value (owner, field) takes in the examples, in order."""
        for m in protocol.messages:
            for ex in m.examples:
                self._collect(ex.json, m.fields, m.type)

    def _collect(self, obj: dict[str, Any], fields: tuple[Field, ...], owner: str) -> None:
        for f in fields:
            if f.wire_name not in obj:
                continue
            value = obj[f.wire_name]
            self.field_samples.setdefault((owner, f.wire_name), []).append(value)
            element = f.type.element
            if element.kind != "struct" or element.struct is None or value is None:
                continue
            for item in value if f.type.kind == "array" else [value]:
                if isinstance(item, dict):
                    self.samples.setdefault(element.struct, item)
                    self._collect(item, self.structs[element.struct].fields, element.struct)

    def add(
        self,
        case_id: str,
        kind: str,
        sender: str | None,
        data: str | bytes,
        expect: dict[str, Any],
        source: str,
        covers: dict[str, Any] | None = None,
        frame: str | None = None,
    ) -> None:
        if case_id in self.ids:
            raise ValueError(f"codegen/vectors.py: duplicate case id {case_id}")
        self.ids.add(case_id)
        case: dict[str, Any] = {"id": case_id, "protocol": self.p.id, "kind": kind}
        if frame is not None:
            case["frame"] = frame
        if sender is not None:
            case["sender"] = sender
        if isinstance(data, bytes) and kind == "frame":
            case["input"] = {"hex": data.hex()}
        elif isinstance(data, bytes):
            case["input"] = {"base64": base64.b64encode(data).decode("ascii")}
        else:
            case["input"] = {"text": data}
        case["expect"] = expect
        case["source"] = source
        if covers is not None:
            case["covers"] = covers
        self.cases.append(case)

    def skip(self, reason: str, what: str) -> None:
        found = self.skipped.setdefault(reason, [])
        if what not in found:
            found.append(what)

    def valid(self, m: Message, obj: dict[str, Any]) -> dict[str, Any]:
        return {"valid": True, "type": m.type, "value": canonical(obj, m.fields, self.p)}

    @staticmethod
    def invalid(code: str) -> dict[str, Any]:
        return {"valid": False, "code": code}

    def judge(self, m: Message, obj: dict[str, Any], text: str) -> list[Fault]:
        faults = self.v.message(obj, m)
        if utf8_size(text) > self.max:
            faults.append(("$", "too_large", self.codes["too_large"]))
        return faults
