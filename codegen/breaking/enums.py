"""Breaking changes of an enum (of a field, or of a frame's header field): closed or opened,
values removed, added or renamed on the wire, members renamed in Python."""

from __future__ import annotations

from collections.abc import Iterator

from codegen.breaking.findings import Context, Finding, at
from codegen.ir import Enum

__all__ = ["compare_enum"]


def compare_enum(ctx: Context, path: str, old: Enum, new: Enum) -> Iterator[Finding]:
    if old.open and not new.open:
        yield at(
            ctx,
            "ENUM_CLOSED",
            "old_senders",
            path,
            f"{new.name} no longer accepts other values",
            values=("open", "closed"),
        )
    if new.open and not old.open:
        yield at(
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
            yield at(
                ctx,
                "ENUM_VALUE_RENAMED",
                "both",
                path,
                f"{new.name} value {g.value!r} is now {a.value!r}",
                values=(g.value, a.value),
            )
        return
    for v in gone:
        yield at(
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
            yield at(
                ctx,
                "ENUM_VALUE_ADDED",
                "old_receivers",
                path,
                f"{new.name} value {v.value!r} is new; old receivers refuse it",
                values=(None, v.value),
            )
    for value, v in after.items():
        if value in before and before[value].py_name != v.py_name:
            yield at(
                ctx,
                "ENUM_MEMBER_RENAMED",
                "users",
                path,
                f"{new.name}.{before[value].py_name} is now {new.name}.{v.py_name}",
                values=(before[value].py_name, v.py_name),
            )
