"""The JSON message codec both generated protocol modules are built on.

A generated module describes its protocol (the message union of each sender, the error codes,
the bounds) and hands the description to ``JsonCodec``, which owns the one decode and encode
path: the size bound, typed msgspec decoding with decoders built once, and the translation of
every failure into the protocol's ``ProtocolError``. The rules typed decoding cannot carry are
the message classes' own: each runs its generated check when it is built, inside msgspec.
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
from functools import partial
from typing import Any, Final, Union

import msgspec

from voxwire._depth import deeper_than
from voxwire._rules import json_value_problem, native, written_difference
from voxwire.errors import ProtocolError

__all__ = [
    "DecodeErrorCodes",
    "JsonCodec",
    "SenderSpec",
    "UnknownMessage",
    "field_of_refused",
    "python_gate",
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


@dataclass(frozen=True, slots=True)
class SenderSpec:
    """What one sender may send: its message union, and whether unknown types decode.

    ``envelope`` is the Struct of the fields every message of the sender carries; a message of
    an unknown type that the sender may send must still carry a valid envelope.
    """

    union: Any
    accepts_unknown: bool
    envelope: type | None = None


def python_gate(
    *,
    decode: Callable[[bytes | str], Any],
    explain: Callable[[Exception, Any], Any],
    other: Callable[[Any], Any],
    quarter: int,
    limit: int,
) -> Callable[[Any], Any]:
    """A sender's decode function: the common cases, a str of at most ``quarter`` characters
    and UTF-8 bytes of at most ``limit`` (the bound: bytes are counted as they are), go
    straight to ``decode`` (msgspec, where the checks run as it builds each message), and
    ``explain(exc, data)`` answers what it raises; anything else goes to ``other(data)``, which
    measures and converts it first, and names the byte where bytes stop being UTF-8. Bytes are
    checked to be UTF-8 before msgspec reads them, as msgspec skips unknown fields unread.

    ``voxwire._speedups.gate`` is this function in C, used where it was built: the function it
    returns is a C method, so no Python frame stands between the caller and msgspec
    (tests/test_speedups.py holds both to one behaviour).
    """

    # type(x) rather than x.__class__: CPython specialises the call.
    def gate(data: Any) -> Any:
        kind = type(data)
        if (kind is str and len(data) <= quarter) or (
            kind is bytes and len(data) <= limit and (data.isascii() or _is_utf8(data))
        ):
            try:
                return decode(data)
            except Exception as exc:
                return explain(exc, data)
        return other(data)

    return gate


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_GATE: Final = native("gate", python_gate)
_ANY: Final = msgspec.json.Decoder()
_SKIP: Final = msgspec.json.Decoder(msgspec.Raw).decode  # checks the syntax, keeps nothing
_INDEX: Final = re.compile(r"\[\d+\]")
_MISSING: Final = re.compile(r"Object missing required field `([^`]+)`")


class JsonCodec:
    """Decodes and encodes the JSON messages of one protocol.

    Args:
        protocol: The protocol's id, for messages (``brisvox``).
        error: The protocol's ``ProtocolError`` subclass.
        codes: The error code of each class of decode failure.
        max_message_bytes: The largest message, in UTF-8 bytes: counted on the text as
            received by decode, on what it writes by encode (spec decision
            ``size-counted-as-sent``).
        max_nesting_depth: The deepest a value inside a message may nest arrays and objects,
            the message's own object counted as 1.
        max_read_depth: The deepest a text is read at all: deeper is malformed, whatever
            else it holds (msgspec runs out of stack near it, at a depth that depends on the
            caller's stack: such a text is measured and, within the bound, read again).
        senders: Each sender's id and what it may send.
        field_codes: Error codes that replace the default for one field of one message,
            keyed by (wire type, JSON path with indices written ``[]``).
    """

    __slots__ = (
        "_all_types",
        "_codes",
        "_decoders",
        "_depth",
        "_encoder",
        "_envelopes",
        "_error",
        "_field_codes",
        "_heads",
        "_max",
        "_protocol",
        "_quarter",
        "_read_depth",
        "_readers",
        "_runners",
        "_senders",
        "_types_by_sender",
        "_ungated",
    )

    def __init__(
        self,
        *,
        protocol: str,
        error: type[ProtocolError],
        codes: DecodeErrorCodes,
        max_message_bytes: int,
        max_nesting_depth: int,
        max_read_depth: int,
        senders: Mapping[str, SenderSpec],
        field_codes: Mapping[tuple[str, str], str],
    ) -> None:
        self._protocol = protocol
        self._error = error
        self._codes = codes
        self._max = max_message_bytes
        self._depth = max_nesting_depth
        self._read_depth = max_read_depth
        # A character is at most 4 UTF-8 bytes: a text of at most max/4 characters (or bytes)
        # is within the bound with no counting.
        self._quarter = max_message_bytes // 4
        self._senders = dict(senders)
        self._types_by_sender = {sid: _tags(spec.union) for sid, spec in senders.items()}
        self._envelopes: dict[str, Callable[[bytes | str], object]] = {
            sid: msgspec.json.Decoder(spec.envelope).decode
            for sid, spec in senders.items()
            if spec.envelope is not None
        }
        self._all_types = frozenset().union(*self._types_by_sender.values())
        # The error path reads the first `type` as the union did, and skips the rest unread.
        self._heads = {
            sid: msgspec.json.Decoder(_head_union(types)).decode
            for sid, types in self._types_by_sender.items()
        }
        # Encoding reads back what it wrote, with a typed decoder of the message's class.
        self._readers = {
            cls: msgspec.json.Decoder(cls).decode
            for spec in senders.values()
            for cls in getattr(spec.union, "__args__", (spec.union,))
        }
        self._field_codes = dict(field_codes)
        self._encoder = msgspec.json.Encoder()
        decoders = {sid: msgspec.json.Decoder(spec.union).decode for sid, spec in senders.items()}
        self._decoders = decoders
        self._ungated = {sid: self._ungated_runner(sid, decode) for sid, decode in decoders.items()}
        self._runners = {sid: self._runner(sid, decode) for sid, decode in decoders.items()}

    def decode(self, data: bytes | str, sender: str) -> Any:
        """Decode one message that ``sender`` sent; raise the protocol's error if it is bad."""
        return self.decoder(sender)(data)

    def decoder(self, sender: str) -> Callable[[bytes | str], Any]:
        """The decode function of one sender, built once: what a hot loop should call."""
        try:
            return self._runners[sender]
        except KeyError:
            raise ValueError(
                f"{self._protocol}: unknown sender {sender!r}; one of {sorted(self._runners)}"
            ) from None

    def _runner(self, sender: str, decode: Callable[[bytes | str], Any]) -> Callable[[Any], Any]:
        """The sender's decode function (``python_gate``, or the same gate in C)."""
        return _GATE(
            decode=decode,
            explain=partial(self._explain, sender=sender),
            other=partial(self._other, sender=sender),
            quarter=self._quarter,
            limit=self._max,
        )

    def _ungated_runner(
        self, sender: str, decode: Callable[[bytes | str], Any]
    ) -> Callable[[bytes | str], Any]:
        """Decoding of text or bytes already known to be UTF-8 and within the bound."""
        explain = self._explain

        def run(data: bytes | str) -> Any:
            try:
                return decode(data)
            except Exception as exc:
                return explain(exc, data, sender)

        return run

    def _explain(self, exc: Exception, data: bytes | str, sender: str) -> Any:
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

    def _other(self, data: Any, sender: str) -> Any:
        """Decode bytes, any other buffer, or a long text.

        A str is text already; bytes may hold anything (msgspec skips unknown fields unread),
        so they must be UTF-8, and any other buffer is read as the bytes it holds. A message
        over a quarter of the bound must fit the bound as received; how voxwire would write
        it again does not count (encode bounds what it writes).
        """
        if data.__class__ is not bytes or not data.isascii():
            data = self._as_text(data)
        if len(data) > self._quarter:
            self._check_size(data)
        return self._ungated[sender](data)

    def _failure(self, exc: Exception) -> ProtocolError:
        codes = self._codes
        if isinstance(exc, RecursionError):
            raise _OutOfStack from None  # _explain reads it again with room
        if isinstance(exc, UnicodeEncodeError):
            return self._error(codes.malformed, "text holds a lone surrogate (not valid UTF-8)")
        return self._error(codes.malformed, f"not valid JSON: {exc}")

    @property
    def _too_deep_to_read(self) -> str:
        return f"nested deeper than {self._read_depth} arrays and objects"

    def encode(self, message: Any) -> bytes:
        """Check ``message`` against every rule of the spec and return compact UTF-8 JSON.

        What was written is read back by the class's typed decoder and checked as decoding
        checks it, so encode and decode apply the same rules, types included; a value that
        would read back as another (an offset with seconds, an integer no float holds) is
        refused by its path.
        """
        cls = message.__class__
        if cls is UnknownMessage:
            return self._encode_unknown(message)
        try:
            read_back = self._readers[cls]
        except KeyError:
            raise TypeError(
                f"{self._protocol}.encode: not a {self._protocol} message: {cls.__name__}"
            ) from None
        message_type = message.type
        try:
            data = self._write(message, message_type)
        except ProtocolError:
            self._check_json(message, message_type)  # a value JSON cannot carry, by its path
            raise
        try:
            copy = read_back(data)
        except msgspec.ValidationError as exc:
            self._check_json(message, message_type)
            raise self._field_error(*_complaint(exc), message_type) from None
        except (msgspec.DecodeError, RecursionError) as exc:
            # Only a msgspec.Raw (assigned after the message was built: its check refuses
            # one) writes what is not JSON, or deeper than the reader's stack.
            self._check_json(message, message_type)
            raise self._error(self._codes.wrong_type, str(exc), message_type=message_type) from None
        if copy != message:
            # msgspec writes NaN as null, int keys as strings, sets as arrays: what was read
            # back differs. The walks (slow, only now) name the value, or find it harmless
            # (a tuple, a Struct or a datetime inside a free-form value).
            self._check_json(message, message_type)
            self._check_read_back(message, copy, message_type)
        return data

    def _encode_unknown(self, message: UnknownMessage) -> bytes:
        """An ``UnknownMessage`` is written back as received: its type must be its own, unknown."""
        tag = message.data.get("type") if isinstance(message.data, dict) else None
        if tag != message.type or not isinstance(tag, str):
            raise self._error(
                self._codes.malformed,
                f"data['type'] is {_shown(tag)}, not the message's type {_shown(message.type)}",
                message_type=message.type if isinstance(message.type, str) else None,
            )
        if tag in self._all_types:
            raise self._error(
                self._codes.malformed,
                "a known type: encode its message class, not an UnknownMessage",
                message_type=tag,
            )
        self._check_json(message.data, tag)
        data = self._write(message.data, tag)
        # It must read back as an unknown message of some sender: its envelope included.
        problem: ProtocolError | None = None
        for sender, spec in self._senders.items():
            if spec.accepts_unknown:
                try:
                    copy = self._runners[sender](data)
                except ProtocolError as exc:
                    problem = exc
                    continue
                self._check_read_back(message.data, copy.data, tag)
                return data
        raise problem or self._error(
            self._codes.unknown_type, "no sender may send a type it does not know", message_type=tag
        )

    def _check_read_back(self, value: Any, copy: Any, message_type: str) -> None:
        """Refuse ``value`` if what encode wrote of it reads back as another thing, by path."""
        difference = written_difference(value, copy, "$")
        if difference is not None:
            raise self._error(
                self._codes.invalid_value,
                difference[1],
                path=difference[0],
                message_type=message_type,
            )

    def _check_json(self, value: Any, message_type: str) -> None:
        problem = json_value_problem(value, "$", self._depth)
        if problem is not None:
            raise self._error(
                self._codes.wrong_type, problem[1], path=problem[0], message_type=message_type
            )

    def _write(self, payload: Any, message_type: str) -> bytes:
        try:
            data = self._encoder.encode(payload)
        except UnicodeEncodeError:
            raise self._error(
                self._codes.invalid_value,
                "text holds a lone surrogate (not valid UTF-8)",
                message_type=message_type,
            ) from None
        except (TypeError, ValueError, msgspec.EncodeError, RecursionError) as exc:
            raise self._error(self._codes.wrong_type, str(exc), message_type=message_type) from None
        if len(data) > self._max:
            raise self._error(
                self._codes.too_large,
                f"{len(data)} bytes encoded, at most {self._max}",
                message_type=message_type,
            )
        return data

    def _as_text(self, data: object) -> bytes | str:
        """Any buffer as the bytes it holds (its size checked first), once they are known to
        be UTF-8, what a text frame must be; a str subclass as a str."""
        if isinstance(data, str):
            return str(data)
        if isinstance(data, bytes):
            blob = data
            if len(blob) > self._max:  # the size first, as for any other buffer
                raise self._error(
                    self._codes.too_large, f"message of {len(blob)} bytes, at most {self._max}"
                )
        else:
            try:
                view = memoryview(data)  # type: ignore[arg-type]
            except TypeError:
                raise TypeError(
                    f"{self._protocol}.decode: expected str or a bytes-like object, "
                    f"not {type(data).__name__}"
                ) from None
            with view:
                if view.nbytes > self._max:
                    raise self._error(
                        self._codes.too_large,
                        f"message of {view.nbytes} bytes, at most {self._max}",
                    )
                blob = view.tobytes()
        try:
            blob.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self._error(
                self._codes.malformed, f"not valid UTF-8 at byte {exc.start}: {exc.reason}"
            ) from None
        return blob

    def _check_size(self, data: bytes | str) -> None:
        if isinstance(data, str):
            if len(data) <= self._max:  # at most 4 bytes a character: count exactly
                try:
                    size = len(data.encode("utf-8"))
                except UnicodeEncodeError:
                    raise self._error(
                        self._codes.malformed, "text holds a lone surrogate (not valid UTF-8)"
                    ) from None
            else:
                size = len(data)  # a lower bound that is already too large
        else:
            size = len(data)
        if size > self._max:
            raise self._error(
                self._codes.too_large, f"message of {size} bytes or more, at most {self._max}"
            )

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
            raise _OutOfStack from None  # _explain reads it again with room
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
                f"`type` is repeated with different values: {', '.join(map(_shown, types))}",
                path="$.type",
            ) from None
        if message_type in self._all_types:
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
                raise _OutOfStack from None  # _explain reads it again with room
        return UnknownMessage(type=message_type, data=whole)


class _OutOfStack(Exception):
    """msgspec or json ran out of stack reading a text no deeper than the read depth:
    ``JsonCodec._explain`` reads it again with room."""


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
    try:
        value = _ANY.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError):
        return None  # a str with a lone surrogate is no UTF-8 text either
    return value.get(name) if isinstance(value, dict) else None


def without_item(data: bytes | str, name: str, index: int) -> bytes | None:
    """The message with item ``index`` of its top-level array ``name`` left out, re-written
    (for a reader that drops one bad item and decodes the rest), or None when there is no
    such item."""
    try:
        value = _ANY.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError):
        return None  # a str with a lone surrogate is no UTF-8 text either
    items = value.get(name) if isinstance(value, dict) else None
    if not isinstance(items, list) or not 0 <= index < len(items):
        return None
    del items[index]
    return msgspec.json.encode(value)


def _complaint(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's complaint as (what, JSON path): ``Expected `str` - at `$.text```."""
    text = str(exc)
    detail, sep, where = text.rpartition(" - at `")
    return (detail, where[:-1]) if sep else (text, "$")


def _shown(value: object) -> str:
    """A short repr of any value, however deep or long (reprlib stops at a few levels)."""
    return reprlib.repr(value)


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
