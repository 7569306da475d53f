"""Breaking changes of binary frames: a frame removed, its size, byte order or layout changed,
a header field's constant, flag bits or enum changed."""

from __future__ import annotations

from collections.abc import Iterator

from codegen.breaking.enums import compare_enum
from codegen.breaking.findings import Context, Finding, Side, at
from codegen.ir import Frame, FrameField, Protocol

__all__ = ["compare_frames"]


def compare_frames(old: Protocol, new: Protocol) -> Iterator[Finding]:
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
        yield from _frame(Context(old, new, now.name, ()), frame, now)


def _frame(ctx: Context, old: Frame, new: Frame) -> Iterator[Finding]:
    if old.size != new.size:
        yield at(
            ctx,
            "FRAME_SIZE_CHANGED",
            "both",
            None,
            f"{old.size} bytes are now {new.size}",
            values=(old.size, new.size),
        )
    if old.byte_order != new.byte_order:
        yield at(
            ctx,
            "FRAME_LAYOUT_CHANGED",
            "both",
            None,
            f"{old.byte_order}-endian is now {new.byte_order}",
            values=(old.byte_order, new.byte_order),
        )
    yield from _layout(ctx, old, new)
    after = {f.name: f for f in new.fields}
    for field in old.fields:
        now = after.get(field.name)
        if now is not None:
            yield from _field(ctx, field, now)


def _layout(ctx: Context, old: Frame, new: Frame) -> Iterator[Finding]:
    """Fields gone, moved, resized or new."""
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
            yield at(
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
            yield at(
                ctx,
                "FRAME_LAYOUT_CHANGED",
                "both",
                after_layout[0],
                f"new at byte {after_layout[3]}",
                values=(None, (after_layout[1], after_layout[3])),
            )


def _field(ctx: Context, field: FrameField, now: FrameField) -> Iterator[Finding]:
    """A header field's constant, flag bits and enum."""
    if field.const != now.const:
        yield at(
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
        yield at(
            ctx,
            "FRAME_FLAGS_CHANGED",
            side,
            field.name,
            f"flags {change}",
            values=(tuple(sorted(bits_old)), tuple(sorted(bits_new))),
        )
    if field.enum is not None and now.enum is not None:
        yield from compare_enum(ctx, field.name, field.enum, now.enum)
