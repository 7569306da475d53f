"""The demo's timeline: every message of a call printed as it passes, then a summary.

A :class:`Timeline` is a :class:`~voxwire.capture.Recorder`: an adapter given it as its ``record``
option hands it every message it sends and receives. It prints one line per text message (time,
direction, seq, type, the key fields), sums up the audio frames between two of them, optionally
writes the capture file too, and measures round trips for the summary.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any, TextIO

import msgspec
from msgspec import UNSET

from voxwire.capture import PROTOCOL_SENDERS, CaptureWriter
from voxwire.errors import ProtocolError

__all__ = ["RoundTrip", "Style", "Timeline"]

_HIDDEN = frozenset({"type", "seq", "t_ms", "ts", "session_id"})
# The fields shown first, when a message has them; the others follow while there is room.
_FIRST = (
    "text",
    "delta",
    "name",
    "arguments",
    "result",
    "error",
    "ok",
    "cause",
    "reason",
    "code",
    "message",
    "tools",
    "greeting",
    "agent",
    "kind",
    "id",
    "re",
)
_VALUE_WIDTH = 44
_MIN_DETAILS = 20
_PARTIES = {"brisvox": ("engine", "agent"), "ovp": ("gateway", "client")}


@dataclass(frozen=True, slots=True)
class Style:
    """How to print: ANSI colours or none, Unicode symbols or ASCII ones, and in how many columns.

    A message's line is cut to ``width`` (its key fields, while they fit).
    """

    color: bool
    unicode: bool
    width: int = 80

    def paint(self, text: str, code: str) -> str:
        """``text`` in the SGR ``code`` (``"1"`` bold, ``"36"`` cyan...) when colouring."""
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    @property
    def right(self) -> str:
        return "→" if self.unicode else "->"

    @property
    def left(self) -> str:
        return "←" if self.unicode else "<-"

    @property
    def ellipsis(self) -> str:
        return "…" if self.unicode else "..."

    @property
    def rule(self) -> str:
        return "─" if self.unicode else "-"


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """A message and the reply it waits for, matched by a field of each (``None``: the next)."""

    request: str
    reply: str
    request_key: str | None = None
    reply_key: str | None = None


class Timeline:
    """Prints the messages of one call as they pass; a ``voxwire.capture.Recorder``.

    Args:
        protocol: ``brisvox`` or ``ovp``.
        out: Where to print.
        style: Colours and symbols.
        round_trips: The request and reply pairs whose latency the summary lists.
        capture: A capture file to write every message into as well.
    """

    def __init__(
        self,
        protocol: str,
        *,
        out: TextIO,
        style: Style,
        round_trips: Sequence[RoundTrip] = (),
        capture: CaptureWriter | None = None,
    ) -> None:
        self.protocol = protocol
        self.server, self.peer = PROTOCOL_SENDERS[protocol]
        self.messages: Counter[str] = Counter()
        """Text messages by sender."""
        self.frames: Counter[str] = Counter()
        """Binary messages by sender."""
        self.bytes: Counter[str] = Counter()
        """Bytes by sender, text and binary."""
        self.latencies: list[tuple[str, float]] = []
        """Measured round trips: what, and seconds."""
        self._decode = import_module(f"voxwire.{protocol}").decode
        self._out = out
        self._style = style
        self._round_trips = round_trips
        self._capture = capture
        self._names = dict(zip((self.server, self.peer), _PARTIES[protocol], strict=True))
        self._start = time.monotonic()
        self._unprinted: Counter[str] = Counter()
        self._open: dict[tuple[str, Any], tuple[float, str]] = {}
        self._waiters: list[tuple[str, asyncio.Future[None]]] = []

    # -- recording ------------------------------------------------------------------------------

    def record(self, sender: str, data: str | bytes) -> None:
        """One message ``sender`` sent (a Recorder's method)."""
        t = time.monotonic() - self._start
        if self._capture is not None:
            self._capture.record(sender, data)
        if isinstance(data, bytes):
            self.frames[sender] += 1
            self.bytes[sender] += len(data)
            self._unprinted[sender] += 1
            return
        self.messages[sender] += 1
        self.bytes[sender] += len(data.encode())
        self._flush_frames()
        try:
            message: Any = self._decode(data, sender)
        except ProtocolError as exc:
            self._print(f"{t:7.3f}s  {self._arrow(sender)}        {exc}", "31")
            return
        self._line(t, sender, message)
        self._measure(t, message)
        for waiter in [w for w in self._waiters if w[0] == message.type]:
            self._waiters.remove(waiter)
            if not waiter[1].done():
                waiter[1].set_result(None)

    def link(self, event: str) -> None:
        """The call's link was lost, closed, or opened again (a Recorder's method)."""
        t = time.monotonic() - self._start
        if self._capture is not None:
            self._capture.link(event)
        self._flush_frames()
        self._print(f"{t:7.3f}s  link {event}", "2")

    async def recorded(self, message_type: str, timeout: float = 5.0) -> None:
        """Wait until the next message of ``message_type`` (after this call) was recorded."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((message_type, future))
        async with asyncio.timeout(timeout):
            await future

    # -- printing -------------------------------------------------------------------------------

    def legend(self) -> None:
        """The call's title and what the arrows mean."""
        server, peer = self._names[self.server], self._names[self.peer]
        style = self._style
        self._print(f"{self.protocol}: one call, {server} and {peer} on loopback", "1")
        self._print(f"  {style.right} {server} to {peer}    {style.left} {peer} to {server}", "2")

    def step(self, title: str) -> None:
        """A heading: the call's next step."""
        self._flush_frames()
        self._print(f"{self._style.rule * 2} {title} ", "1;33")

    def summary(self, handshake: float, what: str) -> None:
        """Messages, frames and bytes each way, the handshake (``what`` it spans, ``handshake``
        seconds) and the round trips measured."""
        self._flush_frames()
        style = self._style
        self._print("summary", "1")
        for sender in (self.server, self.peer):
            other = self.peer if sender == self.server else self.server
            way = f"{self._names[sender]} {style.right} {self._names[other]}"
            frames = f", {self.frames[sender]} audio frames" if self.protocol == "ovp" else ""
            self._print(
                f"  {way:<20} {self.messages[sender]} messages{frames}, "
                f"{self.bytes[sender]:,} bytes"
            )
        self._print(f"  {'handshake':<20} {handshake * 1000:.1f} ms ({what})")
        for index, (what, seconds) in enumerate(self.latencies):
            label = "round trips" if index == 0 else ""
            self._print(f"  {label:<20} {seconds * 1000:5.1f} ms  {what}")

    def _line(self, t: float, sender: str, message: Any) -> None:
        seq = getattr(message, "seq", None)
        shown = f"{seq:>4}" if isinstance(seq, int) else "    "
        color = "36" if sender == self.server else "32"
        head = f"{t:7.3f}s  {self._arrow(sender)}  {shown}  {message.type:<24} "
        kind = self._style.paint(f"{message.type:<24}", color)
        room = max(self._style.width - len(head) - 1, _MIN_DETAILS)
        details = _details(message, self._style.ellipsis, room)
        print(f"{t:7.3f}s  {self._arrow(sender)}  {shown}  {kind} {details}", file=self._out)

    def _flush_frames(self) -> None:
        up, down = self._unprinted[self.peer], self._unprinted[self.server]
        if not (up or down):
            return
        parts = [
            f"{count} audio frames {way}" for count, way in ((up, "up"), (down, "down")) if count
        ]
        dots = self._style.ellipsis
        self._print(f"{'':>17}{dots} {', '.join(parts)} {dots}", "2")
        self._unprinted.clear()

    def _arrow(self, sender: str) -> str:
        return self._style.right if sender == self.server else self._style.left

    def _print(self, line: str, code: str | None = None) -> None:
        """One line, cut to the style's width, in the SGR ``code`` if any."""
        style = self._style
        if len(line) > style.width:
            line = line[: style.width - len(style.ellipsis)] + style.ellipsis
        print(style.paint(line, code) if code else line, file=self._out)

    # -- latencies ------------------------------------------------------------------------------

    def _measure(self, t: float, message: Any) -> None:
        for trip in self._round_trips:
            if message.type == trip.reply:
                key = getattr(message, trip.reply_key, None) if trip.reply_key else None
                found = self._open.pop((trip.reply, key), None)
                if found is not None:
                    self.latencies.append((found[1], t - found[0]))
            if message.type == trip.request:
                key = getattr(message, trip.request_key, None) if trip.request_key else None
                name = getattr(message, "name", None)
                what = f"{trip.request}{f' {name}' if isinstance(name, str) else ''}"
                self._open[(trip.reply, key)] = (t, f"{what} {self._style.right} {trip.reply}")


def _details(message: Any, ellipsis: str, room: int) -> str:
    """The message's key fields, most telling first, in at most ``room`` characters."""
    fields = [
        (name, value)
        for name, value in msgspec.structs.asdict(message).items()
        if name not in _HIDDEN and value is not UNSET and value is not None
    ]
    fields.sort(key=lambda item: _FIRST.index(item[0]) if item[0] in _FIRST else len(_FIRST))
    parts: list[str] = []
    width = 0
    for name, value in fields:
        label = f"{name.rstrip('_')}="
        shown = _brief(value, ellipsis, min(_VALUE_WIDTH, room - width - len(label)))
        if shown is None:
            continue
        part = label + shown
        if width + len(part) > room:
            break
        parts.append(part)
        width += len(part) + 1
    return " ".join(parts)


def _brief(value: Any, ellipsis: str, room: int) -> str | None:
    """A form of one field's value in ``room`` characters, or None for what a line cannot show."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, msgspec.Struct):
        name = getattr(value, "name", None)
        return _brief(name, ellipsis, room) if isinstance(name, str) else None
    if isinstance(value, list) and value and all(isinstance(v, msgspec.Struct) for v in value):
        names = [getattr(item, "name", None) for item in value]
        if all(isinstance(name, str) for name in names):
            text = ",".join(str(name) for name in names)
        else:
            text = f"[{len(value)} items]"
    elif isinstance(value, str | bool | int | float | dict | list):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    else:
        return None
    if len(text) <= room:
        return text
    return text[: room - len(ellipsis)] + ellipsis if room > len(ellipsis) else None
