"""The JSON message codec both generated protocol modules are built on.

A generated module describes its protocol (the message union of each sender, the error codes,
the bounds) and hands the description to ``JsonCodec``, which owns the one decode and encode
path: the size bound, typed msgspec decoding with decoders built once, and encode's read-back.
The rules typed decoding cannot carry are the message classes' own: each runs its generated
check when it is built, inside msgspec. What msgspec refuses becomes the protocol's
``ProtocolError`` in :mod:`voxwire._decode_errors`, the error path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import msgspec

from voxwire._decode_errors import DecodeErrorCodes, DecodeErrors, UnknownMessage, shown
from voxwire._rules import json_value_problem, native, written_difference
from voxwire.errors import ProtocolError

__all__ = [
    "DecodeErrorCodes",
    "JsonCodec",
    "SenderSpec",
    "UnknownMessage",
    "python_gate",
]


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
        "_codes",
        "_depth",
        "_encoder",
        "_error",
        "_errors",
        "_max",
        "_protocol",
        "_quarter",
        "_readers",
        "_runners",
        "_senders",
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
        # A character is at most 4 UTF-8 bytes: a text of at most max/4 characters (or bytes)
        # is within the bound with no counting.
        self._quarter = max_message_bytes // 4
        self._senders = dict(senders)
        # Encoding reads back what it wrote, with a typed decoder of the message's class.
        self._readers = {
            cls: msgspec.json.Decoder(cls).decode
            for spec in senders.values()
            for cls in getattr(spec.union, "__args__", (spec.union,))
        }
        self._encoder = msgspec.json.Encoder()
        decoders = {sid: msgspec.json.Decoder(spec.union).decode for sid, spec in senders.items()}
        self._errors = DecodeErrors(
            error=error,
            codes=codes,
            max_nesting_depth=max_nesting_depth,
            max_read_depth=max_read_depth,
            senders=senders,
            field_codes=field_codes,
            decoders=decoders,
        )
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
            explain=partial(self._errors.explain, sender=sender),
            other=partial(self._other, sender=sender),
            quarter=self._quarter,
            limit=self._max,
        )

    def _ungated_runner(
        self, sender: str, decode: Callable[[bytes | str], Any]
    ) -> Callable[[bytes | str], Any]:
        """Decoding of text or bytes already known to be UTF-8 and within the bound."""
        explain = self._errors.explain

        def run(data: bytes | str) -> Any:
            try:
                return decode(data)
            except Exception as exc:
                return explain(exc, data, sender)

        return run

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
            raise self._errors.read_back_error(exc, message_type) from None
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
                f"data['type'] is {shown(tag)}, not the message's type {shown(message.type)}",
                message_type=message.type if isinstance(message.type, str) else None,
            )
        if tag in self._errors.all_types:
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
