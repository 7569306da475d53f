"""Breaking changes of what belongs to the whole protocol: error codes, close codes, constants
(a timing constant's change is its own rule) and the transport's subprotocol and endpoint."""

from __future__ import annotations

from collections.abc import Iterator

from codegen.breaking.findings import Finding
from codegen.ir import CloseCode, Constant, Protocol

__all__ = ["compare_close_codes", "compare_constants", "compare_errors", "compare_transport"]


def compare_errors(old: Protocol, new: Protocol) -> Iterator[Finding]:
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


def compare_close_codes(old: Protocol, new: Protocol) -> Iterator[Finding]:
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


def compare_constants(old: Protocol, new: Protocol) -> Iterator[Finding]:
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


def compare_transport(old: Protocol, new: Protocol) -> Iterator[Finding]:
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
