"""The findings of ``python -m codegen breaking``: every rule by its stable id, and one finding.

A rule (:data:`RULES`) is of kind ``wire`` or ``api``; a :class:`Finding` names the protocol, the
message (or frame) and the field, says which side it breaks and carries the item's old and new
values, to which a decision's acceptance is pinned. :class:`Context` is where a comparison of one
message or frame stands, and :func:`at` a finding there.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from codegen.ir import Protocol

__all__ = ["RULES", "Context", "Finding", "Kind", "RuleInfo", "Side", "at", "plain"]

Side = Literal["old_senders", "old_receivers", "both", "users"]
Kind = Literal["wire", "api"]


@dataclass(frozen=True)
class RuleInfo:
    """What a rule id means."""

    kind: Kind
    summary: str


RULES: Final[dict[str, RuleInfo]] = {
    "PROTOCOL_REMOVED": RuleInfo("wire", "a protocol's spec is gone"),
    "PROTOCOL_VERSION_NOT_BUMPED": RuleInfo(
        "wire", "a wire-breaking change without a new protocol.version"
    ),
    "MESSAGE_REMOVED": RuleInfo("wire", "a message type is gone"),
    "MESSAGE_RENAMED": RuleInfo("wire", "a message type has a new name, same fields"),
    "MESSAGE_ADDED": RuleInfo(
        "wire", "a new message type sent to receivers that reject unknown types"
    ),
    "MESSAGE_SENDER_ADDED": RuleInfo("wire", "a message has a new sender"),
    "MESSAGE_SENDER_REMOVED": RuleInfo("wire", "a sender may no longer send a message"),
    "MESSAGE_RULE_ADDED": RuleInfo("wire", "a rule across fields (exactly_one_of...) is new"),
    "MESSAGE_RULE_REMOVED": RuleInfo("wire", "a rule across fields is gone"),
    "FIELD_REMOVED": RuleInfo("wire", "a field is gone"),
    "FIELD_RENAMED": RuleInfo("wire", "a field has a new wire name, same type"),
    "FIELD_ADDED_REQUIRED": RuleInfo("wire", "a new required field"),
    "FIELD_ADDED_UNKNOWN_REJECTED": RuleInfo(
        "wire", "a new optional field in an object whose receivers reject unknown fields"
    ),
    "FIELD_TYPE_CHANGED": RuleInfo("wire", "a field's type changed (integer to number...)"),
    "FIELD_CARDINALITY_CHANGED": RuleInfo("wire", "a field changed between scalar, array and map"),
    "FIELD_REQUIRED_ADDED": RuleInfo("wire", "an optional field became required"),
    "FIELD_REQUIRED_REMOVED": RuleInfo("wire", "a required field became optional"),
    "FIELD_NULLABLE_CHANGED": RuleInfo("wire", "a field may now, or may no longer, be null"),
    "FIELD_DEFAULT_CHANGED": RuleInfo("wire", "an optional field's default changed"),
    "FIELD_LIMIT_TIGHTENED": RuleInfo("wire", "a range, length, byte or count limit narrowed"),
    "FIELD_LIMIT_LOOSENED": RuleInfo("wire", "a range, length, byte or count limit widened"),
    "FIELD_PATTERN_CHANGED": RuleInfo("wire", "a pattern was added, removed or changed"),
    "FIELD_NOT_BLANK_CHANGED": RuleInfo("wire", "not_blank was added or removed"),
    "FIELD_CONST_CHANGED": RuleInfo("wire", "a const was added, removed or changed"),
    "FIELD_UNIQUE_CHANGED": RuleInfo("wire", "a uniqueness rule was added, removed or changed"),
    "ENUM_VALUE_REMOVED": RuleInfo("wire", "a value of a closed enum is gone"),
    "ENUM_VALUE_RENAMED": RuleInfo("wire", "a value of an enum has a new spelling"),
    "ENUM_VALUE_ADDED": RuleInfo("wire", "a value added to a closed enum"),
    "ENUM_CLOSED": RuleInfo("wire", "an open enum became closed"),
    "ENUM_OPENED": RuleInfo("wire", "a closed enum became open"),
    "ERROR_CODE_REMOVED": RuleInfo("wire", "an error code is gone"),
    "FRAME_REMOVED": RuleInfo("wire", "a binary frame is gone"),
    "FRAME_SIZE_CHANGED": RuleInfo("wire", "a binary frame's size changed"),
    "FRAME_LAYOUT_CHANGED": RuleInfo(
        "wire", "a frame's fields, offsets, widths or byte order changed"
    ),
    "FRAME_FLAGS_CHANGED": RuleInfo("wire", "a frame field's flag bits changed"),
    "FRAME_CONST_CHANGED": RuleInfo("wire", "a frame field's constant value changed"),
    "CLOSE_CODE_REMOVED": RuleInfo("wire", "a WebSocket close code is gone"),
    "CLOSE_CODE_CHANGED": RuleInfo("wire", "a close code's number changed"),
    "CONSTANT_CHANGED": RuleInfo("wire", "a protocol constant's value changed"),
    "TIMING_CHANGED": RuleInfo("wire", "a timing constant's value changed"),
    "TRANSPORT_CHANGED": RuleInfo("wire", "the subprotocol or endpoint changed"),
    "MESSAGE_CLASS_RENAMED": RuleInfo("api", "a message's Python class has a new name"),
    "FIELD_ATTRIBUTE_RENAMED": RuleInfo("api", "a field's Python attribute has a new name"),
    "ENUM_MEMBER_RENAMED": RuleInfo("api", "an enum value's Python member has a new name"),
    "ERROR_CODE_MEMBER_RENAMED": RuleInfo("api", "an error code's Python member has a new name"),
    "CLOSE_CODE_MEMBER_RENAMED": RuleInfo("api", "a close code's Python member has a new name"),
    "CONSTANT_REMOVED": RuleInfo("api", "a generated constant is gone"),
    "CONSTANT_RENAMED": RuleInfo("api", "a constant's Python name changed"),
}
"""Every rule, by its stable id."""

_SUBJECTS: Final = (
    ("CONSTANT_", "constant"),
    ("TIMING_", "constant"),
    ("ERROR_CODE_", "error code"),
    ("CLOSE_CODE_", "close code"),
    ("TRANSPORT_", "transport"),
)
"""What ``field`` names in a finding about no message."""


@dataclass(frozen=True)
class Finding:
    """One breaking change."""

    rule: str
    side: Side
    protocol: str
    message: str | None
    """The message type or frame name; None for what belongs to the whole protocol."""
    field: str | None
    """The field's wire path (``patch.voice``), frame field, error code or constant."""
    detail: str
    senders: tuple[str, ...] = ()
    """Who sends the message: the old senders, or the senders whose old receivers break."""
    accepted_by: str | None = None
    """The id of the decision that accepts it."""
    values: tuple[Any, Any] = (None, None)
    """The item's old and new value (a number, a name, a type...; None where there is none): an
    acceptance is pinned to them, so a later change of the same item is a new finding."""

    @property
    def kind(self) -> Kind:
        return RULES[self.rule].kind

    def who(self) -> str:
        """Which side it breaks, in words."""
        peers = "/".join(self.senders)
        if self.side == "users":
            return "Python users of the generated API"
        if self.side == "both":
            return f"old {peers} senders and old receivers" if peers else "old peers of both sides"
        if self.side == "old_senders":
            return f"old {peers} senders" if peers else "old senders"
        return f"old receivers of {peers}" if peers else "old receivers"

    @property
    def old(self) -> Any:
        return plain(self.values[0])

    @property
    def new(self) -> Any:
        return plain(self.values[1])

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["values"]
        out["kind"] = self.kind
        out["senders"] = list(self.senders)
        out["old"], out["new"] = self.old, self.new
        return out

    def __str__(self) -> str:
        what = "field"
        if self.message is None:
            what = next(
                (word for prefix, word in _SUBJECTS if self.rule.startswith(prefix)), "item"
            )
        where = ", ".join(
            part
            for part in (
                f"message {self.message}" if self.message else "",
                f"{what} {self.field}" if self.field else "",
            )
            if part
        )
        accepted = f" [accepted by decision {self.accepted_by}]" if self.accepted_by else ""
        where = f"{where}: " if where else ""
        return (
            f"{self.protocol}: {where}{self.rule} ({self.kind}, breaks {self.who()}): "
            f"{self.detail}{accepted}"
        )


@dataclass(frozen=True)
class Context:
    """Where a comparison stands: both versions, and the message or frame being compared."""

    old: Protocol
    new: Protocol
    message: str
    senders: tuple[str, ...]

    @property
    def protocol(self) -> str:
        return self.new.id


def at(
    ctx: Context,
    rule: str,
    side: Side,
    path: str | None,
    detail: str,
    senders: tuple[str, ...] | None = None,
    *,
    values: tuple[Any, Any],
) -> Finding:
    """A finding of rule ``rule`` at ``path`` (a field's wire path, or None) of the message or
    frame ``ctx`` compares; its senders are the message's unless given."""
    return Finding(
        rule,
        side,
        ctx.protocol,
        ctx.message,
        path,
        detail,
        ctx.senders if senders is None else senders,
        values=values,
    )


def plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples are lists), so the spec's YAML compares equal."""
    return json.loads(json.dumps(value))
