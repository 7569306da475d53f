"""The cases of each message as a whole: its examples, sent by each of its senders and by a
sender that may not send it; a type no spec defines; the message size limit; malformed texts.
"""

from __future__ import annotations

import json
from typing import Any

from codegen.cases.base import CaseBuilder, json_text
from codegen.cases.validator import MISSING, utf8_size
from codegen.ir import Field, Message, Sender

__all__ = ["PAD", "UNKNOWN_TYPE", "MessageCases"]

UNKNOWN_TYPE = "conformance.unknown_type"
"""A message type no spec defines."""
PAD = "conformance_padding"
"""An unknown field, to grow a message or to carry bytes no known field may hold."""
_SURROGATE = "@@SURROGATE@@"
"""Replaced by a JSON escape after encoding: a lone surrogate cannot be encoded as UTF-8."""


class MessageCases(CaseBuilder):
    def examples(self, m: Message) -> None:
        for i, ex in enumerate(m.examples):
            text = json_text(ex.json)
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
                json_text(obj),
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
                    json_text(obj),
                    expect,
                    f"{self.spec} senders {s.id} {why}",
                )

    def max_message(self) -> None:
        limit = self.p.max_message_bytes
        for index, s in enumerate(self.p.senders):
            m, ex = min(
                ((m, ex) for m in s.messages for ex in m.examples),
                key=lambda pair: len(json_text(pair[1].json)),
            )
            char = "x" if index % 2 == 0 else "€"
            variant = "ascii" if char == "x" else "3-byte"
            for at, size in (("at-limit", self.max), ("over", self.max + 1)):
                base = utf8_size(json_text({**ex.json, PAD: ""}))
                need = size - base
                pad = char * (need // utf8_size(char)) + "x" * (need % utf8_size(char))
                obj = {**ex.json, PAD: pad}
                text = json_text(obj)
                assert utf8_size(text) == size
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
            text = json_text(ex)
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
                ("no-type", json_text(no_type)),
                ("type-not-a-string", json_text({"type": 5, **no_type})),
                ("type-null", json_text({"type": None, **no_type})),
            ]
            padded = json_text({**ex, PAD: _SURROGATE})
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
                        json_text(obj).replace(_SURROGATE, "\\ud800"),
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
                        json_text(obj).encode("utf-8").replace(_SURROGATE.encode(), b"ok\xffok"),
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
