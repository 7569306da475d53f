"""The typed API of each role: a send method for each message it sends, with the message's
fields as keyword arguments, and the message types its ``on()`` takes (the other end's).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codegen import names
from codegen.ir import Field, Protocol, TypeRef
from codegen.pytext import default_literal, docstring

__all__ = ["PyRole", "PyRoles", "PySend", "build_roles"]


@dataclass(frozen=True)
class PySend:
    """One typed send method of a role."""

    method: str
    class_name: str
    params: list[tuple[str, str, str | None]]
    """(keyword, annotation, default literal or ``None`` when required) of each argument."""
    doc: list[str]
    args: list[tuple[str, str]]
    """(keyword, the field's first sentence) of each argument, for the docstring."""


@dataclass(frozen=True)
class PyRole:
    """The typed API of one role: what it sends (one method each) and what its ``on()`` takes."""

    role: str
    sends_class: str
    receives_class: str
    sent_union: str
    """The union of what the role sends (the send hook's ``kind``)."""
    sent_types: str
    received_types: str
    sends: list[PySend]
    receives: list[tuple[str, str]]
    """(wire type, class) of each message the other end sends."""
    envelope: list[str]
    """The wire names of the fields the core fills on every message the role sends."""
    sends_doc: list[str]
    receives_doc: list[str]


@dataclass(frozen=True)
class PyRoles:
    roles: list[PyRole]
    type_imports: list[str]
    """The message module's names the signatures use."""
    uses_unset: bool
    uses_any_value: bool
    uses_datetime: bool


def build_roles(protocol: Protocol) -> PyRoles:
    """The typed API of both ends of ``protocol``: each sender is a role, the other its peer."""
    if len(protocol.senders) != 2:
        raise ValueError(f"{protocol.id}: a typed API needs exactly two senders")
    used: set[str] = set()
    annotations: list[str] = []
    roles = []
    for own, peer in (protocol.senders, protocol.senders[::-1]):
        envelope = {f.wire_name for f in own.envelope}
        sends = []
        for m in own.messages:
            if m.stamped:
                continue
            params = []
            args = []
            for f in m.fields:
                if f.wire_name in envelope or f.stamped:
                    continue
                annotation, default = _param(f, used)
                annotations.append(annotation)
                params.append((f.py_name, annotation, default))
                args.append((f.py_name, _first_sentence(f.description)))
            sends.append(
                PySend(
                    method=m.send_method,
                    class_name=m.class_name,
                    params=params,
                    doc=docstring(
                        m.summary,
                        f"Sends ``{m.type}`` (:class:`{m.class_name}`); the arguments are its "
                        "fields.",
                    ),
                    args=args,
                )
            )
            used.add(m.class_name)
        receives = [(m.type, m.class_name) for m in peer.messages]
        used.update(name for _, name in receives)
        filled = [f.wire_name for f in own.envelope]
        stamped = sorted(
            {
                f"{m.type}.{f.wire_name}"
                for m in own.messages
                if not m.stamped
                for f in m.fields
                if f.stamped
            }
        )
        core_sends = [m.type for m in own.messages if m.stamped]
        notes = []
        if filled:
            notes.append(f"The core fills the envelope ({', '.join(filled)}) of every message.")
        if stamped:
            notes.append(f"It fills these fields too: {', '.join(stamped)}.")
        if core_sends:
            notes.append(
                f"No method here for {', '.join(core_sends)}: the core sends them, or the "
                "adapter through methods of its own."
            )
        sends_doc = docstring(
            f"A typed send method for each message the {own.role} sends ({own.title}).",
            f"Each calls ``{names.SEND_HOOK}(kind, fields)``, which the adapter implements: its "
            "one send path, given the message class and the arguments that were passed (an "
            f"argument left ``UNSET`` is absent). {' '.join(notes)}",
        )
        receives_doc = docstring(
            f"The typed ``{names.ON}()`` of the {own.role}: a handler for each message type the "
            f"{peer.role} sends, called with that message.",
            f"A type the {peer.role} does not send (unknown, or one only the {own.role} sends) "
            f"raises ``ValueError`` at once; a known one goes to ``{names.ON_HOOK}(message_type, "
            "handler)``, which the adapter implements.",
        )
        roles.append(
            PyRole(
                role=own.role,
                sends_class=names.role_sends(own.role),
                receives_class=names.role_receives(own.role),
                sent_union=own.union_name,
                sent_types=names.union_types(own.union_name),
                received_types=names.union_types(peer.union_name),
                sends=sends,
                receives=receives,
                envelope=filled,
                sends_doc=sends_doc,
                receives_doc=receives_doc,
            )
        )
        used.update({own.union_name, names.union_types(own.union_name)})
        used.add(names.union_types(peer.union_name))
    text = " ".join(annotations)
    return PyRoles(
        roles=roles,
        type_imports=sorted(used),
        uses_unset="UNSET" in text or "UnsetType" in text,
        uses_any_value=re.search(r"\bAny\b", text) is not None,
        uses_datetime=re.search(r"\bdatetime\b", text) is not None,
    )


def _first_sentence(text: str) -> str:
    """The first sentence of a field's description (an ``Args:`` entry), as a docstring holds it."""
    (paragraph,) = docstring(text.split("\n\n")[0])
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _param(f: Field, used: set[str]) -> tuple[str, str | None]:
    """The annotation and default of ``f`` as a keyword argument of a typed send.

    The annotation is the plain type (the message's constraints are checked when it is
    encoded); a list or object default, which a signature cannot share, is ``UNSET`` (absent).
    """
    annotation = _plain(f.type, f, used)
    default: str | None = None
    if f.has_default and not isinstance(f.default, list | dict):
        enum = f.type.enum if f.type.kind == "enum" else None
        if enum is not None and not enum.open and f.default is not None:
            member = next(v.py_name for v in enum.values if v.value == f.default)
            default = f"{enum.name}.{member}"
        elif f.default is None:
            default = "None"
        else:
            default = default_literal(f)
    elif not f.required:
        annotation += " | UnsetType"
        default = "UNSET"
    if f.nullable:
        annotation += " | None"
    return annotation, default


def _plain(ref: TypeRef, f: Field, used: set[str]) -> str:
    if f.has_const and ref is f.type:
        return f"Literal[{f.const!r}]"
    if ref.kind in ("array", "map"):
        assert ref.item is not None
        inner = _plain(ref.item, f, used)
        return f"list[{inner}]" if ref.kind == "array" else f"dict[str, {inner}]"
    if ref.kind == "enum":
        assert ref.enum is not None
        if ref.enum.open:
            return "str"
        used.add(ref.enum.name)
        return ref.enum.name
    if ref.kind == "struct":
        assert ref.struct is not None
        used.add(ref.struct)
        return ref.struct
    return {
        "string": "str",
        "integer": "int",
        "number": "float",
        "boolean": "bool",
        "datetime": "datetime",
        "object": "dict[str, Any]",
        "any": "Any",
    }[ref.kind]
