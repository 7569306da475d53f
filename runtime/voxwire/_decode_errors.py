"""The decoders' error path: why msgspec refused a text, in the protocol's words.

:class:`~voxwire._codec.JsonCodec` decodes straight through msgspec; what msgspec raises comes
here (:meth:`DecodeErrors.explain`), and leaves as the protocol's ``ProtocolError`` with its code,
its JSON path and the message's type, or as the :class:`UnknownMessage` that a message of a type
this version does not know decodes to. Reading no deeper than the decoder did, it finds the type
the sender's union dispatched on, a ``type`` repeated with another value, and text after the
complaint that is not JSON; where msgspec ran out of stack on a text within the read depth, the
text is read again with room, so that no verdict depends on the caller's stack.

The cores' refusals read the text they refuse here too (:func:`field_of_refused`,
:func:`without_item`).
"""

from __future__ import annotations

import json
import re
import reprlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Union

import msgspec

from voxwire._depth import deeper_than
from voxwire._rules import json_value_problem
from voxwire.errors import ProtocolError

if TYPE_CHECKING:
    from voxwire._codec import SenderSpec

__all__ = [
    "DecodeErrorCodes",
    "DecodeErrors",
    "UnknownMessage",
    "field_of_refused",
    "shown",
    "without_item",
]


class UnknownMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message of a type this version does not know, kept whole (forward compatibility).

    Decoded only from a sender whose unknown types the spec accepts; encoding it writes
    ``data`` back unchanged.
    """

    type: str
    """The message's wire ``type``."""
    data: dict[str, Any]
    """The whole JSON object as received, ``type`` included."""


@dataclass(frozen=True, slots=True)
class DecodeErrorCodes:
    """The protocol's error code for each class of decode failure (spec: ``decode_errors``)."""

    malformed: str
    missing_field: str
    wrong_type: str
    unknown_field: str
    invalid_value: str
    too_many: str
    too_large: str
    unknown_type: str
    wrong_sender: str


_ANY: Final = msgspec.json.Decoder()
_SKIP: Final = msgspec.json.Decoder(msgspec.Raw).decode  # checks the syntax, keeps nothing
_INDEX: Final = re.compile(r"\[\d+\]")
_MISSING: Final = re.compile(r"Object missing required field `([^`]+)`")


class DecodeErrors:
    """The error path of one protocol's decoders (what :class:`~voxwire._codec.JsonCodec`
    hands every exception msgspec raises).

    Args:
        error: The protocol's ``ProtocolError`` subclass.
        codes: The error code of each class of decode failure.
        max_nesting_depth: The deepest a value inside a message may nest.
        max_read_depth: The deepest a text is read at all.
        senders: Each sender's id and what it may send.
        field_codes: Error codes that replace the default for one field of one message.
        decoders: Each sender's typed decoder, to read a text again with room.
    """

    __slots__ = (
        "_codes",
        "_decoders",
        "_depth",
        "_envelopes",
        "_error",
        "_field_codes",
        "_heads",
        "_read_depth",
        "_senders",
        "_types_by_sender",
        "all_types",
    )

    def __init__(
        self,
        *,
        error: type[ProtocolError],
        codes: DecodeErrorCodes,
        max_nesting_depth: int,
        max_read_depth: int,
        senders: Mapping[str, SenderSpec],
        field_codes: Mapping[tuple[str, str], str],
        decoders: Mapping[str, Callable[[bytes | str], Any]],
    ) -> None:
        self._error = error
        self._codes = codes
        self._depth = max_nesting_depth
        self._read_depth = max_read_depth
        self._senders = dict(senders)
        self._field_codes = dict(field_codes)
        self._decoders = dict(decoders)
        self._types_by_sender = {sid: _tags(spec.union) for sid, spec in senders.items()}
        self._envelopes: dict[str, Callable[[bytes | str], object]] = {
            sid: msgspec.json.Decoder(spec.envelope).decode
            for sid, spec in senders.items()
            if spec.envelope is not None
        }
        self.all_types: frozenset[str] = frozenset().union(*self._types_by_sender.values())
        """Every type some sender sends."""
        # The error path reads the first `type` as the union did, and skips the rest unread.
        self._heads = {
            sid: msgspec.json.Decoder(_head_union(types)).decode
            for sid, types in self._types_by_sender.items()
        }

    def explain(self, exc: Exception, data: bytes | str, sender: str) -> Any:
        """Raise the protocol's error for a failed decode, or return the ``UnknownMessage``
        that a message of a type this version does not know decodes to.

        A text deeper than ``max_read_depth`` is malformed, whatever else it breaks (spec
        decision ``rule-order``). Where msgspec ran out of stack on a text within it (here or
        on the error path), the text is read again with room, so that no verdict depends on
        how deep the caller's stack already was.
        """
        if deeper_than(data, self._read_depth):
            raise self._error(self._codes.malformed, self._too_deep_to_read) from None
        try:
            return self._explain_once(exc, data, sender)
        except _OutOfStack:
            pass
        with _stack_room(3 * self._read_depth):
            try:
                return self._decoders[sender](data)
            except Exception as again:
                try:
                    return self._explain_once(again, data, sender)
                except _OutOfStack:
                    raise self._error(self._codes.malformed, self._too_deep_to_read) from None

    def read_back_error(self, exc: msgspec.ValidationError, message_type: str) -> ProtocolError:
        """The error for what a message's typed decoder refused of the text encode wrote."""
        return self._field_error(*_complaint(exc), message_type)

    def _explain_once(self, exc: Exception, data: bytes | str, sender: str) -> UnknownMessage:
        if isinstance(exc, msgspec.ValidationError):
            return self._recover(exc, data, sender)
        if isinstance(exc, msgspec.DecodeError | RecursionError | UnicodeEncodeError):
            raise self._failure(exc) from None
        if isinstance(exc, ProtocolError):
            # A message's check ran as msgspec built the message, before it read the text
            # after it: text that is not JSON is reported first, as a reader of it all would.
            try:
                _SKIP(data)
            except (msgspec.DecodeError, RecursionError) as syntax:
                raise self._failure(syntax) from None
        raise exc

    def _failure(self, exc: Exception) -> ProtocolError:
        codes = self._codes
        if isinstance(exc, RecursionError):
            raise _OutOfStack from None  # explain reads it again with room
        if isinstance(exc, UnicodeEncodeError):
            return self._error(codes.malformed, "text holds a lone surrogate (not valid UTF-8)")
        return self._error(codes.malformed, f"not valid JSON: {exc}")

    @property
    def _too_deep_to_read(self) -> str:
        return f"nested deeper than {self._read_depth} arrays and objects"

    def _recover(
        self,
        exc: msgspec.ValidationError,
        data: bytes | str,
        sender: str,
        message_type: str | None = None,
    ) -> UnknownMessage:
        """Turn msgspec's complaint into the protocol's error, or an ``UnknownMessage``.

        msgspec stops at the first invalid value. The error path reads no deeper than a
        decoder does: the first ``type`` (the one the union dispatched on) comes from a
        decoder of ``type`` alone that skips the rest, which also finds text after the
        complaint that is not JSON, and a later ``type`` that says another thing.
        """
        detail, path = _complaint(exc)
        codes = self._codes
        if detail.startswith("Number out of range"):
            raise self._error(
                codes.malformed, "a number too large to represent", path=path
            ) from None
        if path == "$" and detail.startswith("Expected `object`"):
            raise self._error(codes.malformed, "not a JSON object") from None
        if detail == "Object missing required field `type`" and path == "$":
            raise self._error(codes.malformed, "the object has no `type` field") from None
        if path == "$.type" and message_type is None:
            if detail.startswith("Expected `str`"):
                raise self._error(codes.malformed, "`type` is not a string") from None
            return self._unknown_tag(data, sender)
        if message_type is None:
            message_type = self._head_type(data, sender)
        raise self._field_error(detail, path, message_type) from None

    def _field_error(self, detail: str, path: str, message_type: str) -> ProtocolError:
        """The error for msgspec's complaint about one field of a message of a known type."""
        codes = self._codes
        missing = _MISSING.fullmatch(detail)
        if missing:
            path = f"{path}.{missing.group(1)}"
            code = codes.missing_field
            detail = "required field is missing"
        elif detail.startswith("Object contains unknown field"):
            code = codes.unknown_field
        elif detail.startswith(("Expected `array` of length <=", "Expected `object` of length <=")):
            code = codes.too_many
        elif ", got `" in detail:
            code = codes.wrong_type
        else:
            code = codes.invalid_value
            # The decoder's patterns end in \Z (see codegen); show the spec's $.
            detail = detail.replace("\\\\Z'", "$'")
        override = self._field_codes.get((message_type, _INDEX.sub("[]", path)))
        if override is not None and code not in (codes.missing_field, codes.wrong_type):
            code = override
        return self._error(code, detail, path=path, message_type=message_type)

    def _head_type(self, data: bytes | str, sender: str) -> str:
        """The type the sender's union dispatched on, reading ``type`` alone."""
        try:
            head = self._heads[sender](data)
        except msgspec.ValidationError:
            raise self._repeated() from None
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._failure(exc) from None
        tag: str = head.__struct_config__.tag
        return tag

    def _repeated(self) -> ProtocolError:
        return self._error(
            self._codes.malformed, "`type` is repeated with another value", path="$.type"
        )

    @staticmethod
    def _top_level_types(data: bytes | str, whole: dict[str, Any]) -> list[object]:
        """Every value of the top-level ``type`` key, in order: the one ``whole`` kept, when
        the text spells the key once and escapes nothing; else as ``json`` reads them (the
        text is JSON: msgspec read it whole)."""
        once = (
            data.count('"type"') == 1 and "\\u" not in data
            if isinstance(data, str)
            else (data.count(b'"type"') == 1 and b"\\u" not in data)
        )
        if once:
            return [whole["type"]]
        pairs: list[tuple[str, Any]] = []

        def keep(found: list[tuple[str, Any]]) -> dict[str, Any]:
            pairs[:] = found  # the top-level object is the last one the parser closes
            return {}

        try:
            json.loads(data, object_pairs_hook=keep, parse_int=len, parse_float=len)
        except RecursionError:
            raise _OutOfStack from None  # explain reads it again with room
        return [value for key, value in pairs if key == "type"]

    def _unknown_tag(self, data: bytes | str, sender: str) -> UnknownMessage:
        codes = self._codes
        try:
            whole = _ANY.decode(data)
        except msgspec.ValidationError:
            raise self._error(codes.malformed, "a number too large to represent") from None
        except (msgspec.DecodeError, RecursionError) as exc:
            raise self._failure(exc) from None
        problem = json_value_problem(whole, "$", self._depth)
        if problem is not None:  # only depth: it was read as JSON
            raise self._error(codes.malformed, problem[1], path=problem[0])
        types = self._top_level_types(data, whole)
        message_type = types[0]
        if not isinstance(message_type, str) or any(t != message_type for t in types[1:]):
            raise self._error(
                codes.malformed,
                f"`type` is repeated with different values: {', '.join(map(shown, types))}",
                path="$.type",
            ) from None
        if message_type in self.all_types:
            senders = sorted(
                s for s, types in self._types_by_sender.items() if message_type in types
            )
            raise self._error(
                codes.wrong_sender,
                f"the {sender} may not send it (sent by: {', '.join(senders)})",
                message_type=message_type,
            ) from None
        if not self._senders[sender].accepts_unknown:
            raise self._error(
                codes.unknown_type,
                f"unknown message type from the {sender}",
                message_type=message_type,
            ) from None
        envelope = self._envelopes.get(sender)
        if envelope is not None:
            try:
                envelope(data)
            except msgspec.ValidationError as exc:
                return self._recover(exc, data, sender, message_type)
            except RecursionError:
                raise _OutOfStack from None  # explain reads it again with room
        return UnknownMessage(type=message_type, data=whole)


class _OutOfStack(Exception):
    """msgspec or json ran out of stack reading a text no deeper than the read depth:
    :meth:`DecodeErrors.explain` reads it again with room."""


_ROOM: Final = threading.Lock()
"""One block at a time raises the limit, so two threads never restore each other's."""


@contextmanager
def _stack_room(frames: int) -> Iterator[None]:
    """Python's recursion limit raised by ``frames`` for the block (msgspec counts its own
    recursion against it); the error path only, so the lock is never contended for long."""
    with _ROOM:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(limit + frames)
        try:
            yield
        finally:
            sys.setrecursionlimit(limit)


def field_of_refused(data: bytes | str, name: str) -> Any:
    """The top-level field ``name`` of a message that failed decoding, as plain JSON, or None
    (not a JSON object, or no such field): what a refusal echoes, such as a command's id."""
    value = _plain(data)
    return value.get(name) if isinstance(value, dict) else None


def without_item(data: bytes | str, name: str, index: int) -> bytes | None:
    """The message with item ``index`` of its top-level array ``name`` left out, re-written
    (for a reader that drops one bad item and decodes the rest), or None when there is no
    such item."""
    value = _plain(data)
    items = value.get(name) if isinstance(value, dict) else None
    if not isinstance(items, list) or not 0 <= index < len(items):
        return None
    del items[index]
    return msgspec.json.encode(value)


def _plain(data: bytes | str) -> Any:
    """``data`` read as plain JSON, or None where it is no JSON text."""
    try:
        return _ANY.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError):
        return None  # a str with a lone surrogate is no UTF-8 text either


def shown(value: object) -> str:
    """A short repr of any value, however deep or long (reprlib stops at a few levels)."""
    return reprlib.repr(value)


def _complaint(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's complaint as (what, JSON path): ``Expected `str` - at `$.text```."""
    text = str(exc)
    detail, sep, where = text.rpartition(" - at `")
    return (detail, where[:-1]) if sep else (text, "$")


def _tags(union: Any) -> frozenset[str]:
    members = getattr(union, "__args__", (union,))
    return frozenset(
        member.__struct_config__.tag
        for member in members
        if isinstance(member.__struct_config__.tag, str)
    )


def _head_union(types: frozenset[str]) -> Any:
    """A union of one Struct per type with no field but the tag: decoding it reads the first
    ``type`` as the sender's union does (a later one must repeat it) and skips the rest."""
    heads = tuple(
        msgspec.defstruct(f"_Head{i}", [], tag_field="type", tag=tag)
        for i, tag in enumerate(sorted(types))
    )
    return heads[0] if len(heads) == 1 else Union[heads]  # noqa: UP007
