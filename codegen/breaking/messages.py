"""Breaking changes of messages: a message type removed, renamed or added, a sender added or
removed, a class renamed; then each kept message's rules and fields (:mod:`.fields`)."""

from __future__ import annotations

from collections.abc import Iterator

from codegen.breaking.fields import compare_fields, compare_rules, type_name
from codegen.breaking.findings import Context, Finding, at
from codegen.ir import Field, Message, Protocol

__all__ = ["compare_messages"]


def compare_messages(old: Protocol, new: Protocol) -> Iterator[Finding]:
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
            yield from _message(Context(old, new, m.type, m.senders), before[kind], m)


def _same_shape(a: Message, b: Message) -> bool:
    return a.senders == b.senders and [_signature(f) for f in a.fields] == [
        _signature(f) for f in b.fields
    ]


def _signature(f: Field) -> tuple[str, str, bool]:
    return (f.wire_name, type_name(f.type), f.required)


def _message(ctx: Context, old: Message, new: Message) -> Iterator[Finding]:
    for sender in new.senders:
        if sender not in old.senders:
            yield at(
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
            yield at(
                ctx,
                "MESSAGE_SENDER_REMOVED",
                "old_senders",
                None,
                f"{sender} may no longer send {new.type}; new receivers refuse it",
                (sender,),
                values=(old.senders, new.senders),
            )
    if old.class_name != new.class_name:
        yield at(
            ctx,
            "MESSAGE_CLASS_RENAMED",
            "users",
            None,
            f"class {old.class_name} is now {new.class_name}",
            values=(old.class_name, new.class_name),
        )
    yield from compare_rules(ctx, "", old.rules, new.rules)
    yield from compare_fields(ctx, "", old.fields, new.fields, reject_unknown=False)
