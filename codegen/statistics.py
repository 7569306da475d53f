"""What the per-session statistics read of a protocol, as its spec states it (``statistics:``).

The arithmetic is the runtime's (``voxwire.observe.stats``, defined in docs/observability.md);
which message ends the user's turn, which starts a tool call and which field carries its key,
which resumes the session, which counts the events lost, and which frame fields count and stamp
the audio are the spec's. The generator prints them as one table per protocol
(``voxwire.<protocol>.statistics.STATISTICS``), with Python attribute names, and the reference
lists them with wire names.

Checks (each problem named by file, line and path): every message type exists; every field
named is one of that message's (its envelope included); a condition's value fits its field (an
enum's value, a string, an integer, a boolean); counts and durations are numbers; a tool call's
key has the same type in its outcomes; ``replayed_before`` is a datetime of the resume and of
the other senders' envelopes; ``sequence`` is an integer of an envelope; the frame fields are
integer header fields, the silence flag is a named bit, and the duration an integer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from codegen import names
from codegen.loader import PathT, Problem, RawSpec, SpecError

if TYPE_CHECKING:
    from codegen.ir import Field, Frame, Message, Protocol

__all__ = [
    "OUTCOMES",
    "FieldName",
    "FrameMarks",
    "LossMark",
    "Mark",
    "OutcomeMark",
    "ResumeMark",
    "Statistics",
    "ToolCallMark",
    "When",
    "resolve_statistics",
    "statistics_view",
]

OUTCOMES: Final = ("ok", "error", "cancelled")
"""What ends a tool call, in the format's order."""

_NUMBERS: Final = ("integer", "number")


@dataclass(frozen=True)
class FieldName:
    """A field as the wire spells it and as a binding's attribute."""

    wire: str
    attribute: str


@dataclass(frozen=True)
class When:
    """A condition on one field: it equals ``equals``, or it is (or is not) ``present``."""

    field: FieldName
    equals: str | int | bool | None
    present: bool | None


@dataclass(frozen=True)
class Mark:
    """A message that marks a moment of the session, when its condition holds."""

    type: str
    when: When | None


@dataclass(frozen=True)
class ToolCallMark:
    type: str
    key: FieldName
    name: FieldName


@dataclass(frozen=True)
class OutcomeMark:
    type: str
    key: FieldName
    outcome: str
    when: When | None
    duration_ms: FieldName | None


@dataclass(frozen=True)
class ResumeMark:
    type: str
    when: When | None
    replayed_before: FieldName | None


@dataclass(frozen=True)
class LossMark:
    type: str
    count: FieldName


@dataclass(frozen=True)
class FrameMarks:
    frame: str
    sequence: str
    sequence_modulus: int
    clock: str
    clock_modulus: int
    flags: str
    """The header field whose bits hold the silence flag."""
    silence: str
    silence_mask: int
    duration_ms: int
    duration_constant: str | None
    """The constant the duration names, if it names one."""


@dataclass(frozen=True)
class Statistics:
    """The ``statistics:`` of a spec, resolved."""

    summary: str
    sequence: FieldName | None
    sequenced: tuple[str, ...]
    """The senders whose envelope carries ``sequence``, in the spec's order."""
    frames: FrameMarks | None
    turn_end: tuple[Mark, ...]
    turn_output: tuple[Mark, ...]
    tool_call: ToolCallMark
    tool_outcomes: tuple[OutcomeMark, ...]
    resume: ResumeMark | None
    loss_report: LossMark | None


def resolve_statistics(raw: RawSpec, protocol: Protocol) -> Statistics | None:
    """The ``statistics:`` of a resolved spec, or None; raise :class:`SpecError` with every
    problem."""
    data = raw.data.get("statistics")
    if data is None:
        return None
    checker = _Checker(raw, protocol, [])
    statistics = checker.statistics(data)
    if checker.problems:
        raise SpecError(checker.problems)
    return statistics


def statistics_view(s: Statistics) -> dict[str, Any]:
    """What the statistics template prints: every value a Python literal."""

    def when(w: When | None) -> str:
        if w is None:
            return "None"
        value = f"equals={w.equals!r}" if w.present is None else f"present={w.present!r}"
        return f"When({w.field.attribute!r}, {value})"

    def attribute(f: FieldName | None) -> str:
        return "None" if f is None else repr(f.attribute)

    frames = s.frames
    conditions = [m.when for m in (*s.turn_end, *s.turn_output)] + [o.when for o in s.tool_outcomes]
    used = {
        "FrameMarks": frames is not None,
        "LossMark": s.loss_report is not None,
        "Mark": True,
        "Marks": True,
        "OutcomeMark": True,
        "ResumeMark": s.resume is not None,
        "ToolCallMark": True,
        "When": any(conditions) or (s.resume is not None and s.resume.when is not None),
    }
    return {
        "name": names.STATISTICS,
        "imports": [name for name, needed in used.items() if needed],
        "summary": s.summary,
        "sequence": attribute(s.sequence),
        "sequenced": "frozenset({" + ", ".join(map(repr, sorted(s.sequenced))) + "})"
        if s.sequenced
        else "frozenset()",
        "frames": None
        if frames is None
        else {
            "sequence": repr(frames.sequence),
            "sequence_modulus": frames.sequence_modulus,
            "clock": repr(frames.clock),
            "clock_modulus": frames.clock_modulus,
            "flags": repr(frames.flags),
            "silence_mask": f"0x{frames.silence_mask:02x}",
            "duration_ms": frames.duration_ms,
        },
        "turn_end": [f"Mark({m.type!r}, {when(m.when)})" for m in s.turn_end],
        "turn_output": [f"Mark({m.type!r}, {when(m.when)})" for m in s.turn_output],
        "tool_call": (
            f"ToolCallMark({s.tool_call.type!r}, key={s.tool_call.key.attribute!r}, "
            f"name={s.tool_call.name.attribute!r})"
        ),
        "tool_outcomes": [
            f"OutcomeMark({o.type!r}, key={o.key.attribute!r}, outcome={o.outcome!r}, "
            f"when={when(o.when)}, duration_ms={attribute(o.duration_ms)})"
            for o in s.tool_outcomes
        ],
        "resume": "None"
        if s.resume is None
        else (
            f"ResumeMark({s.resume.type!r}, when={when(s.resume.when)}, "
            f"replayed_before={attribute(s.resume.replayed_before)})"
        ),
        "loss_report": "None"
        if s.loss_report is None
        else f"LossMark({s.loss_report.type!r}, count={s.loss_report.count.attribute!r})",
    }


@dataclass
class _Checker:
    raw: RawSpec
    protocol: Protocol
    problems: list[Problem]

    def fail(self, where: PathT, message: str) -> None:
        self.problems.append(self.raw.problem(("statistics", *where), message))

    def statistics(self, data: dict[str, Any]) -> Statistics:
        sequence, sequenced = self._sequence(data.get("sequence"))
        call = data["tool_call"]
        call_message = self._message(call["type"], ("tool_call", "type"))
        call_key = self._field(call_message, call["key"], ("tool_call", "key"))
        tool_call = ToolCallMark(
            call["type"],
            _name(call_key, call["key"]),
            _name(self._field(call_message, call["name"], ("tool_call", "name")), call["name"]),
        )
        return Statistics(
            summary=" ".join(data["summary"].split()),
            sequence=sequence,
            sequenced=sequenced,
            frames=self._frames(data["frames"]) if "frames" in data else None,
            turn_end=self._marks(data["turn_end"], "turn_end"),
            turn_output=self._marks(data["turn_output"], "turn_output"),
            tool_call=tool_call,
            tool_outcomes=tuple(
                self._outcome(o, ("tool_outcomes", i), call_key)
                for i, o in enumerate(data["tool_outcomes"])
            ),
            resume=self._resume(data["resume"]) if "resume" in data else None,
            loss_report=self._loss(data["loss_report"]) if "loss_report" in data else None,
        )

    def _message(self, wire_type: str, where: PathT) -> Message | None:
        found = next((m for m in self.protocol.messages if m.type == wire_type), None)
        if found is None:
            self.fail(where, f"no message {wire_type!r} in this spec")
        return found

    def _field(self, message: Message | None, wire: str, where: PathT) -> Field | None:
        if message is None:
            return None  # the message is reported
        found = next((f for f in message.fields if f.wire_name == wire), None)
        if found is None:
            known = ", ".join(f.wire_name for f in message.fields)
            self.fail(where, f"{message.type} has no field {wire!r} (its fields: {known})")
        return found

    def _number(self, message: Message | None, wire: str, where: PathT) -> FieldName:
        found = self._field(message, wire, where)
        if found is not None and found.type.kind not in _NUMBERS:
            self.fail(where, f"{wire!r} is {found.type.kind}, not a number")
        return _name(found, wire)

    def _when(
        self, message: Message | None, data: dict[str, Any] | None, where: PathT
    ) -> When | None:
        if data is None:
            return None
        field = self._field(message, data["field"], (*where, "field"))
        if "present" in data:
            return When(_name(field, data["field"]), None, data["present"])
        value = data["equals"]
        if field is not None:
            self._check_value(field, value, (*where, "equals"))
        return When(_name(field, data["field"]), value, None)

    def _check_value(self, field: Field, value: str | int | bool, where: PathT) -> None:
        kind = field.type.kind
        if kind == "enum" and field.type.enum is not None:
            known = [v.value for v in field.type.enum.values]
            if value not in known or isinstance(value, bool):
                listed = ", ".join(str(v) for v in known)
                self.fail(where, f"{value!r} is no value of {field.type.enum.name} ({listed})")
            return
        fits = {
            "string": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
        }
        if kind not in fits:
            self.fail(
                where,
                f"{field.wire_name!r} is {kind}: equals needs a string, integer, "
                "boolean or enum field",
            )
        elif not fits[kind]:
            self.fail(where, f"{value!r} is no {kind} (the type of {field.wire_name!r})")

    def _marks(self, data: list[dict[str, Any]], key: str) -> tuple[Mark, ...]:
        marks = []
        for i, m in enumerate(data):
            message = self._message(m["type"], (key, i, "type"))
            marks.append(Mark(m["type"], self._when(message, m.get("when"), (key, i, "when"))))
        return tuple(marks)

    def _outcome(self, data: dict[str, Any], where: PathT, call_key: Field | None) -> OutcomeMark:
        message = self._message(data["type"], (*where, "type"))
        key = self._field(message, data["key"], (*where, "key"))
        if key is not None and call_key is not None and key.type.kind != call_key.type.kind:
            self.fail(
                (*where, "key"),
                f"{data['key']!r} is {key.type.kind}; the call's key is {call_key.type.kind}",
            )
        duration = data.get("duration_ms")
        return OutcomeMark(
            data["type"],
            _name(key, data["key"]),
            data["outcome"],
            self._when(message, data.get("when"), (*where, "when")),
            None if duration is None else self._number(message, duration, (*where, "duration_ms")),
        )

    def _resume(self, data: dict[str, Any]) -> ResumeMark:
        message = self._message(data["type"], ("resume", "type"))
        stamp = data.get("replayed_before")
        replayed = None
        if stamp is not None:
            where: PathT = ("resume", "replayed_before")
            found = self._field(message, stamp, where)
            if found is not None and found.type.kind != "datetime":
                self.fail(where, f"{stamp!r} is {found.type.kind}, not a datetime")
            senders = message.senders if message is not None else ()
            for sender in self.protocol.senders:
                if sender.id in senders:
                    continue
                theirs = next((f for f in sender.envelope if f.wire_name == stamp), None)
                if theirs is None or theirs.type.kind != "datetime":
                    self.fail(where, f"the {sender.id}'s envelope has no datetime {stamp!r}")
            replayed = _name(found, stamp)
        return ResumeMark(
            data["type"], self._when(message, data.get("when"), ("resume", "when")), replayed
        )

    def _loss(self, data: dict[str, Any]) -> LossMark:
        message = self._message(data["type"], ("loss_report", "type"))
        return LossMark(
            data["type"], self._number(message, data["count"], ("loss_report", "count"))
        )

    def _sequence(self, wire: str | None) -> tuple[FieldName | None, tuple[str, ...]]:
        if wire is None:
            return None, ()
        carrying = []
        attribute = names.attribute(wire)
        for sender in self.protocol.senders:
            found = next((f for f in sender.envelope if f.wire_name == wire), None)
            if found is None:
                continue
            if found.type.kind != "integer":
                self.fail(("sequence",), f"the {sender.id}'s {wire!r} is no integer")
            carrying.append(sender.id)
            attribute = found.py_name
        if not carrying:
            self.fail(("sequence",), f"no sender's envelope has a field {wire!r}")
        return FieldName(wire, attribute), tuple(carrying)

    def _frames(self, data: dict[str, Any]) -> FrameMarks:
        frame = next((f for f in self.protocol.frames if f.name == data["frame"]), None)
        if frame is None:
            self.fail(("frames", "frame"), f"no frame {data['frame']!r} in this spec")
        header = frame.header if frame is not None else ()
        flags = {name: bit for f in header for bit, name, _ in f.flags}
        holder = next(
            (f.name for f in header for _, name, _ in f.flags if name == data["silence"]), ""
        )
        if frame is not None and data["silence"] not in flags:
            self.fail(
                ("frames", "silence"),
                f"{data['silence']!r} is no flag of {frame.name} (its flags: {', '.join(flags)})",
            )
        duration, constant = self._duration(data["duration_ms"])
        return FrameMarks(
            frame=data["frame"],
            sequence=names.attribute(data["sequence"]),
            sequence_modulus=self._counter(frame, data, "sequence"),
            clock=names.attribute(data["clock"]),
            clock_modulus=self._counter(frame, data, "clock"),
            flags=names.attribute(holder),
            silence=data["silence"],
            silence_mask=1 << flags.get(data["silence"], 0),
            duration_ms=duration,
            duration_constant=constant,
        )

    def _counter(self, frame: Frame | None, data: dict[str, Any], key: str) -> int:
        """The modulus of the header field ``data[key]`` names, which must count (no enum, no
        constant)."""
        if frame is None:
            return 0  # the frame is reported
        found = next((f for f in frame.header if f.name == data[key]), None)
        if found is None or found.enum or found.const is not None:
            self.fail(("frames", key), f"{data[key]!r} is no counting header field of {frame.name}")
            return 0
        return int(2 ** (8 * found.size))

    def _duration(self, duration: int | str) -> tuple[int, str | None]:
        """A frame's milliseconds, and the constant that holds them, if one does."""
        if isinstance(duration, int):
            if duration <= 0:
                self.fail(("frames", "duration_ms"), f"{duration!r} is no positive integer")
            return duration, None
        named = next((c for c in self.protocol.constants if c.name == duration), None)
        if named is None or not isinstance(named.value, int):
            self.fail(("frames", "duration_ms"), f"no integer constant {duration!r}")
            return 0, duration
        return named.value, duration


def _name(field: Field | None, wire: str) -> FieldName:
    return FieldName(wire, field.py_name if field is not None else names.attribute(wire))
