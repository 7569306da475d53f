"""The intermediate representation: a spec with every reference resolved and every name decided.

:func:`resolve` turns a schema-checked :class:`~codegen.loader.RawSpec` into a :class:`Protocol`,
checking what a JSON Schema cannot (references, duplicates, sizes, anchored patterns) and
collecting every problem before it raises.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from codegen import names
from codegen.loader import PathT, Problem, RawSpec, SpecError
from codegen.machines import Machine, resolve_machines

__all__ = [
    "JSON_SAFE_INTEGER",
    "Acceptance",
    "Bound",
    "CloseCode",
    "Constant",
    "Decision",
    "Enum",
    "EnumValue",
    "ErrorCode",
    "Example",
    "Field",
    "FieldSet",
    "Frame",
    "FrameExample",
    "FrameField",
    "Message",
    "Protocol",
    "Rule",
    "Sender",
    "Struct",
    "TypeRef",
    "Union",
    "resolve",
]

JSON_SAFE_INTEGER = 2**53 - 1
"""The bound of an integer field the spec gives no range: the largest integer every JSON peer
(JavaScript included) reads exactly."""

PRIMITIVES = ("string", "integer", "number", "boolean", "datetime", "object", "any")
_FRAME_SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
_FRAME_UNSUPPORTED = {
    "u64": "a u64 header field is not supported: the TypeScript binding reads header fields as "
    "numbers, exact only to 2^53; split it into two u32 fields",
}
"""Frame field types the format names but a binding cannot carry exactly: refused, with why."""


@dataclass(frozen=True)
class Acceptance:
    """A finding of ``python -m codegen breaking`` that a decision accepts: its rule, its item
    (message None: any) and the item's old and new values it was accepted with."""

    rule: str
    message: str | None
    field: str | None
    old: Any = None
    new: Any = None
    moved_to: str | None = None
    """The close code a removed constant became (``close_codes.<name>``): its number is compared
    with the constant's old value, so the move is accepted only while the wire is unchanged."""


@dataclass(frozen=True)
class Decision:
    id: str
    quote: str
    source: str
    decision: str
    subject: str
    """What it is about, for the docs: ``message say, field text``."""
    accepts: tuple[Acceptance, ...] = ()
    """The breaking changes it records as accepted (docs/evolution.md)."""


@dataclass(frozen=True)
class Constant:
    name: str
    py_name: str
    value: Any
    unit: str
    group: str
    description: str
    env: str | None
    side: str | None
    source: str | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class CloseCode:
    """A WebSocket close code an end of the protocol uses."""

    name: str
    py_name: str
    code: int
    description: str
    source: str | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class EnumValue:
    value: str | int
    py_name: str
    description: str


@dataclass(frozen=True)
class Enum:
    name: str
    description: str
    open: bool
    values: tuple[EnumValue, ...]
    message_types: bool
    """Every value is a message type: the messages' union is generated too."""
    source: str | None
    decisions: tuple[Decision, ...]

    @property
    def is_int(self) -> bool:
        return isinstance(self.values[0].value, int)


@dataclass(frozen=True)
class ErrorCode:
    code: str
    py_name: str
    description: str
    used_in: str | None
    recoverable: bool | None
    carried_by: tuple[str, ...]
    """The message types (or ``http``) whose code field carries it."""
    raised_by: str | None
    """``protocol`` or ``application`` when only that side raises it."""
    end_reason: tuple[Enum, EnumValue] | None
    """The end reason of the session the error ends, if it names one."""
    close_code: CloseCode | None
    """The close code that follows the error at once (a refusal), if one."""
    source: str | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class TypeRef:
    """A field's type: a primitive, an enum, a nested struct, or an array or map of one."""

    kind: str
    """string, integer, number, boolean, datetime, object, any, enum, struct, array or map."""
    item: TypeRef | None = None
    enum: Enum | None = None
    struct: str | None = None

    @property
    def element(self) -> TypeRef:
        """The item type of an array or map, else the type itself."""
        return self.item if self.item is not None else self


@dataclass(frozen=True)
class Bound:
    """A numeric bound: a literal, or a constant (the generated code names the constant)."""

    value: int | float
    constant: Constant | None


@dataclass(frozen=True)
class Field:
    wire_name: str
    py_name: str
    type: TypeRef
    required: bool
    nullable: bool
    has_default: bool
    default: Any
    has_const: bool
    const: Any
    minimum: Bound | None
    maximum: Bound | None
    min_length: Bound | None
    max_length: Bound | None
    min_bytes: Bound | None
    max_bytes: Bound | None
    pattern: str | None
    not_blank: bool
    unique_by: str | None
    code: str | None
    stamped: bool
    """The sending end's core fills it: a typed send does not take it."""
    description: str
    source: str | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class Rule:
    kind: str
    fields: tuple[Field, ...]
    field: Field | None
    other: Field | None
    equals: Any
    count: int | None
    code: str | None
    description: str


@dataclass(frozen=True)
class Struct:
    """A nested object type."""

    name: str
    description: str
    reject_unknown_fields: bool
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...]
    source: str | None
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class Example:
    description: str
    source: str | None
    json: dict[str, Any]
    line: int


@dataclass(frozen=True)
class Message:
    type: str
    class_name: str
    senders: tuple[str, ...]
    group: str
    summary: str
    description: str
    fields: tuple[Field, ...]
    """Every field on the wire but ``type``: the sender's envelope, the included sets, its own."""
    rules: tuple[Rule, ...]
    examples: tuple[Example, ...]
    source: str | None
    decisions: tuple[Decision, ...]
    base: FieldSet | None
    """The one field set the message's shared fields come from (its base class), if one."""
    stamped: bool
    """The sending end's core builds and sends it whole: no typed send method."""
    session: str | None = None
    """Its part in the session (``start``, ``resume``...: the format's ``session``), if one."""

    @property
    def own_fields(self) -> tuple[Field, ...]:
        """The fields the message adds to its base's."""
        return self.fields[len(self.base.fields) :] if self.base is not None else self.fields


@dataclass(frozen=True)
class FieldSet:
    """A named group of fields that senders and messages include (an envelope, a command's)."""

    name: str
    class_name: str
    fields: tuple[Field, ...]
    users: tuple[str, ...]
    """Who carries it: sender ids (every message they send) and message types."""


@dataclass(frozen=True)
class Sender:
    id: str
    role: str
    """The runtime role that is this end (``engine``, ``gateway``): the typed API's name."""
    title: str
    description: str
    union_name: str
    accepts_unknown: bool
    envelope: tuple[Field, ...]
    """The fields every message of the sender carries (its included field sets)."""
    envelope_name: str | None
    """The Struct of the envelope alone (a field set's class, or a class of several), or None."""
    messages: tuple[Message, ...]
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class Union:
    """A named union of message classes: a sender's messages, a field set's, an enum's."""

    name: str
    types_name: str
    """The frozenset of the members' wire types."""
    description: str
    members: tuple[Message, ...]


@dataclass(frozen=True)
class FrameField:
    name: str
    kind: str
    size: int
    offset: int
    const: int | None
    enum: Enum | None
    flags: tuple[tuple[int, str, str], ...]
    """(bit, name, description) of each named bit."""
    description: str
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class FrameExample:
    description: str
    header: dict[str, int]
    fill: bytes

    def to_bytes(self, frame: Frame) -> bytes:
        """The example frame as it travels."""
        order = frame.byte_order
        out = b"".join(self.header[f.name].to_bytes(f.size, order) for f in frame.fields[:-1])
        payload = frame.fields[-1].size
        return out + (self.fill * (payload // len(self.fill) + 1))[:payload]


@dataclass(frozen=True)
class Frame:
    name: str
    description: str
    byte_order: Literal["little", "big"]
    size: int
    error: str
    fields: tuple[FrameField, ...]
    examples: tuple[FrameExample, ...]
    source: str | None
    decisions: tuple[Decision, ...]

    @property
    def header(self) -> tuple[FrameField, ...]:
        return self.fields[:-1]

    @property
    def payload(self) -> FrameField:
        return self.fields[-1]


@dataclass(frozen=True)
class Protocol:
    id: str
    title: str
    version: str
    document: str
    notes: str | None
    description: str
    max_message_bytes: Constant
    senders: tuple[Sender, ...]
    field_sets: tuple[FieldSet, ...]
    """The field sets in use, each generated as a base class of the messages that carry it."""
    unions: tuple[Union, ...]
    """Every sender's union, then one per field set messages include, then one per enum of
    message types."""
    errors: tuple[ErrorCode, ...]
    decode_errors: dict[str, str]
    close_codes: tuple[CloseCode, ...]
    constants: tuple[Constant, ...]
    enums: tuple[Enum, ...]
    structs: tuple[Struct, ...]
    messages: tuple[Message, ...]
    frames: tuple[Frame, ...]
    transport: dict[str, Any]
    transport_decisions: tuple[Decision, ...]
    decisions: tuple[Decision, ...]
    """Every decision of the spec, wherever it stands, in file order."""
    spec_file: str
    spec_sha256: str
    machines: tuple[Machine, ...] = ()
    """Each role's session state machine (``sessions:``), in the spec's order."""

    def sender(self, sender_id: str) -> Sender:
        return next(s for s in self.senders if s.id == sender_id)

    def struct(self, name: str) -> Struct:
        return next(s for s in self.structs if s.name == name)

    @property
    def max_nesting_depth(self) -> Constant:
        """The constant bounding how deep a message nests (``max_nesting_depth``)."""
        return next(c for c in self.constants if c.name == "max_nesting_depth")

    @property
    def max_read_depth(self) -> Constant:
        """The constant bounding how deep a text is read at all (``max_read_depth``)."""
        return next(c for c in self.constants if c.name == "max_read_depth")


def resolve(raw: RawSpec) -> Protocol:
    """Resolve a schema-checked spec; raise :class:`SpecError` listing every problem."""
    protocol = _Resolver(raw).run()
    roles = {s.role for s in protocol.senders}
    decisions = {d.id for d in protocol.decisions}
    machines = resolve_machines(raw, protocol.id, roles, decisions)
    return dataclasses.replace(protocol, machines=machines)


@dataclass
class _Resolver:
    raw: RawSpec
    problems: list[Problem] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    decision_lines: dict[str, int] = field(default_factory=dict)
    decision_sites: list[tuple[int, str, PathT]] = field(default_factory=list)
    """(line, id, path of the id) of every decision, to report duplicates in file order."""
    moves: list[tuple[PathT, str]] = field(default_factory=list)
    """(path, target) of every acceptance's ``moved_to``, checked once close codes are known."""
    constants: dict[str, Constant] = field(default_factory=dict)
    enums: dict[str, Enum] = field(default_factory=dict)
    struct_names: set[str] = field(default_factory=set)
    error_codes: set[str] = field(default_factory=set)
    field_sets: dict[str, FieldSet] = field(default_factory=dict)

    def fail(self, path: PathT, message: str) -> None:
        self.problems.append(self.raw.problem(path, message))

    def run(self) -> Protocol:
        data = self.raw.data
        protocol = data["protocol"]
        errors = tuple(self._error(e, ("errors", i)) for i, e in enumerate(data["errors"]))
        self._unique([e.code for e in errors], ("errors",), "error code", "code")
        self.error_codes = {e.code for e in errors}
        decode_errors = dict(data["decode_errors"])
        for klass, code in decode_errors.items():
            self._code(code, ("decode_errors", klass))
        constants = tuple(
            self._constant(c, ("constants", i)) for i, c in enumerate(data["constants"])
        )
        self._unique([c.name for c in constants], ("constants",), "constant", "name")
        self.constants = {c.name: c for c in constants}
        enums = tuple(self._enum(e, ("enums", i)) for i, e in enumerate(data.get("enums", [])))
        self.enums = {e.name: e for e in enums}
        struct_data = data.get("types", [])
        self.struct_names = {t["name"] for t in struct_data}
        named = [
            (x["name"], (key, i, "name"))
            for key in ("enums", "types", "frames")
            for i, x in enumerate(data.get(key, []))
        ]
        self._unique([n for n, _ in named], (), "type name", None, [w for _, w in named])
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
        structs = tuple(self._struct(t, ("types", i)) for i, t in enumerate(struct_data))
        self._check_struct_cycles(structs)
        sender_data = data["senders"]
        sender_ids = [s["id"] for s in sender_data]
        self._unique(sender_ids, ("senders",), "sender", "id")
        envelopes: dict[str, tuple[Field, ...]] = {}
        for i, s in enumerate(sender_data):
            envelopes[s["id"]] = self._include(
                s.get("include", []), field_sets, ("senders", i, "include")
            )
        messages = tuple(
            self._message(m, ("messages", i), envelopes, field_sets)
            for i, m in enumerate(data["messages"])
        )
        self._unique([m.type for m in messages], ("messages",), "message type", "type")
        self._check_session_roles(messages)
        # Messages against each other and against enums and types (duplicate message types and
        # type names are reported above, so each counts once here).
        classes: list[tuple[str, PathT]] = []
        for i, m in enumerate(messages):
            if m.type not in [x.type for x in messages[:i]]:
                spelled = "name" if "name" in data["messages"][i] else "type"
                classes.append((m.class_name, ("messages", i, spelled)))
        for name, where in named:
            if where[0] != "frames" and name not in [n for n, w in classes if w[0] != "messages"]:
                classes.append((name, where))
        self._unique(
            [n for n, _ in classes], (), "Python class name", None, [w for _, w in classes]
        )
        senders = tuple(
            Sender(
                id=s["id"],
                role=s.get("role", s["id"]),
                title=s["title"],
                description=s["description"],
                union_name=names.sender_union(s["id"]),
                accepts_unknown=s["unknown_types"] == "accept",
                envelope=envelopes[s["id"]],
                envelope_name=self._envelope_name(s),
                messages=tuple(m for m in messages if s["id"] in m.senders),
                decisions=self._decisions(s, ("senders", i), f"sender {s['id']}"),
            )
            for i, s in enumerate(sender_data)
        )
        for i, m in enumerate(data["messages"]):
            for j, sender_id in enumerate(m["senders"]):
                if sender_id not in sender_ids:
                    self.fail(("messages", i, "senders", j), f"unknown sender {sender_id!r}")
        taken = dict(classes) | {
            fs.class_name: ("field_sets", fs.name) for fs in self.field_sets.values()
        }
        unions = self._unions(senders, messages, enums, taken)
        close_codes = tuple(
            self._close_code(c, ("close_codes", i))
            for i, c in enumerate(data.get("close_codes", []))
        )
        self._unique([c.name for c in close_codes], ("close_codes",), "close code", "name")
        self._unique([str(c.code) for c in close_codes], ("close_codes",), "close code", "code")
        errors = tuple(
            self._error_facts(e, raw_error, ("errors", i), messages, close_codes)
            for i, (e, raw_error) in enumerate(zip(errors, data["errors"], strict=True))
        )
        frames = tuple(self._frame(f, ("frames", i)) for i, f in enumerate(data.get("frames", [])))
        transport = dict(data.get("transport", {}))
        transport_decisions = self._decisions(transport, ("transport",), "transport")
        transport.pop("decisions", None)
        self._check_networks(transport)
        self._decisions(protocol, ("protocol",), "the protocol")
        self._decisions(data, (), "the protocol")
        max_bytes = self.constants.get(protocol["max_message_bytes"])
        if max_bytes is None or not isinstance(max_bytes.value, int):
            self.fail(
                ("protocol", "max_message_bytes"),
                f"unknown integer constant {protocol['max_message_bytes']!r}",
            )
        for key in ("subprotocol", "endpoint"):
            twin = self.constants.get(key)
            if key in transport and twin is not None and twin.value != transport[key]:
                self.fail(
                    ("transport", key),
                    f"transport.{key} {transport[key]!r} differs from "
                    f"the constant {key} {twin.value!r}",
                )
        version = self.constants.get("protocol_version")
        if version is not None and version.value != protocol["version"]:
            self.fail(
                ("protocol", "version"),
                f"protocol.version {protocol['version']!r} differs from the constant "
                f"protocol_version {version.value!r}",
            )
        close_names = {c.name for c in close_codes}
        for at, target in self.moves:
            if target.removeprefix("close_codes.") not in close_names:
                self.fail(at, f"moved to {target!r}, which is no close code of this spec")
        # Items resolve in no file order (senders after messages): a duplicate is the later one.
        sites = sorted(self.decision_sites, key=lambda site: site[0])
        self._unique([s[1] for s in sites], (), "decision id", None, [s[2] for s in sites])
        if self.problems:
            raise SpecError(self.problems)
        assert max_bytes is not None
        return Protocol(
            id=protocol["id"],
            title=protocol["title"],
            version=protocol["version"],
            document=protocol["document"],
            notes=protocol.get("notes"),
            description=protocol["description"].strip(),
            max_message_bytes=max_bytes,
            senders=senders,
            field_sets=tuple(
                fs
                for fs in self.field_sets.values()
                if any(m.base is fs for m in messages)
                or any(s.envelope_name == fs.class_name for s in senders)
            ),
            unions=unions,
            errors=errors,
            decode_errors=decode_errors,
            close_codes=close_codes,
            constants=constants,
            enums=enums,
            structs=structs,
            messages=messages,
            frames=frames,
            transport=transport,
            transport_decisions=transport_decisions,
            decisions=tuple(sorted(self.decisions, key=lambda d: self.decision_lines[d.id])),
            spec_file=self.raw.display,
            spec_sha256=self.raw.sha256,
        )

    # -- pieces -------------------------------------------------------------------------------

    def _envelope_name(self, sender: dict[str, Any]) -> str | None:
        """The class of a sender's envelope: its one field set's, or one of its own for several."""
        included = sender.get("include", [])
        if not included:
            return None
        if len(included) == 1 and included[0] in self.field_sets:
            return self.field_sets[included[0]].class_name
        return names.envelope(sender["id"])

    def _decisions(self, item: dict[str, Any], path: PathT, subject: str) -> tuple[Decision, ...]:
        out = []
        for i, d in enumerate(item.get("decisions", [])):
            where = (*path, "decisions", i)
            self.decision_sites.append((self.raw.line(where), d["id"], (*where, "id")))
            if d["id"] in self.decision_lines:
                continue  # a duplicate, reported by run() in file order
            self.decision_lines[d["id"]] = self.raw.line(where)
            for j, a in enumerate(d.get("accepts", [])):
                if "moved_to" in a:
                    self.moves.append(((*where, "accepts", j, "moved_to"), a["moved_to"]))
            accepts = tuple(
                Acceptance(
                    a["rule"],
                    a.get("message"),
                    a.get("field"),
                    a.get("old"),
                    a.get("new"),
                    a.get("moved_to"),
                )
                for a in d.get("accepts", [])
            )
            decision = Decision(
                d["id"], d["quote"].strip(), d["source"], d["decision"].strip(), subject, accepts
            )
            self.decisions.append(decision)
            out.append(decision)
        return tuple(out)

    def _unique(
        self,
        values: list[str],
        path: PathT,
        what: str,
        key: str | None,
        paths: list[PathT] | None = None,
    ) -> None:
        """Report every repeated value: at ``paths[index]`` when given, else at ``key`` of
        ``path[index]``."""
        seen: dict[str, int] = {}
        for index, value in enumerate(values):
            if value in seen:
                where: PathT = (*path, index, key) if key is not None else path
                first = self.raw.line((*path, seen[value])) if key is not None else None
                if paths is not None:
                    where, first = paths[index], self.raw.line(paths[seen[value]])
                suffix = f" (first at line {first})" if first else ""
                self.fail(where, f"duplicate {what} {value!r}{suffix}")
            else:
                seen[value] = index

    def _check_session_roles(self, messages: tuple[Message, ...]) -> None:
        """A session role but ``event`` belongs to one message, which one sender sends; where a
        session has a ``start``, each sender has an ``event`` too."""
        roles = [(i, m.session) for i, m in enumerate(messages) if m.session not in (None, "event")]
        self._unique(
            [str(role) for _, role in roles],
            ("messages",),
            "session role",
            None,
            [("messages", i, "session") for i, _ in roles],
        )
        for i, role in roles:
            if len(messages[i].senders) != 1:
                self.fail(
                    ("messages", i, "session"),
                    f"a message with session role {role!r} has one sender, not "
                    f"{len(messages[i].senders)}",
                )
        if "start" in (role for _, role in roles):
            with_event = {s for m in messages if m.session == "event" for s in m.senders}
            for i, sender in enumerate(self.raw.data["senders"]):
                if sender["id"] not in with_event:
                    self.fail(
                        ("senders", i, "id"),
                        f"{sender['id']} sends no message with session role 'event': the "
                        "session vectors play one between the others",
                    )

    def _code(self, code: str | None, path: PathT) -> None:
        if code is not None and code not in self.error_codes:
            self.fail(path, f"unknown error code {code!r}")

    def _error(self, e: dict[str, Any], path: PathT) -> ErrorCode:
        return ErrorCode(
            code=e["code"],
            py_name=names.enum_member(e["code"], None),
            description=e["description"].strip(),
            used_in=e.get("used_in"),
            recoverable=e.get("recoverable"),
            carried_by=tuple(e.get("carried_by", ())),
            raised_by=e.get("raised_by"),
            end_reason=None,
            close_code=None,
            source=e.get("source"),
            decisions=self._decisions(e, path, f"error code {e['code']}"),
        )

    def _error_facts(
        self,
        error: ErrorCode,
        e: dict[str, Any],
        path: PathT,
        messages: tuple[Message, ...],
        close_codes: tuple[CloseCode, ...],
    ) -> ErrorCode:
        """``error`` with its carriers checked and its close code and end reason resolved
        (after the messages, close codes and enums they name)."""
        types = {m.type for m in messages}
        for i, carrier in enumerate(error.carried_by):
            if carrier != "http" and carrier not in types:
                self.fail((*path, "carried_by", i), f"unknown message type {carrier!r}")
        if "close_code" in e:
            close = next((c for c in close_codes if c.name == e["close_code"]), None)
            if close is None:
                self.fail((*path, "close_code"), f"unknown close code {e['close_code']!r}")
            else:
                error = dataclasses.replace(error, close_code=close)
        spelled = e.get("end_reason")
        if spelled is None:
            return error
        enum = self.enums.get(spelled["enum"])
        if enum is None:
            self.fail((*path, "end_reason", "enum"), f"unknown enum {spelled['enum']!r}")
            return error
        value = next((v for v in enum.values if v.value == spelled["value"]), None)
        if value is None:
            self.fail(
                (*path, "end_reason", "value"),
                f"{spelled['value']!r} is not a value of {enum.name}",
            )
            return error
        others = {e.get("end_reason", {}).get("enum") for e in self.raw.data["errors"]} - {None}
        if len(others) > 1:
            self.fail(
                (*path, "end_reason", "enum"), f"end reasons name several enums: {sorted(others)}"
            )
        return dataclasses.replace(error, end_reason=(enum, value))

    def _close_code(self, c: dict[str, Any], path: PathT) -> CloseCode:
        return CloseCode(
            name=c["name"],
            py_name=names.enum_member(c["name"], None),
            code=c["code"],
            description=c["description"].strip(),
            source=c.get("source"),
            decisions=self._decisions(c, path, f"close code {c['name']}"),
        )

    def _unions(
        self,
        senders: tuple[Sender, ...],
        messages: tuple[Message, ...],
        enums: tuple[Enum, ...],
        taken: dict[str, PathT],
    ) -> tuple[Union, ...]:
        """Each sender's messages, each message-included field set's, each enum of types'.

        ``taken``: the Python class names in use, where each is spelled; a union may not reuse one.
        """
        found: list[tuple[Union, PathT]] = [
            (self._union(s.union_name, f"Every message the {s.id} may send.", s.messages), where)
            for s, where in zip(
                senders, [("senders", i, "id") for i in range(len(senders))], strict=True
            )
        ]
        raw_messages = self.raw.data["messages"]
        for name in self.field_sets:
            members = tuple(
                m
                for m, raw in zip(messages, raw_messages, strict=True)
                if name in raw.get("include", [])
            )
            if members:
                listed = ", ".join(m.type for m in members)
                doc = f"Every message that carries the ``{name}`` field set: {listed}."
                union = self._union(names.field_set_union(name), doc, members)
                found.append((union, ("field_sets", name)))
        by_type = {m.type: m for m in messages}
        for i, e in enumerate(enums):
            if not e.message_types:
                continue
            missing = [str(v.value) for v in e.values if v.value not in by_type]
            if missing:
                self.fail(
                    ("enums", i, "message_types"),
                    f"{e.name} holds values that are no message type: {', '.join(missing)}",
                )
                continue
            doc = f"Every message whose type is a value of {e.name}."
            members = tuple(by_type[str(v.value)] for v in e.values)
            found.append(
                (self._union(names.enum_union(e.name), doc, members), ("enums", i, "name"))
            )
        for union, where in found:
            if union.name in taken:
                first = self.raw.line(taken[union.name])
                self.fail(where, f"the union {union.name} has the name of a class (line {first})")
        return tuple(union for union, _ in found)

    @staticmethod
    def _union(name: str, description: str, members: tuple[Message, ...]) -> Union:
        return Union(name, names.union_types(name), description, members)

    def _constant(self, c: dict[str, Any], path: PathT) -> Constant:
        return Constant(
            name=c["name"],
            py_name=names.constant(c["name"]),
            value=c["value"],
            unit=c["unit"],
            group=c["group"],
            description=c["description"].strip(),
            env=c.get("env"),
            side=c.get("side"),
            source=c.get("source"),
            decisions=self._decisions(c, path, f"constant {c['name']}"),
        )

    def _enum(self, e: dict[str, Any], path: PathT) -> Enum:
        values = []
        kinds = {type(v["value"]) for v in e["values"]}
        if len(kinds) > 1:
            self.fail((*path, "values"), "values mix strings and integers")
        for i, v in enumerate(e["values"]):
            if isinstance(v["value"], int) and "name" not in v:
                self.fail((*path, "values", i), "an integer value needs a name")
            values.append(
                EnumValue(
                    v["value"],
                    names.enum_member(v["value"], v.get("name")),
                    v["description"].strip(),
                )
            )
        self._unique([str(v.value) for v in values], (*path, "values"), "enum value", "value")
        self._unique(
            [v.py_name for v in values],
            (*path, "values"),
            "enum member name",
            None,
            [(*path, "values", i) for i in range(len(values))],
        )
        return Enum(
            name=e["name"],
            description=e["description"].strip(),
            open=e.get("open", False),
            values=tuple(values),
            message_types=e.get("message_types", False),
            source=e.get("source"),
            decisions=self._decisions(e, path, f"enum {e['name']}"),
        )

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
        pattern = f.get("pattern")
        if pattern is not None:
            if element != "string":
                self.fail((*path, "pattern"), "pattern needs a string field")
            elif not (pattern.startswith("^") and pattern.endswith("$")):
                self.fail((*path, "pattern"), f"pattern {pattern!r} is not anchored (^...$)")
            else:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    self.fail((*path, "pattern"), f"bad regular expression: {exc}")
        if f.get("not_blank") and element != "string":
            self.fail((*path, "not_blank"), "not_blank needs a string field")
        unique_by = f.get("unique_by")
        if unique_by is not None:
            if ref.kind != "array":
                self.fail((*path, "unique_by"), "unique_by needs an array field")
            elif ref.element.kind == "struct":
                inner = next(t for t in self.raw.data["types"] if t["name"] == ref.element.struct)
                if unique_by not in {x["name"] for x in inner["fields"]}:
                    self.fail(
                        (*path, "unique_by"), f"{ref.element.struct} has no field {unique_by!r}"
                    )
            elif unique_by != "value":
                self.fail((*path, "unique_by"), "an array of values is unique_by: value")
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

    def _include(
        self, wanted: list[str], sets: dict[str, tuple[Field, ...]], path: PathT
    ) -> tuple[Field, ...]:
        out: tuple[Field, ...] = ()
        for i, name in enumerate(wanted):
            if name not in sets:
                self.fail((*path, i), f"unknown field set {name!r}")
            else:
                out += sets[name]
        return out

    def _message(
        self,
        m: dict[str, Any],
        path: PathT,
        envelopes: dict[str, tuple[Field, ...]],
        field_sets: dict[str, tuple[Field, ...]],
    ) -> Message:
        envelope_sets = {tuple(envelopes.get(s, ())) for s in m["senders"]}
        if len(envelope_sets) > 1:
            self.fail((*path, "senders"), "senders with different envelopes cannot share a message")
        envelope = next(iter(envelope_sets))
        own = self._fields(m.get("fields", []), (*path, "fields"), f"message {m['type']}")
        included = self._include(m.get("include", []), field_sets, (*path, "include"))
        fields = envelope + included + own
        # Where each field comes from: its field set (envelope), the include entry, its own entry.
        envelope_names: list[str] = next(
            (
                s.get("include", [])
                for s in self.raw.data["senders"]
                if s["id"] in m["senders"] and envelopes[s["id"]] == envelope
            ),
            [],
        )
        paths: list[PathT] = [
            ("field_sets", name, j)
            for name in envelope_names
            for j in range(len(field_sets.get(name, ())))
        ]
        for k, name in enumerate(m.get("include", [])):
            paths += [(*path, "include", k)] * len(field_sets.get(name, ()))
        paths += [(*path, "fields", i) for i in range(len(own))]
        self._check_names(fields, paths)
        examples = tuple(
            Example(
                e["description"].strip(),
                e.get("source"),
                e["json"],
                self.raw.line((*path, "examples", i)),
            )
            for i, e in enumerate(m["examples"])
        )
        for i, example in enumerate(examples):
            if example.json.get("type") != m["type"]:
                self.fail(
                    (*path, "examples", i, "json", "type"),
                    f"example of {m['type']} has type {example.json.get('type')!r}",
                )
        sets = [*envelope_names, *m.get("include", [])]
        base = self.field_sets.get(sets[0]) if len(set(sets)) == 1 else None
        return Message(
            base=base,
            stamped=m.get("stamped", False),
            session=m.get("session"),
            type=m["type"],
            class_name=m.get("name") or names.class_name(m["type"]),
            senders=tuple(m["senders"]),
            group=m["group"],
            summary=m["summary"].strip(),
            description=m.get("description", "").strip(),
            fields=fields,
            rules=self._rules(m.get("rules", []), fields, (*path, "rules")),
            examples=examples,
            source=m.get("source"),
            decisions=self._decisions(m, path, f"message {m['type']}"),
        )

    def _frame(self, f: dict[str, Any], path: PathT) -> Frame:
        fields = []
        offset = 0
        for i, x in enumerate(f["fields"]):
            where = (*path, "fields", i)
            kind = x["type"]
            size = _FRAME_SIZES.get(kind) or x.get("size", 0)
            if kind in _FRAME_UNSUPPORTED:
                self.fail((*where, "type"), _FRAME_UNSUPPORTED[kind])
            if kind == "bytes" and "size" not in x:
                self.fail(where, "a bytes field needs a size")
            if kind != "bytes" and "size" in x and x["size"] != size:
                self.fail((*where, "size"), f"{kind} is {size} bytes, not {x['size']}")
            if kind == "bytes" and i != len(f["fields"]) - 1:
                self.fail(where, "only the last field (the payload) may be bytes")
            if kind != "bytes" and i == len(f["fields"]) - 1:
                self.fail(where, "the last field must be the bytes payload")
            enum = None
            if "enum" in x:
                enum = self.enums.get(x["enum"])
                if enum is None:
                    self.fail((*where, "enum"), f"unknown enum {x['enum']!r}")
                elif not enum.is_int:
                    self.fail((*where, "enum"), f"enum {x['enum']} has no integer values")
            bits = [(b["bit"], b["name"], b["description"].strip()) for b in x.get("flags", [])]
            for j, (bit, _, _) in enumerate(bits):
                if kind in _FRAME_SIZES and bit >= 8 * size:
                    self.fail((*where, "flags", j, "bit"), f"bit {bit} does not fit a {kind}")
            if "const" in x and kind in _FRAME_SIZES and not 0 <= x["const"] < 2 ** (8 * size):
                self.fail((*where, "const"), f"{x['const']} does not fit a {kind}")
            fields.append(
                FrameField(
                    name=x["name"],
                    kind=kind,
                    size=size,
                    offset=offset,
                    const=x.get("const"),
                    enum=enum,
                    flags=tuple(bits),
                    description=x["description"].strip(),
                    decisions=self._decisions(x, where, f"frame {f['name']}, field {x['name']}"),
                )
            )
            offset += size
        if offset != f["size"]:
            self.fail((*path, "size"), f"the fields add up to {offset} bytes, not {f['size']}")
        direction = next((i for i, x in enumerate(fields[:-1]) if x.enum is not None), None)
        if fields and direction is None:
            self.fail(
                (*path, "fields"),
                "no header field has an enum: the decoders check one (the direction) against "
                "the sender",
            )
        elif direction is not None:
            self._check_direction(fields[direction], (*path, "fields", direction, "enum"))
        self._code(f["error"], (*path, "error"))
        header_names = [x.name for x in fields[:-1]]
        examples = []
        for i, e in enumerate(f["examples"]):
            where = (*path, "examples", i)
            if sorted(e["header"]) != sorted(header_names):
                self.fail(
                    (*where, "header"), f"an example header sets exactly {', '.join(header_names)}"
                )
            examples.append(
                FrameExample(e["description"].strip(), dict(e["header"]), bytes.fromhex(e["fill"]))
            )
        return Frame(
            name=f["name"],
            description=f["description"].strip(),
            byte_order=f["byte_order"],
            size=f["size"],
            error=f["error"],
            fields=tuple(fields),
            examples=tuple(examples),
            source=f.get("source"),
            decisions=self._decisions(f, path, f"frame {f['name']}"),
        )

    def _check_direction(self, direction: FrameField, path: PathT) -> None:
        """The direction enum names the sender of each value (``client_to_server``), which is
        how the frame vectors know what each sender's frames carry."""
        senders = [s["id"] for s in self.raw.data["senders"]]
        assert direction.enum is not None
        spelled = next(e for e in self.raw.data["enums"] if e["name"] == direction.enum.name)
        if any("name" not in v for v in spelled["values"]):
            return  # a value without its name is the problem, reported with the enum
        named = {
            s
            for v in direction.enum.values
            for s in senders
            if v.py_name.lower().startswith(f"{s}_to_")
        }
        if named != set(senders):
            wanted = ", ".join(f"{s}_to_..." for s in senders)
            self.fail(
                path,
                f"the values of {direction.enum.name} name the sender of each direction "
                f"({wanted}): none names {', '.join(sorted(set(senders) - named))}",
            )

    def _check_networks(self, transport: dict[str, Any]) -> None:
        hosts = transport.get("plaintext_hosts")
        if not hosts:
            return
        for key, version in (("ipv4", 4), ("ipv6", 6), ("ipv6_zone", 6)):
            for i, text in enumerate(hosts[key]):
                try:
                    net = ipaddress.ip_network(text)
                except ValueError as exc:
                    self.fail(("transport", "plaintext_hosts", key, i), f"bad network: {exc}")
                    continue
                if net.version != version:
                    self.fail(
                        ("transport", "plaintext_hosts", key, i), f"not an IPv{version} network"
                    )
