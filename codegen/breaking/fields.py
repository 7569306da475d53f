"""Breaking changes of fields: removed, renamed or added; their presence, nullability and
default, their type (and a nested type's fields and rules), their limits and checks; and rules
across fields (``exactly_one_of``...), of a message or of a nested type."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Final

from codegen.breaking.enums import compare_enum
from codegen.breaking.findings import Context, Finding, Side, at
from codegen.ir import JSON_SAFE_INTEGER, Bound, Field, Rule, TypeRef

__all__ = ["compare_fields", "compare_rules", "type_name"]

_MIN_BOUNDS: Final = ("minimum", "min_length", "min_bytes")
_MAX_BOUNDS: Final = ("maximum", "max_length", "max_bytes")


def _rule_key(rule: Rule) -> tuple[Any, ...]:
    return (
        rule.kind,
        tuple(f.wire_name for f in rule.fields),
        rule.field.wire_name if rule.field else None,
        rule.other.wire_name if rule.other else None,
        json.dumps(rule.equals, sort_keys=True),
        rule.count,
    )


def compare_rules(
    ctx: Context, prefix: str, old: tuple[Rule, ...], new: tuple[Rule, ...]
) -> Iterator[Finding]:
    before = {_rule_key(r): r for r in old}
    after = {_rule_key(r): r for r in new}
    where = prefix.rstrip(".") or None
    for key, r in after.items():
        if key not in before:
            yield at(
                ctx,
                "MESSAGE_RULE_ADDED",
                "old_senders",
                where,
                f"new rule {r.kind} ({r.description}): old senders may break it",
                values=(None, r.kind),
            )
    for key, r in before.items():
        if key not in after:
            yield at(
                ctx,
                "MESSAGE_RULE_REMOVED",
                "old_receivers",
                where,
                f"rule {r.kind} is gone ({r.description}): old receivers still enforce it",
                values=(r.kind, None),
            )


def compare_fields(
    ctx: Context,
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
            yield at(
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
        yield at(
            ctx,
            "FIELD_REMOVED",
            side,
            prefix + f.wire_name,
            f"removed: {why}",
            values=(f.wire_name, None),
        )
    for f in added:
        if f.required:
            yield at(
                ctx,
                "FIELD_ADDED_REQUIRED",
                "old_senders",
                prefix + f.wire_name,
                "new and required: old senders do not send it",
                values=(None, f.wire_name),
            )
        elif reject_unknown:
            yield at(
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
    return (type_name(f.type), f.required, f.nullable, f.pattern, f.not_blank, _bounds(f))


def _bounds(f: Field) -> tuple[float | None, ...]:
    return tuple(_bound(getattr(f, key)) for key in (*_MIN_BOUNDS, *_MAX_BOUNDS))


def _bound(bound: Bound | None) -> float | None:
    """A bound's value; the implicit JSON-safe range of an integer counts as none."""
    if bound is None or (bound.constant is None and abs(bound.value) == JSON_SAFE_INTEGER):
        return None
    return bound.value


def type_name(t: TypeRef) -> str:
    if t.item is not None:
        return f"{t.kind}<{type_name(t.item)}>"
    if t.kind == "enum" and t.enum is not None:
        return f"enum {t.enum.name}"
    if t.kind == "struct":
        return f"struct {t.struct}"
    return t.kind


_WIDER: Final = {("integer", "number"), ("enum", "string")}
"""(old, new) kinds whose new type accepts every old value."""


def _field(ctx: Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    if old.py_name != new.py_name:
        yield at(
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


def _presence(ctx: Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
    if new.required and not old.required:
        yield at(
            ctx,
            "FIELD_REQUIRED_ADDED",
            "old_senders",
            path,
            "now required: old senders may leave it out",
            values=(False, True),
        )
    if old.required and not new.required:
        yield at(
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
        yield at(
            ctx, "FIELD_NULLABLE_CHANGED", side, path, said, values=(old.nullable, new.nullable)
        )
    if (
        not old.required
        and not new.required
        and (old.has_default, old.default) != (new.has_default, new.default)
    ):
        was = repr(old.default) if old.has_default else "none"
        now = repr(new.default) if new.has_default else "none"
        yield at(
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


def _type(ctx: Context, path: str, old: TypeRef, new: TypeRef) -> Iterator[Finding]:
    containers = ("array", "map")
    if (old.kind in containers or new.kind in containers) and old.kind != new.kind:
        yield at(
            ctx,
            "FIELD_CARDINALITY_CHANGED",
            "both",
            path,
            f"{type_name(old)} is now {type_name(new)}",
            values=(type_name(old), type_name(new)),
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
        yield at(
            ctx,
            "FIELD_TYPE_CHANGED",
            side,
            path,
            f"{type_name(old)} is now {type_name(new)}",
            values=(type_name(old), type_name(new)),
        )
        return
    if old.enum is not None and new.enum is not None:
        yield from compare_enum(ctx, path, old.enum, new.enum)
    if old.kind == "struct" and old.struct is not None and new.struct is not None:
        yield from _struct(ctx, path, old.struct, new.struct)


def _struct(ctx: Context, path: str, old_name: str, new_name: str) -> Iterator[Finding]:
    old, new = ctx.old.struct(old_name), ctx.new.struct(new_name)
    yield from compare_rules(ctx, path + ".", old.rules, new.rules)
    yield from compare_fields(
        ctx, path + ".", old.fields, new.fields, reject_unknown=new.reject_unknown_fields
    )


def _limits(ctx: Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
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
        yield at(
            ctx,
            rule,
            side,
            path,
            f"{said}: {reader} receivers refuse what {writer} senders may send",
            values=(was, now),
        )


def _show(value: float | None) -> str:
    return "none" if value is None else repr(value)


def _checks(ctx: Context, path: str, old: Field, new: Field) -> Iterator[Finding]:
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
        yield at(
            ctx,
            rule,
            side,
            path,
            f"{key} {_show_value(was)} is now {_show_value(now)}",
            values=(was, now),
        )


def _show_value(value: Any) -> str:
    return "none" if value is None else "set" if value is True else repr(value)
