"""The intermediate representation: a spec with every reference resolved and every name decided.

A :class:`Protocol` holds its senders, messages, fields, rules, enums, nested types, field sets,
frames, error codes, close codes, constants and decisions, each a frozen dataclass the renderers
read. :func:`codegen.resolver.resolve` builds it from a schema-checked
:class:`~codegen.loader.RawSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from codegen.machines import Machine
from codegen.statistics import Statistics

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
]

JSON_SAFE_INTEGER = 2**53 - 1
"""The bound of an integer field the spec gives no range: the largest integer every JSON peer
(JavaScript included) reads exactly."""


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
    send_method: str
    """The name of its sender's typed send method (the spec's ``send_method``, or derived)."""
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
    statistics: Statistics | None = None
    """What the per-session statistics read (``statistics:``), if the spec says."""

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
