"""The JSON message codec both generated protocol modules are built on.

A generated module describes its protocol (the message union of each sender, the value checks,
the error codes) and hands the description to ``JsonCodec``, which owns the one decode and
encode path: size bound on the encoded bytes, typed msgspec decoding with decoders built once,
value checks, and the translation of every failure into the protocol's ``ProtocolError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from voxwire._rules import json_value_problem
from voxwire.errors import ProtocolError

__all__ = [
    "Check",
    "DecodeErrorCodes",
    "JsonCodec",
    "SenderSpec",
    "UnknownMessage",
    "field_of_refused",
    "without_item",
]

Check = Callable[[Any], None]
"""A generated check of the rules a message's typed decoding cannot carry (byte limits, blank
text, uniqueness, rules across fields)."""


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


class _TypeOnly(msgspec.Struct):
    type: str


_TYPE_ONLY: Final = msgspec.json.Decoder(_TypeOnly)
_ANY: Final = msgspec.json.Decoder()
_INDEX: Final = re.compile(r"\[\d+\]")
_MISSING: Final = re.compile(r"Object missing required field `([^`]+)`")


class JsonCodec:
    """Decodes and encodes the JSON messages of one protocol.

    Args:
        protocol: The protocol's id, for messages (``brisvox``).
        error: The protocol's ``ProtocolError`` subclass.
        codes: The error code of each class of decode failure.
        max_message_bytes: The largest encoded message, in UTF-8 bytes.
        senders: Each sender's id and what it may send.
        checks: The generated check of each message class that has one.
        field_codes: Error codes that replace the default for one field of one message,
            keyed by (wire type, JSON path with indices written ``[]``).
    """

    __slots__ = (
        "_all_types",
        "_checks",
        "_codes",
        "_encoder",
        "_envelopes",
        "_error",
        "_field_codes",
        "_max",
        "_protocol",
        "_quarter",
        "_readers",
        "_runners",
        "_senders",
        "_types_by_sender",
    )

    def __init__(
        self,
        *,
        protocol: str,
        error: type[ProtocolError],
        codes: DecodeErrorCodes,
        max_message_bytes: int,
        senders: Mapping[str, SenderSpec],
        checks: Mapping[type, Check],
        field_codes: Mapping[tuple[str, str], str],
    ) -> None:
        self._protocol = protocol
        self._error = error
        self._codes = codes
        self._max = max_message_bytes
        # A str of at most max/4 characters is at most max UTF-8 bytes: no need to count.
        self._quarter = max_message_bytes // 4
        self._senders = dict(senders)
        self._types_by_sender = {sid: _tags(spec.union) for sid, spec in senders.items()}
        self._envelopes: dict[str, Callable[[bytes | str], object]] = {
            sid: msgspec.json.Decoder(spec.envelope).decode
            for sid, spec in senders.items()
            if spec.envelope is not None
        }
        self._all_types = frozenset().union(*self._types_by_sender.values())
        self._checks = dict(checks)
        # Encoding reads back what it wrote, with a typed decoder of the message's class.
        self._readers = {
            cls: msgspec.json.Decoder(cls).decode
            for spec in senders.values()
            for cls in getattr(spec.union, "__args__", (spec.union,))
        }
        self._field_codes = dict(field_codes)
        self._encoder = msgspec.json.Encoder()
        self._runners = {
            sid: self._runner(sid, msgspec.json.Decoder(spec.union).decode)
            for sid, spec in senders.items()
        }

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
        """Decode, then the checks msgspec cannot do; everything it needs bound as a local."""
        quarter, check_size, utf8_bytes = self._quarter, self._check_size, self._utf8_bytes
        checks, recover, error, codes = (
            self._checks.get,
            self._recover,
            self._error,
            self._codes,
        )

        def run(data: bytes | str) -> Any:
            if len(data) > quarter:
                check_size(data)
            # A str is text already; bytes may hold anything (msgspec skips unknown fields unread).
            if not isinstance(data, str) and (type(data) is not bytes or not data.isascii()):
                data = utf8_bytes(data)
            try:
                message = decode(data)
            except msgspec.ValidationError as exc:
                return recover(exc, data, sender)
            except msgspec.DecodeError as exc:
                raise error(codes.malformed, f"not valid JSON: {exc}") from None
            except UnicodeEncodeError:
                raise error(
                    codes.malformed, "text holds a lone surrogate (not valid UTF-8)"
                ) from None
            except RecursionError:
                raise error(codes.malformed, "nested too deeply to read") from None
            check = checks(message.__class__)
            if check is not None:
                check(message)
            return message

        return run

    def encode(self, message: Any) -> bytes:
        """Check ``message`` against every rule of the spec and return compact UTF-8 JSON.

        What was written is read back by the class's typed decoder and checked as decoding
        checks it, so encode and decode apply the same rules, types included.
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
        try:
            data = self._write(message, message.type)
        except ProtocolError:
            self._check_json(message, message.type)  # a value JSON cannot carry, by its path
            raise
        try:
            copy = read_back(data)
        except msgspec.ValidationError as exc:
            self._recover(exc, data, "")  # raises: the message breaks a rule of its type
        if copy != message:
            # msgspec writes NaN as null, int keys as strings, sets as arrays: what was read
            # back differs. The walk (slow, only now) names the value, or finds it harmless
            # (a tuple, a Struct or a datetime inside a free-form value).
            self._check_json(message, message.type)
        check = self._checks.get(cls)
        if check is not None:
            check(copy)
        return data

    def _encode_unknown(self, message: UnknownMessage) -> bytes:
        """An ``UnknownMessage`` is written back as received: its type must be its own, unknown."""
        tag = message.data.get("type") if isinstance(message.data, dict) else None
        if tag != message.type or not isinstance(tag, str):
            raise self._error(
                self._codes.malformed,
                f"data['type'] is {tag!r}, not the message's type {message.type!r}",
                message_type=message.type,
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
                    self._runners[sender](data)
                    return data
                except ProtocolError as exc:
                    problem = exc
        raise problem or self._error(
            self._codes.unknown_type, "no sender may send a type it does not know", message_type=tag
        )

    def _check_json(self, value: Any, message_type: str) -> None:
        problem = json_value_problem(value, "$")
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
        except (TypeError, msgspec.EncodeError, RecursionError) as exc:
            raise self._error(self._codes.wrong_type, str(exc), message_type=message_type) from None
        if len(data) > self._max:
            raise self._error(
                self._codes.too_large,
                f"{len(data)} bytes encoded, at most {self._max}",
                message_type=message_type,
            )
        return data

    def _utf8_bytes(self, data: bytes | bytearray | memoryview) -> bytes:
        """``data`` as bytes, once it is known to be UTF-8 (what a text frame must be)."""
        blob = bytes(data)
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
        self, exc: msgspec.ValidationError, data: bytes | str, sender: str
    ) -> UnknownMessage:
        """Turn msgspec's complaint into the protocol's error, or an ``UnknownMessage``."""
        text = str(exc)
        detail, sep, where = text.rpartition(" - at `")
        path = where[:-1] if sep else "$"
        if not sep:
            detail = text
        codes = self._codes
        # msgspec stops at the first invalid value: the rest of the text may not even be JSON.
        try:
            _ANY.decode(data)
        except msgspec.DecodeError as error:
            raise self._error(codes.malformed, f"not valid JSON: {error}") from None
        except RecursionError:
            raise self._error(codes.malformed, "nested too deeply to read") from None
        except msgspec.ValidationError:
            pass  # a number out of range, handled below
        if detail.startswith("Number out of range"):
            raise self._error(
                codes.malformed, "a number too large to represent", path=path
            ) from None
        if path == "$" and detail.startswith("Expected `object`"):
            raise self._error(codes.malformed, "not a JSON object") from None
        if detail == "Object missing required field `type`" and path == "$":
            raise self._error(codes.malformed, "the object has no `type` field") from None
        if path == "$.type":
            if detail.startswith("Expected `str`"):
                raise self._error(codes.malformed, "`type` is not a string") from None
            return self._unknown_tag(data, sender)
        message_type = _TYPE_ONLY.decode(data).type
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
        raise self._error(code, detail, path=path, message_type=message_type) from None

    def _unknown_tag(self, data: bytes | str, sender: str) -> UnknownMessage:
        types = _top_level_types(data)
        if len(set(types)) > 1:
            raise self._error(
                self._codes.malformed,
                f"`type` is repeated with different values: {', '.join(map(repr, types))}",
            ) from None
        message_type = types[0]
        if message_type in self._all_types:
            senders = sorted(
                s for s, types in self._types_by_sender.items() if message_type in types
            )
            raise self._error(
                self._codes.wrong_sender,
                f"the {sender} may not send it (sent by: {', '.join(senders)})",
                message_type=message_type,
            ) from None
        if not self._senders[sender].accepts_unknown:
            raise self._error(
                self._codes.unknown_type,
                f"unknown message type from the {sender}",
                message_type=message_type,
            ) from None
        envelope = self._envelopes.get(sender)
        if envelope is not None:
            try:
                envelope(data)
            except msgspec.ValidationError as exc:
                return self._recover(exc, data, sender)
        return UnknownMessage(type=message_type, data=_ANY.decode(data))


def field_of_refused(data: bytes | str, name: str) -> Any:
    """The top-level field ``name`` of a message that failed decoding, as plain JSON, or None
    (not a JSON object, or no such field): what a refusal echoes, such as a command's id."""
    try:
        value = _ANY.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return value.get(name) if isinstance(value, dict) else None


def without_item(data: bytes | str, name: str, index: int) -> bytes | None:
    """The message with item ``index`` of its top-level array ``name`` left out, re-written
    (for a reader that drops one bad item and decodes the rest), or None when there is no
    such item."""
    try:
        value = _ANY.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    items = value.get(name) if isinstance(value, dict) else None
    if not isinstance(items, list) or not 0 <= index < len(items):
        return None
    del items[index]
    return msgspec.json.encode(value)


def _top_level_types(data: bytes | str) -> list[str]:
    """Every value of the object's top-level ``type`` key, in order (error path only)."""
    pairs: list[tuple[str, Any]] = []

    def keep(found: list[tuple[str, Any]]) -> dict[str, Any]:
        pairs[:] = found  # the top-level object is the last one the parser closes
        return {}

    try:
        json.loads(data, object_pairs_hook=keep)
    except RecursionError:  # deeper than Python's json reads; msgspec's tag lookup had one type
        return [_TYPE_ONLY.decode(data).type]
    return [value for key, value in pairs if key == "type"]


def _tags(union: Any) -> frozenset[str]:
    members = getattr(union, "__args__", (union,))
    return frozenset(
        member.__struct_config__.tag
        for member in members
        if isinstance(member.__struct_config__.tag, str)
    )
