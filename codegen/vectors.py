"""Conformance vectors from the spec: examples, every limit's boundary pair, every decode error.

The expected outcome of every case is derived from the IR (the small validator below is a second,
independent reading of the spec's rules), never by running voxwire. A case is emitted only when
that reading gives it exactly one outcome: a valid case breaks nothing, an invalid one breaks the
intended rule and nothing with another error code. A limit that cannot be reached without breaking
another rule is skipped and listed, with its reason, in the file's header line.

Output is JSON Lines (docs/conformance.md): the header object, then one case a line.
"""

from __future__ import annotations

import base64
import copy
import enum
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from codegen.ir import Bound, Field, Frame, Message, Protocol, Rule, Sender, TypeRef
from codegen.runtime_rules import json_equal

__all__ = [
    "FORMAT",
    "Fault",
    "Validator",
    "build_cases",
    "canonical",
    "render_vectors",
]

FORMAT = 1
"""The version of the vector format (docs/conformance.md)."""

UNKNOWN_TYPE = "conformance.unknown_type"
"""A message type no spec defines."""
PAD = "conformance_padding"
"""An unknown field, to grow a message or to carry bytes no known field may hold."""
_SURROGATE = "@@SURROGATE@@"
"""Replaced by a JSON escape after encoding: a lone surrogate cannot be encoded as UTF-8."""
_CHARS = {"ascii": "a", "2-byte": "é", "3-byte": "€", "4-byte": "\U0001d11e"}
"""One character of each UTF-8 length, to cross a byte limit with the last character."""
_FILLERS = "a0A_-.x"


class _Missing(enum.Enum):
    MISSING = 0


MISSING = _Missing.MISSING

Fault = tuple[str, str, str]
"""(JSON path, check, error code) of one broken rule."""
Mutation = Callable[[dict[str, Any]], bool]
"""Changes a container object in place; ``False`` when it does not apply to this one."""


def _text(obj: Any) -> str:
    """A message as a compact JSON text, non-ASCII written as itself (as the protocols send)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _jpath(path: Iterable[str | int]) -> str:
    out = "$"
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}"
    return out


def _get(obj: Any, path: Iterable[str | int]) -> Any:
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or len(obj) <= step:
                return MISSING
        elif not isinstance(obj, dict) or step not in obj:
            return MISSING
        obj = obj[step]
    return obj


def _bound_text(bound: Bound) -> str:
    return bound.constant.name if bound.constant is not None else json.dumps(bound.value)


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


# -- the spec's rules, read from the IR --------------------------------------------------------


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
            return
        self.value(value, ref, f, path, out, element=False)

    def value(
        self, value: Any, ref: TypeRef, f: Field, path: str, out: list[Fault], *, element: bool
    ) -> None:
        """One value of ``f``: the field itself, or an item of its array or map."""
        wrong = (path, "wrong_type", self.codes["wrong_type"])
        invalid = f.code or self.codes["invalid_value"]
        kind = ref.kind
        if kind == "any":
            return
        if value is None:
            out.append(wrong)
            return
        if kind in ("string", "datetime") or (kind == "enum" and not _int_enum(ref)):
            if not isinstance(value, str):
                out.append(wrong)
                return
        elif kind == "integer" or (kind == "enum" and _int_enum(ref)):
            if isinstance(value, bool) or not isinstance(value, int):
                out.append(wrong)
                return
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                out.append(wrong)
                return
            if isinstance(value, float) and not math.isfinite(value):
                out.append((path, "finite", invalid))
                return
        elif kind == "boolean":
            if not isinstance(value, bool):
                out.append(wrong)
                return
        elif kind in ("object", "struct") and not isinstance(value, dict):
            out.append(wrong)
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
        if f.min_bytes is not None and _utf8_size(text) < f.min_bytes.value:
            out.append("min_bytes")
        if f.max_bytes is not None and _utf8_size(text) > f.max_bytes.value:
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


def _int_enum(ref: TypeRef) -> bool:
    return ref.enum is not None and ref.enum.is_int


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


# -- building the cases --------------------------------------------------------------------------


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


def build_cases(protocol: Protocol) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """Every case of ``protocol``, and the limits skipped (reason: the limits)."""
    generator = _Generator(protocol)
    generator.run()
    return generator.cases, generator.skipped


def render_vectors(protocol: Protocol) -> str:
    """The vectors file of ``protocol``: a header line, then one case a line."""
    cases, skipped = build_cases(protocol)
    header = {
        "comment": (
            f"Generated by `python -m codegen generate` from {protocol.spec_file} "
            f"(sha256 {protocol.spec_sha256}). Do not edit: change the spec or "
            "codegen/vectors.py, then regenerate. Format: docs/conformance.md."
        ),
        "generated_by": "codegen/vectors.py",
        "format": FORMAT,
        "protocol": protocol.id,
        "spec": protocol.spec_file,
        "sha256": protocol.spec_sha256,
        "cases": len(cases),
        "skipped": skipped,
    }
    return "".join(_text(line) + "\n" for line in [header, *cases])


class _Generator:
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

    # -- output ---------------------------------------------------------------------------------

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
        if _utf8_size(text) > self.max:
            faults.append(("$", "too_large", self.codes["too_large"]))
        return faults

    # -- the whole run --------------------------------------------------------------------------

    def run(self) -> None:
        for m in self.p.messages:
            self.examples(m)
            self.wrong_senders(m)
            sender = m.senders[0]
            for slot, bases in self.slots(m):
                self.slot_cases(m, sender, slot, bases)
        self.unknown_types()
        self.max_message()
        self.malformed()
        for fr in self.p.frames:
            self.frames(fr)

    def source(self, m: Message, slot: _Slot, f: Field | None, what: str) -> str:
        if slot.owner == m.type:
            item = f"messages {m.type}" + (f".{f.wire_name}" if f else "")
        else:
            item = f"types {slot.owner}" + (f".{f.wire_name}" if f else "")
            item += f" (at {m.type} {slot.label}{f.wire_name if f else ''})"
        return f"{self.spec} {item} {what}".rstrip()

    def examples(self, m: Message) -> None:
        for i, ex in enumerate(m.examples):
            text = _text(ex.json)
            faults = self.judge(m, ex.json, text)
            if faults:
                raise ValueError(f"{self.spec}: example {i} of {m.type} breaks {faults}")
            for sender in m.senders:
                suffix = f"/{sender}" if len(m.senders) > 1 else ""
                where = f" ({ex.source})" if ex.source else ""
                self.add(
                    f"{self.p.id}/decode/{m.type}/example/{i + 1}{suffix}",
                    "decode",
                    sender,
                    text,
                    self.valid(m, ex.json),
                    f"{self.spec} messages {m.type} examples[{i}]{where}",
                )

    def envelope(self, sender: Sender) -> dict[str, Any]:
        """The fields every message of ``sender`` carries, with an example's values."""
        names = [f.wire_name for f in sender.messages[0].fields]
        for m in sender.messages[1:]:
            names = [n for n in names if n in {f.wire_name for f in m.fields}]
        values: dict[str, Any] = {}
        for name in names:
            for m in sender.messages:
                found = next((ex.json[name] for ex in m.examples if name in ex.json), MISSING)
                if found is not MISSING:
                    values[name] = found
                    break
        return values

    def wrong_senders(self, m: Message) -> None:
        own = set()
        for sid in m.senders:
            own |= set(self.envelope(self.p.sender(sid)))
        body = {k: v for k, v in m.examples[0].json.items() if k not in own and k != "type"}
        for s in self.p.senders:
            if s.id in m.senders:
                continue
            obj = {"type": m.type, **self.envelope(s), **body}
            self.add(
                f"{self.p.id}/decode/{m.type}/wrong-sender/{s.id}",
                "decode",
                s.id,
                _text(obj),
                self.invalid(self.codes["wrong_sender"]),
                f"{self.spec} messages {m.type} senders: {', '.join(m.senders)}; "
                "decode_errors.wrong_sender",
            )

    def unknown_types(self) -> None:
        for s in self.p.senders:
            for variant, type_ in (("new", UNKNOWN_TYPE), ("case", s.messages[0].type.upper())):
                obj = {"type": type_, **self.envelope(s)}
                if s.accepts_unknown:
                    expect = {"valid": True, "unknown": True, "type": type_, "value": obj}
                    why = "unknown_types: accept"
                else:
                    expect = self.invalid(self.codes["unknown_type"])
                    why = "unknown_types: reject; decode_errors.unknown_type"
                self.add(
                    f"{self.p.id}/decode/unknown-type/{s.id}/{variant}",
                    "decode",
                    s.id,
                    _text(obj),
                    expect,
                    f"{self.spec} senders {s.id} {why}",
                )

    def max_message(self) -> None:
        limit = self.p.max_message_bytes
        for index, s in enumerate(self.p.senders):
            m, ex = min(
                ((m, ex) for m in s.messages for ex in m.examples),
                key=lambda pair: len(_text(pair[1].json)),
            )
            char = "x" if index % 2 == 0 else "€"
            variant = "ascii" if char == "x" else "3-byte"
            for at, size in (("at-limit", self.max), ("over", self.max + 1)):
                base = _utf8_size(_text({**ex.json, PAD: ""}))
                need = size - base
                pad = char * (need // _utf8_size(char)) + "x" * (need % _utf8_size(char))
                obj = {**ex.json, PAD: pad}
                text = _text(obj)
                assert _utf8_size(text) == size
                faults = self.judge(m, obj, text)
                expect = self.invalid(self.codes["too_large"]) if faults else self.valid(m, obj)
                self.add(
                    f"{self.p.id}/decode/max-message-bytes/{s.id}/{at}-{variant}",
                    "decode",
                    s.id,
                    text,
                    expect,
                    f"{self.spec} protocol.max_message_bytes={limit.name} ({self.max} bytes)"
                    + ("; decode_errors.too_large" if faults else ""),
                    covers={"owner": "protocol", "check": "max_message_bytes", "bound": self.max},
                )

    def malformed(self) -> None:
        code = self.codes["malformed"]
        for s in self.p.senders:
            m = s.messages[0]
            ex = m.examples[0].json
            text = _text(ex)
            no_type = {k: v for k, v in ex.items() if k != "type"}
            cases: list[tuple[str, str | bytes]] = [
                ("empty", ""),
                ("whitespace-only", " \n"),
                ("not-json", "not json"),
                ("truncated", text[:-1]),
                ("top-level-array", f"[{text}]"),
                ("top-level-string", json.dumps(m.type)),
                ("top-level-number", "1"),
                ("top-level-null", "null"),
                ("no-type", _text(no_type)),
                ("type-not-a-string", _text({"type": 5, **no_type})),
                ("type-null", _text({"type": None, **no_type})),
            ]
            padded = _text({**ex, PAD: _SURROGATE})
            for name, escape in (
                ("lone-high-surrogate", "\\ud800"),
                ("lone-low-surrogate", "\\udc00"),
                ("reversed-surrogate-pair", "\\udd1e\\ud834"),
            ):
                cases.append((name, padded.replace(_SURROGATE, escape)))
            target = self.free_string_field(s)
            if target is not None:
                tm, tex, tf = target
                obj = {**tex, tf.wire_name: _SURROGATE}
                cases.append(
                    (
                        f"lone-surrogate-in-{tm.type}.{tf.wire_name}",
                        _text(obj).replace(_SURROGATE, "\\ud800"),
                    )
                )
            raw = padded.encode("utf-8")
            for name, bad in (
                ("invalid-utf8-continuation-byte", b"\x80"),
                ("invalid-utf8-ff", b"\xff"),
                ("invalid-utf8-overlong", b"\xc0\xaf"),
                ("invalid-utf8-encoded-surrogate", b"\xed\xa0\x80"),
                ("invalid-utf8-truncated-sequence", b"\xe2\x82"),
            ):
                cases.append((name, raw.replace(_SURROGATE.encode(), bad)))
            if target is not None:
                tm, tex, tf = target
                obj = {**tex, tf.wire_name: _SURROGATE}
                cases.append(
                    (
                        f"invalid-utf8-in-{tm.type}.{tf.wire_name}",
                        _text(obj).encode("utf-8").replace(_SURROGATE.encode(), b"ok\xffok"),
                    )
                )
            for name, data in cases:
                self.add(
                    f"{self.p.id}/decode/malformed/{s.id}/{name}",
                    "decode",
                    s.id,
                    data,
                    self.invalid(code),
                    f"{self.spec} decode_errors.malformed (not one UTF-8 JSON object with a "
                    "string type)",
                )

    def free_string_field(self, s: Sender) -> tuple[Message, dict[str, Any], Field] | None:
        """A message of ``s`` with a string field that any non-blank text satisfies."""
        for m in s.messages:
            for f in m.fields:
                if (
                    f.type.kind == "string"
                    and f.pattern is None
                    and not f.has_const
                    and f.min_length is None
                    and f.min_bytes is None
                ):
                    for ex in m.examples:
                        if f.wire_name in ex.json:
                            return m, ex.json, f
        return None

    # -- fields, limits and rules ---------------------------------------------------------------

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
        found = [ex.json for ex in m.examples if isinstance(_get(ex.json, slot.path), dict)]
        if found or not slot.path:
            return found
        for ex in m.examples:
            obj = copy.deepcopy(ex.json)
            if self.graft(m, obj, slot.path) and not self.judge(m, obj, _text(obj)):
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
            container = _get(obj, slot.path)
            if not isinstance(container, dict) or not mutate(container):
                continue
            text = _text(obj)
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
        cpath = _jpath(slot.path)
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
            if isinstance(c := _get(base, slot.path), dict) and f.wire_name in c
        ]
        return out + self.field_samples.get((slot.owner, f.wire_name), [])

    def field_cases(
        self, m: Message, sender: str, slot: _Slot, bases: list[dict[str, Any]], f: Field
    ) -> None:
        name = f.wire_name
        fpath = f"{_jpath(slot.path)}.{name}"
        prefix = f"{self.p.id}/decode/{m.type}/{slot.label}{name}/"
        # The bases that hold the field come first, so a mutation keeps its neighbours.
        # The smallest base that holds the field comes first, so a mutation keeps its
        # neighbours and the file stays small.
        ordered = sorted(bases, key=lambda b: (name not in _get(b, slot.path), len(_text(b))))
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
        limits = _Limits(self, f, case, slot.owner)
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
            kind = "integer" if _int_enum(ref) else "string"
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

    def items(self, f: Field, items: list[Any], count: int) -> list[Any] | None:
        """``count`` items repeated from ``items``, made unique where the field asks it."""
        if count <= 0:
            return []
        if not items:
            return None
        out = []
        key = f.unique_by
        element = f.type.element
        for i in range(count):
            item = copy.deepcopy(items[i % len(items)])
            if key is not None and i >= len(items):
                if key == "value" and isinstance(item, str):
                    new = _suffixed(item, i, self.fits(f, element=True))
                    if new is None:
                        return None
                    item = new
                elif isinstance(item, dict) and element.struct is not None:
                    kf = next(x for x in self.structs[element.struct].fields if x.wire_name == key)
                    seed = item.get(key)
                    new = _suffixed(seed, i, self.fits(kf)) if isinstance(seed, str) else None
                    if new is None:
                        return None
                    item[key] = new
                else:
                    return None
            out.append(item)
        return out

    def fits(self, f: Field, *, element: bool = False) -> Callable[[str], bool]:
        """Accepts a text that keeps every string rule of ``f``."""
        return lambda text: not self.v.string_faults(text, f, element=element)

    def rule_cases(
        self,
        m: Message,
        sender: str,
        slot: _Slot,
        bases: list[dict[str, Any]],
        index: int,
        rule: Rule,
    ) -> None:
        cpath = _jpath(slot.path)
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
            assert rule.field is not None and rule.other is not None
            field, other = rule.field, rule.other
            value = sample(field)
            others = _other_choices(other, rule.equals)
            if value is MISSING or not others:
                self.skip("no example value sets the rule's fields", what)
                return

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
        else:
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
                    return
                case("at-limit", only(names[: rule.count]), False)
                case("under", only(names[: rule.count - 1]), True)
            else:
                for n in names:
                    case(f"only-{n}", only([n]), False)
                case("none", only([]), rule.kind != "at_most_one_of")
                if len(names) > 1:
                    case("two", only(names[:2]), rule.kind != "at_least_one_of")
        if not (done["valid"] and done["invalid"]):
            self.skip("no boundary pair for the rule", what)

    # -- frames ---------------------------------------------------------------------------------

    def frames(self, fr: Frame) -> None:
        prefix = f"{self.p.id}/frame/{fr.name}/"
        src = f"{self.spec} frames {fr.name}"
        code = fr.error
        directions = _directions(self.p, fr)

        def header(buf: bytes) -> dict[str, int]:
            return {
                f.name: int.from_bytes(buf[f.offset : f.offset + f.size], fr.byte_order)
                for f in fr.header
            }

        def faults(buf: bytes, sender: str | None) -> list[str]:
            if len(buf) != fr.size:
                return ["size"]
            out = []
            values = header(buf)
            for f in fr.header:
                value = values[f.name]
                if f.const is not None and value != f.const:
                    out.append(f.name)
                if f.flags and value & ~sum(1 << bit for bit, _, _ in f.flags):
                    out.append(f.name)
                if f.enum is not None and value not in [v.value for v in f.enum.values]:
                    out.append(f.name)
                if f.enum is not None and sender is not None and value != directions.get(sender):
                    out.append("sender")
            return out

        def add(
            case_id: str,
            buf: bytes,
            why: str,
            sender: str | None = None,
            covers: dict[str, Any] | None = None,
        ) -> None:
            found = faults(buf, sender)
            expect: dict[str, Any]
            if found:
                expect = self.invalid(code)
                why += f"; frames {fr.name}.error"
            else:
                expect = {
                    "valid": True,
                    "header": header(buf),
                    "payload_hex": buf[fr.payload.offset :].hex(),
                }
            self.add(
                prefix + case_id,
                "frame",
                sender,
                buf,
                expect,
                f"{src} {why}",
                covers,
                frame=fr.name,
            )

        examples = [ex.to_bytes(fr) for ex in fr.examples]
        for i, buf in enumerate(examples):
            add(f"example/{i + 1}", buf, f"examples[{i}]")
            for sender in directions:
                add(
                    f"example/{i + 1}/from-{sender}",
                    buf,
                    f"examples[{i}] sent by the {sender} "
                    "(its direction field must name the sender)",
                    sender,
                    {"owner": fr.name, "check": "direction_matches_sender"},
                )
        base = examples[0]
        size_covers = {"owner": fr.name, "check": "size", "bound": fr.size}
        for size in (0, fr.payload.offset, fr.size - 1, fr.size, fr.size + 1):
            buf = (base + b"\x00")[:size]
            add(f"size/{size}", buf, f"size={fr.size}", covers=size_covers)
        for f in fr.header:

            def put(value: int, f: Any = f) -> bytes:
                return (
                    base[: f.offset]
                    + value.to_bytes(f.size, fr.byte_order)
                    + base[f.offset + f.size :]
                )

            top = (1 << (8 * f.size)) - 1
            if f.const is not None:
                covers = {"owner": fr.name, "field": f.name, "check": "const", "bound": f.const}
                add(
                    f"{f.name}/const/at-limit",
                    put(f.const),
                    f"{f.name} const={f.const}",
                    covers=covers,
                )
                for other in sorted({f.const - 1, f.const + 1, top} - {f.const}):
                    if 0 <= other <= top:
                        add(
                            f"{f.name}/const/{other}",
                            put(other),
                            f"{f.name} const={f.const}",
                            covers=covers,
                        )
            if f.flags:
                mask = sum(1 << bit for bit, _, _ in f.flags)
                covers = {"owner": fr.name, "field": f.name, "check": "flags", "bound": mask}
                for bit, flag, _ in f.flags:
                    add(
                        f"{f.name}/flag/{flag}",
                        put(1 << bit),
                        f"{f.name} flags bit {bit} ({flag})",
                        covers=covers,
                    )
                add(
                    f"{f.name}/flag/all-named",
                    put(mask),
                    f"{f.name} flags (every named bit)",
                    covers=covers,
                )
                for bit in range(8 * f.size):
                    if not mask & (1 << bit):
                        add(
                            f"{f.name}/reserved-bit/{bit}",
                            put(1 << bit),
                            f"{f.name} flags: bit {bit} is reserved",
                            covers=covers,
                        )
            if f.enum is not None:
                values = [int(v.value) for v in f.enum.values]
                covers = {"owner": fr.name, "field": f.name, "check": "enum", "bound": f.enum.name}
                for value in values:
                    add(
                        f"{f.name}/enum/value-{value}",
                        put(value),
                        f"{f.name} enum {f.enum.name}",
                        covers=covers,
                    )
                for other in sorted({max(values) + 1, 256, top} - set(values)):
                    if other <= top:
                        add(
                            f"{f.name}/enum/{other}",
                            put(other),
                            f"{f.name} enum {f.enum.name}",
                            covers=covers,
                        )
            if f.const is None and not f.flags and f.enum is None:
                add(f"{f.name}/any/max", put(top), f"{f.name} ({f.kind}, any value)")
        add(
            "payload/all-ones",
            base[: fr.payload.offset] + b"\xff" * fr.payload.size,
            "payload: any bytes",
        )


class _Limits:
    """The boundary pairs of one field's limits: at the limit (valid), one past it (invalid)."""

    def __init__(self, gen: _Generator, f: Field, case: Callable[..., bool], owner: str) -> None:
        self.gen = gen
        self.owner = owner
        self.f = f
        self.case = case
        self.invalid = f.code or gen.codes["invalid_value"]
        self.code_why = "code" if f.code else "decode_errors.invalid_value"

    def pair(
        self,
        check: str,
        bound: Any,
        good: list[tuple[str, Any]],
        bad: list[tuple[str, Any]],
        why: str,
        mutation: Callable[[Any], Mutation],
        *,
        code: str | None = None,
        code_why: str | None = None,
        path: str | None = None,
        prefix: str = "",
    ) -> None:
        covers = {"check": check, "bound": bound}
        code = code or self.invalid
        extra = {} if path is None else {"path": path}
        made_good = [
            self.case(f"{prefix}{check}/{v}", mutation(x), None, why, covers, **extra)
            for v, x in good
        ]
        made_bad = [
            self.case(
                f"{prefix}{check}/{v}",
                mutation(x),
                (check, code),
                f"{why}; {code_why or self.code_why}",
                covers,
                **extra,
            )
            for v, x in bad
        ]
        if not any(made_good) or not any(made_bad):
            self.gen.skip(
                "no boundary pair: no value at the limit fits the field's other rules",
                f"{self.owner}.{self.f.wire_name} {check}",
            )

    def scalar(
        self,
        ref: TypeRef,
        seeds: list[Any],
        put: Callable[[Any], Mutation],
        *,
        element: bool,
        path: str,
    ) -> None:
        """The limits of one value: the field, or item 0 of its array."""
        f = self.f
        prefix = "item/" if element else ""

        def pair(check: str, bound: Any, good: Any, bad: Any, why: str) -> None:
            self.pair(check, bound, good, bad, why, put, path=path, prefix=prefix)

        if f.has_const:
            pair(
                "const",
                f.const,
                [("at-limit", f.const)],
                [("other", _other_value(f.const))],
                f"const {json.dumps(f.const)}",
            )
            return
        kind = ref.kind
        if kind == "string":
            strings = [s for s in seeds if isinstance(s, str)]
            self.strings(strings[0] if strings else "", pair, element=element)
        elif kind in ("integer", "number"):
            for check, bound, step in (("minimum", f.minimum, -1), ("maximum", f.maximum, 1)):
                if bound is None:
                    continue
                at = bound.value
                past: Any = (
                    int(at) + step
                    if kind == "integer"
                    else math.nextafter(float(at), math.inf * step)
                )
                pair(
                    check, at, [("at-limit", at)], [("past", past)], f"{check}={_bound_text(bound)}"
                )
        elif kind == "enum" and ref.enum is not None:
            values = [v.value for v in ref.enum.values]
            good = [(f"value-{v}", v) for v in values]
            if ref.enum.open:
                for variant, value in [*good, ("new-value", "conformance_new_value")]:
                    self.case(
                        f"{prefix}enum/{variant}",
                        put(value),
                        None,
                        f"enum {ref.enum.name} (open: any string)",
                        {"check": "open_enum", "bound": ref.enum.name},
                        path,
                    )
                return
            pair(
                "enum",
                ref.enum.name,
                good,
                [("not-listed", _not_in(values))],
                f"enum {ref.enum.name} (closed)",
            )

    def strings(self, seed: str, pair: Callable[..., None], *, element: bool) -> None:
        f = self.f
        v = self.gen.v

        def ok(text: str) -> bool:
            return not v.string_faults(text, f, element=element)

        def only(check: str) -> Callable[[str], bool]:
            return lambda text: all(c == check for c in v.string_faults(text, f, element=element))

        if f.max_bytes is not None:
            n = int(f.max_bytes.value)
            good: list[tuple[str, Any]] = []
            bad: list[tuple[str, Any]] = []
            for label, char in _CHARS.items():
                size = _utf8_size(char)
                if n >= size and ok("a" * (n - size) + char):
                    # The last character crosses the limit: fewer characters than bytes.
                    good.append((f"at-limit-{label}", "a" * (n - size) + char))
                    bad.append((f"over-{label}", "a" * (n - size + 1) + char))
            pair("max_bytes", n, good, bad, f"max_bytes={_bound_text(f.max_bytes)} (UTF-8 bytes)")
        if f.min_bytes is not None:
            n = int(f.min_bytes.value)
            at = _fit(seed, n, ok) if seed.isascii() else None
            good = [("at-limit", at or "a" * n)]
            bad = [("under", "a" * (n - 1))] if n >= 1 else []
            if n >= 2:
                good.append(("at-limit-2-byte", "a" * (n - 2) + "é"))
            pair("min_bytes", n, good, bad, f"min_bytes={_bound_text(f.min_bytes)} (UTF-8 bytes)")
        if not element:
            for check, bound in (("max_length", f.max_length), ("min_length", f.min_length)):
                if bound is None:
                    continue
                n = int(bound.value)
                past_n = n + 1 if check == "max_length" else n - 1
                good = []
                bad = []
                at = _fit(seed, n, ok)
                if at is not None:
                    good.append(("at-limit", at))
                if past_n >= 0:
                    past = _fit(seed, past_n, only(check)) or (seed + "a" * past_n)[:past_n]
                    bad.append(("over" if check == "max_length" else "under", past))
                astral = _CHARS["4-byte"] * n
                if check == "max_length" and n and ok(astral):
                    # A character is a code point: one of U+10000 and above counts once.
                    good.append(("at-limit-4-byte", astral))
                    bad.append(("over-4-byte", astral + _CHARS["4-byte"]))
                pair(check, n, good, bad, f"{check}={_bound_text(bound)} (characters)")
        if f.pattern is not None:
            good = [("matching", seed)] if seed and ok(seed) else []
            bad = []
            for variant, texts in (
                ("trailing-newline", (seed + "\n", seed[:-1] + "\n")),
                ("leading-space", (" " + seed, " " + seed[1:])),
                ("trailing-space", (seed + " ", seed[:-1] + " ")),
            ):
                fits = [
                    t for t in texts if re.fullmatch(f.pattern, t) is None and only("pattern")(t)
                ]
                if fits and len(bad) < 2:
                    bad.append((variant, fits[0]))
            pair("pattern", f.pattern, good, bad, f"pattern {f.pattern}")
        if f.not_blank:
            good = [("not-blank", seed)] if seed and ok(seed) else [("not-blank", "a")]
            bad = [("space", " "), ("whitespace", " \t\n"), ("empty", "")]
            pair("not_blank", True, good, bad, "not_blank")

    def array(self, seeds: list[Any], put: Callable[[Any], Mutation]) -> None:
        f = self.f
        gen = self.gen
        lists = [s for s in seeds if isinstance(s, list) and s]
        element = f.type.element
        if not lists and element.kind == "struct" and element.struct in gen.samples:
            lists = [[gen.samples[element.struct]]]
        items: list[Any] = lists[0] if lists else []

        def grown(count: int) -> list[tuple[str, Any]]:
            built = gen.items(f, items, count)
            return [] if built is None else [("", built)]

        if f.max_length is not None:
            n = int(f.max_length.value)
            self.pair(
                "max_length",
                n,
                [("at-limit", x) for _, x in grown(n)],
                [("over", x) for _, x in grown(n + 1)],
                f"max_length={_bound_text(f.max_length)} (items)",
                put,
                code=f.code or gen.codes["too_many"],
                code_why="code" if f.code else "decode_errors.too_many",
            )
        if f.min_length is not None:
            n = int(f.min_length.value)
            self.pair(
                "min_length",
                n,
                [("at-limit", x) for _, x in grown(n)],
                [("under", x) for _, x in grown(n - 1)] if n > 0 else [],
                f"min_length={_bound_text(f.min_length)} (items)",
                put,
            )
        if f.unique_by is not None:
            self.pair(
                "unique_by",
                f.unique_by,
                [("distinct", x) for _, x in grown(2)],
                [("repeated", [items[0], items[0]])] if items else [],
                f"unique_by {f.unique_by}",
                put,
            )


def _type_name(ref: TypeRef) -> str:
    if ref.kind == "enum" and ref.enum is not None:
        return ref.enum.name
    if ref.kind == "struct" and ref.struct is not None:
        return ref.struct
    return ref.kind


def _other_value(value: Any) -> Any:
    """A value of the same JSON type as ``value`` that differs from it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return None


def _not_in(values: list[Any]) -> Any:
    """A value of the values' JSON type listed nowhere: the first, upper-cased where that works."""
    if all(isinstance(v, int) for v in values):
        return max(values) + 1
    first = str(values[0])
    for candidate in (first.upper(), first + "_x", "conformance_not_listed"):
        if candidate not in values:
            return candidate
    raise AssertionError("unreachable")


def _other_choices(f: Field, equals: Any) -> list[Any]:
    """Valid values of ``f`` other than ``equals`` (to break a requires rule)."""
    if f.type.kind == "boolean":
        return [not equals]
    if f.type.kind == "enum" and f.type.enum is not None:
        return [v.value for v in f.type.enum.values if v.value != equals]
    return []


def _directions(p: Protocol, fr: Frame) -> dict[str, int]:
    """Sender id -> the value its frames' direction field must carry (``client_to_server``)."""
    out: dict[str, int] = {}
    for f in fr.header:
        if f.enum is None:
            continue
        for v in f.enum.values:
            for s in p.senders:
                if v.py_name.lower().startswith(f"{s.id}_to_"):
                    out[s.id] = int(v.value)
    return out


def _fit(seed: str, n: int, ok: Callable[[str], bool]) -> str | None:
    """A string of exactly ``n`` characters that ``ok`` accepts, grown or cut from ``seed``."""
    alphabet = "".join(dict.fromkeys(seed + _FILLERS))
    candidates = [seed[:n]] if len(seed) >= n else []
    candidates += [seed + c * (n - len(seed)) for c in alphabet if len(seed) < n]
    candidates += [c * n for c in alphabet]
    for text in candidates:
        if len(text) == n and ok(text):
            return text
    if len(seed) >= n or not ok(seed):
        return None
    # Grow one or two characters at a time, each step accepted (a tag's subtags, say).
    text = seed
    chunks = list(alphabet) + [a + b for a in "-_." for b in alphabet]
    while len(text) < n:
        for chunk in chunks:
            if len(text) + len(chunk) <= n and ok(text + chunk):
                text += chunk
                break
        else:
            return None
    return text


def _suffixed(seed: str, i: int, ok: Callable[[str], bool]) -> str | None:
    for text in (f"{seed}{i}", f"{seed}_{i}", seed[: max(0, len(seed) - len(str(i)))] + str(i)):
        if text != seed and ok(text):
            return text
    return None
