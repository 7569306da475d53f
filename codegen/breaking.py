"""``python -m codegen breaking``: what a spec change breaks, judged on the resolved specs.

Modelled on ``buf breaking``: every finding has a stable rule id (:data:`RULES`), names the message
(or frame) and the field, and says which side it breaks:

- ``old_senders``: peers built from the old spec send messages that receivers built from the new
  one refuse (or read differently);
- ``old_receivers``: peers built from the old spec refuse (or misread) what new senders write;
- ``both``;
- ``users``: the wire is unchanged but the generated Python API is not (a class or attribute
  renamed, a constant removed). Those findings are of kind ``api``; all others are ``wire``.

A decision in the new spec accepts findings by naming them (``accepts: [{rule, message, field}]``);
an accepted finding is reported but does not fail the check. docs/evolution.md lists the rules.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from codegen.ir import (
    JSON_SAFE_INTEGER,
    Bound,
    CloseCode,
    Constant,
    Enum,
    Field,
    Frame,
    Message,
    Protocol,
    Rule,
    TypeRef,
)
from codegen.loader import Problem, SpecError, load
from codegen.pipeline import load_protocols, spec_files
from codegen.render import ROOT
from codegen.resolver import resolve

__all__ = [
    "RULES",
    "Finding",
    "Report",
    "RuleInfo",
    "compare",
    "load_against",
    "report",
]

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

_MIN_BOUNDS: Final = ("minimum", "min_length", "min_bytes")
_MAX_BOUNDS: Final = ("maximum", "max_length", "max_bytes")


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
        return _plain(self.values[0])

    @property
    def new(self) -> Any:
        return _plain(self.values[1])

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
class _Context:
    """Where a comparison stands: both versions, and the message or frame being compared."""

    old: Protocol
    new: Protocol
    message: str
    senders: tuple[str, ...]

    @property
    def protocol(self) -> str:
        return self.new.id


def compare(old: Protocol, new: Protocol) -> list[Finding]:
    """Every breaking change from ``old`` to ``new``, accepted ones marked, in a stable order."""
    found = list(_compare(old, new))
    wire = [f for f in found if f.kind == "wire"]
    if old.version == new.version and any(not _accepted_by(new, f) for f in wire):
        found.append(
            Finding(
                "PROTOCOL_VERSION_NOT_BUMPED",
                "both",
                new.id,
                None,
                None,
                f"{len(wire)} wire-breaking change(s) and protocol.version is still "
                f"{new.version!r}",
                values=(old.version, new.version),
            )
        )
    return [replace(f, accepted_by=_accepted_by(new, f)) for f in found]


def _accepted_by(new: Protocol, finding: Finding) -> str | None:
    """The decision that accepts ``finding``: it names its rule, its item and both values."""
    for decision in new.decisions:
        for a in decision.accepts:
            if (
                a.rule == finding.rule
                and a.message in (None, finding.message)
                and a.field in (None, finding.field)
                and (_plain(a.old), _plain(a.new)) == (finding.old, finding.new)
            ):
                return decision.id
    return None


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples are lists), so the spec's YAML compares equal."""
    return json.loads(json.dumps(value))


def _compare(old: Protocol, new: Protocol) -> Iterator[Finding]:
    yield from _messages(old, new)
    yield from _errors(old, new)
    yield from _close_codes(old, new)
    yield from _constants(old, new)
    yield from _frames(old, new)
    for key in ("subprotocol", "endpoint"):
        if old.transport.get(key) != new.transport.get(key):
            yield Finding(
                "TRANSPORT_CHANGED",
                "both",
                new.id,
                None,
                key,
                f"transport.{key} {old.transport.get(key)!r} is now {new.transport.get(key)!r}",
                values=(old.transport.get(key), new.transport.get(key)),
            )


# -- messages -----------------------------------------------------------------------------------


def _messages(old: Protocol, new: Protocol) -> Iterator[Finding]:
    before = {m.type: m for m in old.messages}
    after = {m.type: m for m in new.messages}
    gone = [m for t, m in before.items() if t not in after]
    added = [m for t, m in after.items() if t not in before]
    for m in gone:
        twin = next((a for a in added if _same_shape(m, a)), None)
        if twin is not None:
            added.remove(twin)
            yield Finding(
                "MESSAGE_RENAMED",
                "both",
                new.id,
                m.type,
                None,
                f"{m.type} is now {twin.type}: each side refuses the other's name",
                m.senders,
                values=(m.type, twin.type),
            )
        else:
            yield Finding(
                "MESSAGE_REMOVED",
                "old_senders",
                new.id,
                m.type,
                None,
                f"{m.type} is gone: new receivers do not know it",
                m.senders,
                values=(m.type, None),
            )
    old_senders = {s.id: s for s in old.senders}
    for m in added:
        strict = [s for s in m.senders if s in old_senders and not old_senders[s].accepts_unknown]
        if strict:
            yield Finding(
                "MESSAGE_ADDED",
                "old_receivers",
                new.id,
                m.type,
                None,
                f"{m.type} is new and old receivers reject unknown types from {'/'.join(strict)}",
                tuple(strict),
                values=(None, m.type),
            )
    for kind, m in after.items():
        if kind in before:
            yield from _message(_Context(old, new, m.type, m.senders), before[kind], m)


def _same_shape(a: Message, b: Message) -> bool:
    return a.senders == b.senders and [_signature(f) for f in a.fields] == [
        _signature(f) for f in b.fields
    ]


def _signature(f: Field) -> tuple[str, str, bool]:
    return (f.wire_name, _type_name(f.type), f.required)


def _message(ctx: _Context, old: Message, new: Message) -> Iterator[Finding]:
    for sender in new.senders:
        if sender not in old.senders:
            yield _at(
                ctx,
                "MESSAGE_SENDER_ADDED",
                "old_receivers",
                None,
                f"{sender} may now send {new.type}; old receivers refuse it from {sender}",
                (sender,),
                values=(old.senders, new.senders),
            )
    for sender in old.senders:
        if sender not in new.senders:
            yield _at(
                ctx,
                "MESSAGE_SENDER_REMOVED",
                "old_senders",
                None,
                f"{sender} may no longer send {new.type}; new receivers refuse it",
                (sender,),
                values=(old.senders, new.senders),
            )
    if old.class_name != new.class_name:
        yield _at(
            ctx,
            "MESSAGE_CLASS_RENAMED",
            "users",
            None,
            f"class {old.class_name} is now {new.class_name}",
            values=(old.class_name, new.class_name),
        )
    yield from _rules(ctx, "", old.rules, new.rules)
    yield from _fields(ctx, "", old.fields, new.fields, reject_unknown=False)


def _at(
    ctx: _Context,
    rule: str,
    side: Side,
    path: str | None,
    detail: str,
    senders: tuple[str, ...] | None = None,
    *,
    values: tuple[Any, Any],
) -> Finding:
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


def _rule_key(rule: Rule) -> tuple[Any, ...]:
    return (
        rule.kind,
        tuple(f.wire_name for f in rule.fields),
        rule.field.wire_name if rule.field else None,
        rule.other.wire_name if rule.other else None,
        json.dumps(rule.equals, sort_keys=True),
        rule.count,
    )


def _rules(
    ctx: _Context, prefix: str, old: tuple[Rule, ...], new: tuple[Rule, ...]
) -> Iterator[Finding]:
    before = {_rule_key(r): r for r in old}
    after = {_rule_key(r): r for r in new}
    where = prefix.rstrip(".") or None
    for key, r in after.items():
        if key not in before:
            yield _at(
                ctx,
                "MESSAGE_RULE_ADDED",
                "old_senders",
                where,
                f"new rule {r.kind} ({r.description}): old senders may break it",
                values=(None, r.kind),
            )
    for key, r in before.items():
        if key not in after:
            yield _at(
                ctx,
                "MESSAGE_RULE_REMOVED",
                "old_receivers",
                where,
                f"rule {r.kind} is gone ({r.description}): old receivers still enforce it",
                values=(r.kind, None),
            )


def _fields(
    ctx: _Context,
    prefix: str,
    old: tuple[Field, ...],
    new: tuple[Field, ...],
    *,
    reject_unknown: bool,
) -> Iterator[Finding]:
    before = {f.wire_name: f for f in old}
    after = {f.wire_name: f for f in new}
    gone = [f for name, f in before.items() if name not in after]
    added = [f for name, f in after.items() if name not in before]
    for f in gone:
        twin = next((a for a in added if _same_field(f, a)), None)
        if twin is not None:
            added.remove(twin)
            yield _at(
                ctx,
                "FIELD_RENAMED",
                "both",
                prefix + f.wire_name,
                f"{prefix}{f.wire_name} is now {prefix}{twin.wire_name} on the wire",
                values=(f.wire_name, twin.wire_name),
            )
            continue
        if f.required:
            side: Side = "both" if reject_unknown else "old_receivers"
            why = "old receivers require it"
        else:
            side = "old_senders"
            why = "new receivers " + ("refuse" if reject_unknown else "ignore") + " it"
        yield _at(
            ctx,
            "FIELD_REMOVED",
            side,
            prefix + f.wire_name,
            f"removed: {why}",
            values=(f.wire_name, None),
        )
    for f in added:
        if f.required:
            yield _at(
                ctx,
                "FIELD_ADDED_REQUIRED",
                "old_senders",
                prefix + f.wire_name,
                "new and required: old senders do not send it",
                values=(None, f.wire_name),
            )
        elif reject_unknown:
            yield _at(
                ctx,
                "FIELD_ADDED_UNKNOWN_REJECTED",
                "old_receivers",
                prefix + f.wire_name,
                "new: old receivers reject unknown fields here",
                values=(None, f.wire_name),
            )
    for name, f in after.items():
        if name in before:
            yield from _field(ctx, prefix + name, before[name], f)


def _same_field(a: Field, b: Field) -> bool:
    """Whether ``b`` looks like ``a`` under another name: same type, presence and checks."""
    return _shape(a) == _shape(b)


def _shape(f: Field) -> tuple[Any, ...]:
    return (_type_name(f.type), f.required, f.nullable, f.pattern, f.not_blank, _bounds(f))


def _bounds(f: Field) -> tuple[float | None, ...]:
    return tuple(_bound(getattr(f, key)) for key in (*_MIN_BOUNDS, *_MAX_BOUNDS))


def _bound(bound: Bound | None) -> float | None:
    """A bound's value; the implicit JSON-safe range of an integer counts as none."""
    if bound is None or (bound.constant is None and abs(bound.value) == JSON_SAFE_INTEGER):
        return None
    return bound.value


def _type_name(t: TypeRef) -> str:
    if t.item is not None:
        return f"{t.kind}<{_type_name(t.item)}>"
    if t.kind == "enum" and t.enum is not None:
        return f"enum {t.enum.name}"
    if t.kind == "struct":
        return f"struct {t.struct}"
    return t.kind


_WIDER: Final = {("integer", "number"), ("enum", "string")}
"""(old, new) kinds whose new type accepts every old value."""


def _field(ctx: _Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    if old.py_name != new.py_name:
        yield _at(
            ctx,
            "FIELD_ATTRIBUTE_RENAMED",
            "users",
            path,
            f"attribute {old.py_name} is now {new.py_name}",
            values=(old.py_name, new.py_name),
        )
    yield from _presence(ctx, path, old, new)
    yield from _type(ctx, path, old.type, new.type)
    yield from _limits(ctx, path, old, new)
    yield from _checks(ctx, path, old, new)


def _presence(ctx: _Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    if new.required and not old.required:
        yield _at(
            ctx,
            "FIELD_REQUIRED_ADDED",
            "old_senders",
            path,
            "now required: old senders may leave it out",
            values=(False, True),
        )
    if old.required and not new.required:
        yield _at(
            ctx,
            "FIELD_REQUIRED_REMOVED",
            "old_receivers",
            path,
            "now optional: old receivers refuse a message without it",
            values=(True, False),
        )
    if old.nullable != new.nullable:
        side: Side = "old_receivers" if new.nullable else "old_senders"
        said = (
            "may now be null: old receivers refuse null"
            if new.nullable
            else ("may no longer be null: new receivers refuse old senders' null")
        )
        yield _at(
            ctx, "FIELD_NULLABLE_CHANGED", side, path, said, values=(old.nullable, new.nullable)
        )
    if (
        not old.required
        and not new.required
        and (old.has_default, old.default) != (new.has_default, new.default)
    ):
        was = repr(old.default) if old.has_default else "none"
        now = repr(new.default) if new.has_default else "none"
        yield _at(
            ctx,
            "FIELD_DEFAULT_CHANGED",
            "both",
            path,
            f"default {was} is now {now}: a message leaving it out means another value",
            values=(
                old.default if old.has_default else None,
                new.default if new.has_default else None,
            ),
        )


def _type(ctx: _Context, path: str, old: TypeRef, new: TypeRef) -> Iterator[Finding]:
    containers = ("array", "map")
    if (old.kind in containers or new.kind in containers) and old.kind != new.kind:
        yield _at(
            ctx,
            "FIELD_CARDINALITY_CHANGED",
            "both",
            path,
            f"{_type_name(old)} is now {_type_name(new)}",
            values=(_type_name(old), _type_name(new)),
        )
        return
    if old.item is not None and new.item is not None:
        yield from _type(ctx, path, old.item, new.item)
        return
    if old.kind != new.kind:
        if old.kind == "enum" and old.enum is not None and old.enum.open:
            wider = new.kind == "string"
        else:
            wider = (old.kind, new.kind) in _WIDER or new.kind == "any"
        narrower = (new.kind, old.kind) in _WIDER or old.kind == "any"
        side: Side = "old_receivers" if wider else "old_senders" if narrower else "both"
        yield _at(
            ctx,
            "FIELD_TYPE_CHANGED",
            side,
            path,
            f"{_type_name(old)} is now {_type_name(new)}",
            values=(_type_name(old), _type_name(new)),
        )
        return
    if old.enum is not None and new.enum is not None:
        yield from _enum(ctx, path, old.enum, new.enum)
    if old.kind == "struct" and old.struct is not None and new.struct is not None:
        yield from _struct(ctx, path, old.struct, new.struct)


def _struct(ctx: _Context, path: str, old_name: str, new_name: str) -> Iterator[Finding]:
    old, new = ctx.old.struct(old_name), ctx.new.struct(new_name)
    yield from _rules(ctx, path + ".", old.rules, new.rules)
    yield from _fields(
        ctx, path + ".", old.fields, new.fields, reject_unknown=new.reject_unknown_fields
    )


def _enum(ctx: _Context, path: str, old: Enum, new: Enum) -> Iterator[Finding]:
    if old.open and not new.open:
        yield _at(
            ctx,
            "ENUM_CLOSED",
            "old_senders",
            path,
            f"{new.name} no longer accepts other values",
            values=("open", "closed"),
        )
    if new.open and not old.open:
        yield _at(
            ctx,
            "ENUM_OPENED",
            "old_receivers",
            path,
            f"{new.name} now accepts any value; old receivers refuse new ones",
            values=("closed", "open"),
        )
    before = {v.value: v for v in old.values}
    after = {v.value: v for v in new.values}
    gone = [v for v in old.values if v.value not in after]
    added = [v for v in new.values if v.value not in before]
    renamed = (
        bool(gone)
        and len(gone) == len(added)
        and all(
            old.values.index(g) == new.values.index(a) for g, a in zip(gone, added, strict=True)
        )
    )
    if renamed:
        for g, a in zip(gone, added, strict=True):
            yield _at(
                ctx,
                "ENUM_VALUE_RENAMED",
                "both",
                path,
                f"{new.name} value {g.value!r} is now {a.value!r}",
                values=(g.value, a.value),
            )
        return
    for v in gone:
        yield _at(
            ctx,
            "ENUM_VALUE_REMOVED",
            "old_senders",
            path,
            f"{new.name} value {v.value!r} is gone"
            + (" (the enum is open: new receivers read it as unknown)" if new.open else ""),
            values=(v.value, None),
        )
    if not old.open:
        for v in added:
            yield _at(
                ctx,
                "ENUM_VALUE_ADDED",
                "old_receivers",
                path,
                f"{new.name} value {v.value!r} is new; old receivers refuse it",
                values=(None, v.value),
            )
    for value, v in after.items():
        if value in before and before[value].py_name != v.py_name:
            yield _at(
                ctx,
                "ENUM_MEMBER_RENAMED",
                "users",
                path,
                f"{new.name}.{before[value].py_name} is now {new.name}.{v.py_name}",
                values=(before[value].py_name, v.py_name),
            )


def _limits(ctx: _Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    for key in (*_MIN_BOUNDS, *_MAX_BOUNDS):
        was, now = _bound(getattr(old, key)), _bound(getattr(new, key))
        if was == now:
            continue
        lower = key in _MIN_BOUNDS
        if was is None:
            tighter = True
        elif now is None:
            tighter = False
        else:
            tighter = now > was if lower else now < was
        side: Side = "old_senders" if tighter else "old_receivers"
        rule = "FIELD_LIMIT_TIGHTENED" if tighter else "FIELD_LIMIT_LOOSENED"
        reader, writer = ("new", "old") if tighter else ("old", "new")
        said = f"{key} {_show(was)} is now {_show(now)}"
        yield _at(
            ctx,
            rule,
            side,
            path,
            f"{said}: {reader} receivers refuse what {writer} senders may send",
            values=(was, now),
        )


def _show(value: float | None) -> str:
    return "none" if value is None else repr(value)


def _checks(ctx: _Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    pairs: list[tuple[str, str, Any, Any]] = [
        ("FIELD_PATTERN_CHANGED", "pattern", old.pattern, new.pattern),
        ("FIELD_NOT_BLANK_CHANGED", "not_blank", old.not_blank or None, new.not_blank or None),
        (
            "FIELD_CONST_CHANGED",
            "const",
            json.dumps(old.const) if old.has_const else None,
            json.dumps(new.const) if new.has_const else None,
        ),
        ("FIELD_UNIQUE_CHANGED", "unique_by", old.unique_by, new.unique_by),
    ]
    for rule, key, was, now in pairs:
        if was == now:
            continue
        side: Side = "old_senders" if was is None else "old_receivers" if now is None else "both"
        yield _at(
            ctx,
            rule,
            side,
            path,
            f"{key} {_show_value(was)} is now {_show_value(now)}",
            values=(was, now),
        )


def _show_value(value: Any) -> str:
    return "none" if value is None else "set" if value is True else repr(value)


# -- protocol-wide items ------------------------------------------------------------------------


def _errors(old: Protocol, new: Protocol) -> Iterator[Finding]:
    after = {e.code: e for e in new.errors}
    for e in old.errors:
        if e.code not in after:
            yield Finding(
                "ERROR_CODE_REMOVED",
                "old_senders",
                new.id,
                None,
                e.code,
                f"error code {e.code} is gone: new receivers do not know it",
                values=(e.code, None),
            )
        elif after[e.code].py_name != e.py_name:
            yield Finding(
                "ERROR_CODE_MEMBER_RENAMED",
                "users",
                new.id,
                None,
                e.code,
                f"ErrorCode.{e.py_name} is now ErrorCode.{after[e.code].py_name}",
                values=(e.py_name, after[e.code].py_name),
            )


def _close_codes(old: Protocol, new: Protocol) -> Iterator[Finding]:
    after = {c.name: c for c in new.close_codes}
    for c in old.close_codes:
        now = after.get(c.name)
        yield from _close_code(new, c.name, c.code, now)
        if now is not None and now.py_name != c.py_name:
            yield Finding(
                "CLOSE_CODE_MEMBER_RENAMED",
                "users",
                new.id,
                None,
                c.name,
                f"CloseCode.{c.py_name} is now CloseCode.{now.py_name}",
                values=(c.py_name, now.py_name),
            )


def _close_code(
    new: Protocol, name: str, code: int, now: CloseCode | None, origin: str = ""
) -> Iterator[Finding]:
    """Close code ``name`` was ``code`` (``origin``: what it was, when no close code)."""
    said = f" ({origin})" if origin else ""
    if now is None:
        yield Finding(
            "CLOSE_CODE_REMOVED",
            "old_senders",
            new.id,
            None,
            name,
            f"close code {name} ({code}){said} is gone: new peers do not expect it",
            values=(code, None),
        )
    elif now.code != code:
        yield Finding(
            "CLOSE_CODE_CHANGED",
            "both",
            new.id,
            None,
            name,
            f"close code {name} is {now.code}, not {code}{said}",
            values=(code, now.code),
        )


def _is_timing(c: Constant) -> bool:
    return c.group == "timings" or c.unit in ("ms", "s", "seconds", "milliseconds")


def _constants(old: Protocol, new: Protocol) -> Iterator[Finding]:
    after = {c.name: c for c in new.constants}
    moved = {
        a.field: a.moved_to.removeprefix("close_codes.")
        for d in new.decisions
        for a in d.accepts
        if a.rule == "CONSTANT_REMOVED" and a.field is not None and a.moved_to is not None
    }
    for c in old.constants:
        now = after.get(c.name)
        if now is None:
            yield Finding(
                "CONSTANT_REMOVED",
                "users",
                new.id,
                None,
                c.name,
                f"constant {c.py_name} is gone",
                values=(c.value, None),
            )
            if c.name in moved:
                yield from _moved_close_code(new, c, moved[c.name])
            continue
        if now.py_name != c.py_name:
            yield Finding(
                "CONSTANT_RENAMED",
                "users",
                new.id,
                None,
                c.name,
                f"constant {c.py_name} is now {now.py_name}",
                values=(c.py_name, now.py_name),
            )
        if now.value != c.value and c.name != "protocol_version":
            rule = "TIMING_CHANGED" if _is_timing(c) else "CONSTANT_CHANGED"
            yield Finding(
                rule,
                "both",
                new.id,
                None,
                c.name,
                f"{c.name} {c.value!r} {c.unit} is now {now.value!r} {now.unit}".replace(
                    " none", ""
                ),
                values=(c.value, now.value),
            )


def _moved_close_code(new: Protocol, c: Constant, name: str) -> Iterator[Finding]:
    """A constant the new spec made close code ``name``: the wire changed if its number did."""
    now = next((x for x in new.close_codes if x.name == name), None)
    yield from _close_code(new, name, c.value, now, f"constant {c.name} in the older spec")


def _frames(old: Protocol, new: Protocol) -> Iterator[Finding]:
    after = {f.name: f for f in new.frames}
    for frame in old.frames:
        now = after.get(frame.name)
        if now is None:
            yield Finding(
                "FRAME_REMOVED",
                "both",
                new.id,
                frame.name,
                None,
                "the frame is gone",
                values=(frame.name, None),
            )
            continue
        yield from _frame(_Context(old, new, now.name, ()), frame, now)


def _frame(ctx: _Context, old: Frame, new: Frame) -> Iterator[Finding]:
    if old.size != new.size:
        yield _at(
            ctx,
            "FRAME_SIZE_CHANGED",
            "both",
            None,
            f"{old.size} bytes are now {new.size}",
            values=(old.size, new.size),
        )
    if old.byte_order != new.byte_order:
        yield _at(
            ctx,
            "FRAME_LAYOUT_CHANGED",
            "both",
            None,
            f"{old.byte_order}-endian is now {new.byte_order}",
            values=(old.byte_order, new.byte_order),
        )
    layout_old = [(f.name, f.kind, f.size, f.offset) for f in old.fields]
    layout_new = [(f.name, f.kind, f.size, f.offset) for f in new.fields]
    after = {f.name: f for f in new.fields}
    for before, field in zip(layout_old, old.fields, strict=True):
        if before not in layout_new:
            now = after.get(field.name)
            said = (
                "is gone"
                if now is None
                else f"{field.kind} at byte {field.offset} is now {now.kind} at byte {now.offset}"
            )
            yield _at(
                ctx,
                "FRAME_LAYOUT_CHANGED",
                "both",
                field.name,
                said,
                values=(
                    (field.kind, field.offset),
                    None if now is None else (now.kind, now.offset),
                ),
            )
    for after_layout in layout_new:
        if after_layout[0] not in {f.name for f in old.fields}:
            yield _at(
                ctx,
                "FRAME_LAYOUT_CHANGED",
                "both",
                after_layout[0],
                f"new at byte {after_layout[3]}",
                values=(None, (after_layout[1], after_layout[3])),
            )
    for field in old.fields:
        now = after.get(field.name)
        if now is None:
            continue
        if field.const != now.const:
            yield _at(
                ctx,
                "FRAME_CONST_CHANGED",
                "both",
                field.name,
                f"const {field.const} is now {now.const}",
                values=(field.const, now.const),
            )
        bits_old = {(bit, name) for bit, name, _ in field.flags}
        bits_new = {(bit, name) for bit, name, _ in now.flags}
        if bits_old != bits_new:
            side: Side = "old_receivers" if bits_old < bits_new else "both"
            change = ", ".join(
                [f"-{name}@{bit}" for bit, name in sorted(bits_old - bits_new)]
                + [f"+{name}@{bit}" for bit, name in sorted(bits_new - bits_old)]
            )
            yield _at(
                ctx,
                "FRAME_FLAGS_CHANGED",
                side,
                field.name,
                f"flags {change}",
                values=(tuple(sorted(bits_old)), tuple(sorted(bits_new))),
            )
        if field.enum is not None and now.enum is not None:
            yield from _enum(ctx, field.name, field.enum, now.enum)


# -- the command --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What ``breaking`` found for each protocol."""

    against: str
    findings: tuple[Finding, ...]

    @property
    def failing(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.accepted_by is None)

    def to_json(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "breaking": len(self.failing),
            "accepted": len(self.findings) - len(self.failing),
            "findings": [f.to_json() for f in self.findings],
        }

    def lines(self) -> Iterator[str]:
        yield from (str(f) for f in self.findings)
        accepted = len(self.findings) - len(self.failing)
        yield (
            f"{len(self.failing)} breaking change(s) against {self.against}"
            + (f", {accepted} accepted by decisions" if accepted else "")
        )


def load_against(ref: str, root: Path = ROOT) -> list[Protocol]:
    """The older specs: a path (a spec file, or a folder of them), else a git ref of ``root``."""
    given = Path(ref)
    if given.is_dir():
        return [_resolve(p, str(p)) for p in sorted(given.glob("*.yaml"))]
    if given.is_file():
        return [_resolve(given, ref)]
    known = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        raise SpecError([Problem(ref, 1, "", f"neither a spec path nor a git ref of {root}")])
    with tempfile.TemporaryDirectory() as tmp:
        out = []
        for path in spec_files(root):
            rel = path.relative_to(root).as_posix()
            shown = subprocess.run(
                ["git", "-C", str(root), "show", f"{ref}:{rel}"],
                capture_output=True,
                check=False,
            )
            if shown.returncode != 0:
                reason = shown.stderr.decode(errors="replace").strip()
                if "exists on disk, but not in" in reason or "does not exist in" in reason:
                    continue  # a protocol the older version did not have
                raise SpecError([Problem(f"{ref}:{rel}", 1, "", f"cannot read it: {reason}")])
            copy = Path(tmp) / path.name
            copy.write_bytes(shown.stdout)
            out.append(_resolve(copy, f"{ref}:{rel}"))
        return out


def _resolve(path: Path, shown: str) -> Protocol:
    return resolve(load(path, shown))


def report(against: str, root: Path = ROOT, current: Iterable[Protocol] | None = None) -> Report:
    """Compare the specs of ``root`` (or ``current``) with those of ``against``."""
    new = {p.id: p for p in (load_protocols(root) if current is None else current)}
    _check_acceptances(new.values())
    findings: list[Finding] = []
    for old in load_against(against, root):
        now = new.get(old.id)
        if now is None:
            findings.append(
                Finding(
                    "PROTOCOL_REMOVED",
                    "both",
                    old.id,
                    None,
                    None,
                    f"{old.id} has no spec now",
                    values=(old.id, None),
                )
            )
            continue
        findings += compare(old, now)
    return Report(against, tuple(findings))


def _check_acceptances(protocols: Iterable[Protocol]) -> None:
    """Refuse a decision that accepts a rule id that does not exist (a typo accepts nothing)."""
    problems = [
        Problem(p.spec_file, 1, f"decision {d.id}", f"accepts unknown rule {a.rule!r}")
        for p in protocols
        for d in p.decisions
        for a in d.accepts
        if a.rule not in RULES
    ]
    if problems:
        raise SpecError(problems)
