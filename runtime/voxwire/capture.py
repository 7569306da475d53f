"""Captures: a recorded session, one JSON line per WebSocket message.

```text
{"capture": "voxwire", "version": 2, "protocol": "ovp", "recorded_by": "client"}
{"t": 0.0012, "from": "server", "text": "{\"type\":\"session.start\",...}"}
{"t": 0.0213, "from": "client", "binary": "AQAAAA..."}
{"t": 4.5, "link": "lost"}
{"t": 5.1, "link": "open"}
```

The first line says what the file is; every other line is one message: ``t`` (seconds since the
capture began), ``from`` (the sender: ``server`` or ``agent`` for Brisvox, ``server`` or
``client`` for OVP) and either ``text`` (the text frame, as sent) or ``binary`` (the binary frame,
base64); or, since version 2, a link event: ``link`` is ``lost`` (the connection dropped),
``closed`` (it closed with the close handshake) or ``open`` (a new connection of the same
session; the first one is implied). Both runtimes write captures through ``CaptureWriter`` (the
``record`` option of ``AgentServer``, ``EngineLink``, ``OVPClient`` and ``Gateway``), link events
included where a session outlives its link; ``voxwire validate`` reads them with
``read_capture``, line by line, in constant memory. Version 1 files (no link events) are read
too.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Protocol, TypeAlias

import msgspec

from voxwire import brisvox, ovp
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import VoxwireError

__all__ = [
    "CAPTURE_VERSION",
    "LINK_EVENTS",
    "MAX_LINE_BYTES",
    "MAX_SECONDS",
    "PROTOCOL_SENDERS",
    "CaptureError",
    "CaptureHeader",
    "CaptureWriter",
    "Frame",
    "LinkEvent",
    "Record",
    "Recorder",
    "open_recorder",
    "read_capture",
]

CAPTURE_VERSION: Final = 2
"""The version of the capture format this module writes; it reads 1 (no link events) too."""

READ_VERSIONS: Final = (1, CAPTURE_VERSION)

LINK_EVENTS: Final = ("lost", "closed", "open")
"""What a link event line says: the connection dropped, closed cleanly, or a new one opened."""

PROTOCOL_SENDERS: Final[dict[str, tuple[str, str]]] = {
    "brisvox": ("server", "agent"),
    "ovp": ("server", "client"),
}
"""The two senders of each protocol, as a capture names them."""

_JSON_ESCAPE_WIDTH: Final = 6
"""The most bytes one byte of text takes in a JSON string (``\\u0000``)."""
_LINE_OVERHEAD: Final = 1024
"""Room for a line's own keys and its ``t`` beside the message."""
MAX_LINE_BYTES: Final = (
    _JSON_ESCAPE_WIDTH * max(brisvox.MAX_MESSAGE_BYTES, ovp.MAX_MESSAGE_BYTES) + _LINE_OVERHEAD
)
"""The longest capture line read, in bytes (its line end not counted): the largest message of
either protocol with every byte escaped, and room for the rest. A longer line is a violation,
skipped in constant memory."""
MAX_SECONDS: Final = 2**53 / 10**6
"""The latest ``t`` of a capture line, about 285 years: past it a double no longer holds the
microseconds the writer keeps."""
_CHUNK: Final = 1 << 16
"""How much of a line over the bound is read at a time, to skip it."""
_TOO_LONG: Final = (
    f"a line of more than {MAX_LINE_BYTES:,} bytes (skipped): no message is that long in a capture"
)
_FLAT: Final = msgspec.json.Decoder(dict[str, str | int | float | bool | None])
"""A capture line: one JSON object of scalars (nothing nested, so no depth to bound)."""


class CaptureError(VoxwireError, ValueError):
    """A capture file that cannot be read: names the line and what is wrong with it."""

    def __init__(self, line: int, problem: str) -> None:
        self.line = line
        self.problem = problem
        super().__init__(f"line {line}: {problem}")


@dataclass(frozen=True, slots=True)
class CaptureHeader:
    """The first line of a capture."""

    protocol: str
    recorded_by: str | None
    """The role that wrote the capture (one of the protocol's senders); ``None`` where the
    protocol was forced onto a capture whose header names no sender of it."""
    version: int = CAPTURE_VERSION
    """The format's version: 1 records no link events."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One recorded WebSocket message."""

    line: int
    t: float
    sender: str
    data: str | bytes
    """The text frame as a str, or the binary frame's bytes."""


@dataclass(frozen=True, slots=True)
class LinkEvent:
    """A recorded link event: the connection was ``lost`` or ``closed``, or a new one ``open``."""

    line: int
    t: float
    event: str


class Recorder(Protocol):
    """Anything that takes the messages of a session as they pass (a ``CaptureWriter``)."""

    def record(self, sender: str, data: str | bytes) -> None:
        """``sender`` sent ``data`` (a text frame as str, a binary one as bytes)."""
        ...

    def link(self, event: str) -> None:
        """The session's link changed: ``lost``, ``closed`` or ``open`` (:data:`LINK_EVENTS`)."""
        ...


Record: TypeAlias = str | Path | Recorder | None
"""The ``record`` option of an adapter: a capture file to write (``{session_id}`` in the path
is replaced by the call's id, so a server writes one file per call), a ``Recorder`` (kept open:
its owner closes it), or ``None``."""


def open_recorder(
    record: Record,
    *,
    protocol: str,
    recorded_by: str,
    session_id: str,
    clock: Clock = SYSTEM_CLOCK,
) -> tuple[Recorder | None, CaptureWriter | None]:
    """The recorder a ``record`` option names, and the writer opened here (to close), if any;
    a file it opens is timed on ``clock`` (the role's)."""
    if record is None:
        return None, None
    if isinstance(record, str | Path):
        path = str(record).replace("{session_id}", session_id)
        writer = CaptureWriter(path, protocol=protocol, recorded_by=recorded_by, clock=clock)
        return writer, writer
    return record, None


class CaptureWriter:
    """Appends messages to a capture file as they are sent and received, each stamped with the
    seconds of ``clock`` since the capture began.

    ```text
    with CaptureWriter(path, protocol="ovp", recorded_by="client") as capture:
        capture.record("client", text)
    ```
    """

    def __init__(
        self, path: str | Path, *, protocol: str, recorded_by: str, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        senders = PROTOCOL_SENDERS.get(protocol)
        if senders is None:
            raise ValueError(f"unknown protocol {protocol!r}: one of {sorted(PROTOCOL_SENDERS)}")
        if recorded_by not in senders:
            raise ValueError(f"recorded_by must be one of {senders}, not {recorded_by!r}")
        self._senders = senders
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._clock = clock
        self._start = clock.now()
        header = {
            "capture": "voxwire",
            "version": CAPTURE_VERSION,
            "protocol": protocol,
            "recorded_by": recorded_by,
        }
        self._write(header)

    def record(self, sender: str, data: str | bytes) -> None:
        """Append one message that ``sender`` sent (a text frame as str, a binary one as bytes)."""
        if sender not in self._senders:
            raise ValueError(f"sender must be one of {self._senders}, not {sender!r}")
        entry: dict[str, object] = {"t": self._t(), "from": sender}
        if isinstance(data, str):
            entry["text"] = data
        else:
            entry["binary"] = base64.b64encode(data).decode("ascii")
        self._write(entry)

    def link(self, event: str) -> None:
        """Append a link event: ``lost``, ``closed`` or ``open`` (one of :data:`LINK_EVENTS`)."""
        if event not in LINK_EVENTS:
            raise ValueError(f"a link event is one of {LINK_EVENTS}, not {event!r}")
        self._write({"t": self._t(), "link": event})

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _t(self) -> float:
        return round(self._clock.now() - self._start, 6)

    def _write(self, entry: dict[str, object]) -> None:
        self._file.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._file.flush()


def read_capture(
    lines: IO[str] | IO[bytes], *, protocol: str | None = None
) -> tuple[CaptureHeader, Iterator[Frame | LinkEvent | CaptureError]]:
    """The header of a capture, and an iterator over its messages in file order.

    The iterator yields a ``CaptureError`` for a line it cannot read (and goes on with the
    next), so a validator reports every broken line; a file that is no capture (empty, its first
    line no capture header) raises it at once. Lines are read as bytes (or text) up to
    :data:`MAX_LINE_BYTES` each. ``protocol`` reads the capture as that protocol's, whatever its
    header says: a header naming another protocol, or a recorder that is not one of its senders,
    is the iterator's first ``CaptureError`` (line 1), and ``recorded_by`` is then ``None``.
    """
    rows = _rows(lines)
    first = next(rows, None)
    if first is None:
        raise CaptureError(1, "empty file: no capture header")
    if isinstance(first, CaptureError):
        raise first
    head = _object(1, first, "the header")
    if head.get("capture") != "voxwire":
        raise CaptureError(1, 'not a voxwire capture (the header lacks "capture": "voxwire")')
    version = head.get("version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise CaptureError(1, f"capture version {version!r}; this reads {READ_VERSIONS}")
    named, recorded_by = head.get("protocol"), head.get("recorded_by")
    chosen = protocol if protocol is not None else named
    senders = PROTOCOL_SENDERS.get(chosen) if isinstance(chosen, str) else None
    if senders is None:
        raise CaptureError(1, f"unknown protocol {chosen!r}: one of {sorted(PROTOCOL_SENDERS)}")
    problems = [] if named == chosen else [f"the header names protocol {named!r}"]
    if recorded_by not in senders:
        problems.append(f"recorded_by must be one of {senders}, not {recorded_by!r}")
        if protocol is None:
            raise CaptureError(1, problems[-1])
    recorder = str(recorded_by) if recorded_by in senders else None
    header = CaptureHeader(str(chosen), recorder, int(version))
    items = _frames(rows, senders, links=header.version >= 2)
    if problems:
        forced = CaptureError(1, f"{'; '.join(problems)} (read as {chosen}, as --protocol says)")
        return header, itertools.chain((forced,), items)
    return header, items


def _rows(lines: IO[str] | IO[bytes]) -> Iterator[str | CaptureError]:
    """Each line's text without its line end, from line 1: a line over the bound (skipped in
    constant memory) or not UTF-8 is a ``CaptureError``; blank lines are ``""``."""
    number = 0
    while True:
        raw: str | bytes = lines.readline(MAX_LINE_BYTES + 2)  # room for "\r\n"
        if not raw:
            return
        number += 1
        ended = raw[-1:] in ("\n", b"\n")
        if not ended and len(raw) == MAX_LINE_BYTES + 2:
            while raw and raw[-1:] not in ("\n", b"\n"):  # the rest of the line, a chunk at a time
                raw = lines.readline(_CHUNK)
            yield CaptureError(number, _TOO_LONG)
            continue
        if isinstance(raw, bytes):
            content = raw.rstrip(b"\r\n")
            size = len(content)
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                where = f"byte {exc.start + 1} of the line"
                yield CaptureError(number, f"not UTF-8 text ({exc.reason}: {where})")
                continue
        else:
            text = raw.rstrip("\r\n")
            size = len(text.encode("utf-8", "surrogatepass"))
        yield CaptureError(number, _TOO_LONG) if size > MAX_LINE_BYTES else text


def _object(number: int, text: str, what: str) -> dict[str, Any]:
    """A line's JSON object, which holds only strings, numbers, booleans and null."""
    try:
        return _FLAT.decode(text)
    except msgspec.ValidationError as exc:
        raise CaptureError(number, f"{what} is not one flat JSON object: {exc}") from None
    except msgspec.DecodeError as exc:
        strict = exc
    try:  # NaN and lone surrogates, which strict JSON refuses, get the line's own words
        value = json.loads(text)
    except ValueError:
        raise CaptureError(number, f"{what} is not JSON: {strict}") from None
    except RecursionError:
        raise CaptureError(number, f"{what} is not one flat JSON object: nested") from None
    if not isinstance(value, dict) or any(isinstance(v, list | dict) for v in value.values()):
        raise CaptureError(number, f"{what} is not one flat JSON object")
    return value


def _frames(
    rows: Iterator[str | CaptureError], senders: tuple[str, str], *, links: bool
) -> Iterator[Frame | LinkEvent | CaptureError]:
    for number, row in enumerate(rows, start=2):
        if isinstance(row, CaptureError):
            yield row
        elif row.strip():
            try:
                yield _frame(number, row, senders, links)
            except CaptureError as exc:
                yield exc


def _frame(number: int, raw: str, senders: tuple[str, str], links: bool) -> Frame | LinkEvent:
    entry = _object(number, raw, "a capture line")
    t = entry.get("t")
    if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= MAX_SECONDS:
        raise CaptureError(
            number, f"t must be a number of seconds from 0 to {MAX_SECONDS:,}, not {t!r}"
        )
    if "link" in entry:
        event = entry["link"]
        if not links:
            raise CaptureError(number, "link events need capture version 2")
        if event not in LINK_EVENTS or set(entry) != {"t", "link"}:
            raise CaptureError(number, f"a link event is {{t, link}}, link one of {LINK_EVENTS}")
        return LinkEvent(number, float(t), str(event))
    sender = entry.get("from")
    if sender not in senders:
        raise CaptureError(number, f"from must be one of {senders}, not {sender!r}")
    kinds = [key for key in ("text", "binary") if key in entry]
    if len(kinds) != 1:
        raise CaptureError(number, "a line holds exactly one of text and binary")
    value = entry[kinds[0]]
    if not isinstance(value, str):
        raise CaptureError(number, f"{kinds[0]} must be a string")
    if kinds[0] == "text":
        return Frame(number, float(t), str(sender), value)
    try:
        data = base64.b64decode(value.encode("ascii"), validate=True)
    except UnicodeEncodeError:
        raise CaptureError(number, "binary is not base64: it holds a non-ASCII character") from None
    except binascii.Error as exc:
        raise CaptureError(number, f"binary is not base64: {exc}") from None
    return Frame(number, float(t), str(sender), data)
