"""A call report: one self-contained HTML page per capture, what ``voxwire report`` writes.

```text
call = read_call("call.jsonl")          # CaptureError for a file that is no capture
Path("call.html").write_text(render_page(call), encoding="utf-8")
```

The capture (:mod:`voxwire.capture`) is read twice, line by line, in constant memory: once as
``voxwire validate`` judges it (:func:`voxwire.validate.check_capture`, every violation and note
with its line), once replayed into :class:`voxwire.observe.stats.SessionStats`, message by
message and frame by frame, with the capture's times. The page (:mod:`voxwire.report.page`)
draws what the library computed, so its figures are the library's. Whatever the capture's
length, the page is bounded: at most :data:`MAX_ROWS` messages and :data:`MAX_VERDICTS`
findings are listed (all are counted), and the plots draw the statistics' bounded series.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from voxwire import brisvox, ovp
from voxwire.capture import CaptureError, CaptureHeader, Frame, LinkEvent, read_capture
from voxwire.errors import ProtocolError
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats
from voxwire.validate import Note, Tally, check_capture

__all__ = ["MAX_ROWS", "MAX_VERDICTS", "Call", "Row", "Verdict", "read_call"]

MAX_ROWS: Final = 2000
"""The most messages and link events a report lists and draws one by one (the first ones)."""
MAX_VERDICTS: Final = 1000
"""The most violations and notes a report lists (the first ones); all are counted."""
SUMMARY_CHARS: Final = 160
"""The most characters of a message's text a row shows."""

_MODULES: Final[dict[str, Any]] = {"brisvox": brisvox, "ovp": ovp}


@dataclass(frozen=True, slots=True)
class Row:
    """A message or link event of the capture, as the report lists it."""

    line: int
    t: float
    sender: str | None
    """Who sent it; None for a link event."""
    type: str
    """The message's type, ``binary`` for a frame that is no audio frame, or the link event
    (``link lost``...); ``unreadable`` where the text is no message."""
    seq: int | None
    text: str
    """The text as sent, cut to :data:`SUMMARY_CHARS` characters."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What ``voxwire validate`` says of one line: a violation (its code) or a note."""

    line: int
    t: float | None
    """The line's time; None for the header's line or a line that is not read."""
    code: str
    """The protocol's error code, ``capture`` for a broken line, ``note`` for a note."""
    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """Everything a report shows of one capture."""

    name: str
    header: CaptureHeader
    snapshot: Snapshot
    rows: tuple[Row, ...]
    """The first :data:`MAX_ROWS` messages and link events, in line order (audio frames are
    drawn from the statistics' series, never listed)."""
    row_count: int
    """How many there are in all."""
    messages: int
    frames: int
    link_events: int
    verdicts: tuple[Verdict, ...]
    """The first :data:`MAX_VERDICTS` findings, in line order."""
    violations: int
    notes: int

    @property
    def complete(self) -> bool:
        """Every message and link event is listed."""
        return len(self.rows) == self.row_count


def read_call(path: str | Path, *, protocol: str | None = None, name: str | None = None) -> Call:
    """Read the capture at ``path`` for its report; ``protocol`` reads it as that protocol's
    whatever its header says (as ``voxwire validate --protocol`` does).

    Raises :class:`~voxwire.capture.CaptureError` for a file that is no capture, ``OSError``
    for one that cannot be read.
    """
    tally = Tally()
    found: list[tuple[int, str, str]] = []
    notes = 0
    with open(path, "rb") as lines:
        _, findings = check_capture(lines, tally, protocol=protocol)
        for finding in findings:
            notes += isinstance(finding, Note)
            if len(found) < MAX_VERDICTS:
                code = "note" if isinstance(finding, Note) else finding.code
                found.append((finding.line, code, finding.text))
    wanted = {line for line, _, _ in found}
    times: dict[int, float] = {}
    with open(path, "rb") as lines:
        header, items = read_capture(lines, protocol=protocol)
        replay = _Replay(header)
        for item in replay.feed(items):
            if item.line in wanted:
                times[item.line] = item.t
    return Call(
        name=name if name is not None else Path(path).name,
        header=header,
        snapshot=replay.stats.snapshot(),
        rows=tuple(replay.rows),
        row_count=replay.row_count,
        messages=replay.messages,
        frames=replay.frames,
        link_events=replay.link_events,
        verdicts=tuple(Verdict(line, times.get(line), code, text) for line, code, text in found),
        violations=tally.violations,
        notes=notes,
    )


class _Type(msgspec.Struct):
    type: Any = None
    seq: Any = None


_PEEK: Final = msgspec.json.Decoder(_Type)


class _Replay:
    """Feeds a capture's lines to the statistics, keeping the first rows for the page."""

    def __init__(self, header: CaptureHeader) -> None:
        self.module = _MODULES[header.protocol]
        self.stats = SessionStats.of(header.protocol)
        self.rows: list[Row] = []
        self.row_count = self.messages = self.frames = self.link_events = 0

    def feed(
        self, items: Iterator[Frame | LinkEvent | CaptureError]
    ) -> Iterator[Frame | LinkEvent]:
        stats = self.stats
        for item in items:
            if isinstance(item, CaptureError):
                continue  # validate reports it; it carries no time to count
            if isinstance(item, LinkEvent):
                self.link_events += 1
                stats.on_link(item.event, item.t)
                self._row(Row(item.line, item.t, None, f"link {item.event}", None, ""))
            elif isinstance(item.data, str):
                self.messages += 1
                self._message(item, item.data)
            else:
                self.frames += 1
                self._frame(item, item.data)
            yield item

    def _message(self, item: Frame, text: str) -> None:
        size = len(text.encode("utf-8", "surrogatepass"))
        try:
            message = self.module.decode(text, item.sender)
        except ProtocolError:
            self.stats.on_unreadable(item.sender, item.t, size=size)
            kind, seq = _peek(text)
            self._row(Row(item.line, item.t, item.sender, kind, seq, _cut(text)))
            return
        self.stats.on_message(item.sender, message, item.t, size=size)
        seq = getattr(message, "seq", None)
        kind = str(message.type)
        self._row(Row(item.line, item.t, item.sender, kind, seq, _cut(text)))

    def _frame(self, item: Frame, data: bytes) -> None:
        try:
            frame = ovp.decode_frame(data) if self.module is ovp else None
        except ovp.ProtocolError:
            frame = None
        if frame is None:
            self.stats.on_unreadable(item.sender, item.t, size=len(data))
            self._row(Row(item.line, item.t, item.sender, "binary", None, f"{len(data)} bytes"))
        else:
            self.stats.on_frame(item.sender, frame, item.t)

    def _row(self, row: Row) -> None:
        self.row_count += 1
        if len(self.rows) < MAX_ROWS:
            self.rows.append(row)


def _peek(text: str) -> tuple[str, int | None]:
    """What a message that does not decode says it is, if anything."""
    try:
        found = _PEEK.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError):
        return "unreadable", None
    kind = found.type if isinstance(found.type, str) else "unreadable"
    seq = found.seq if isinstance(found.seq, int) and not isinstance(found.seq, bool) else None
    return f"{kind} (refused)" if kind != "unreadable" else kind, seq


def _cut(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"
