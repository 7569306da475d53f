"""Check a recorded session against its protocol: what ``voxwire validate`` runs.

A capture (:mod:`voxwire.capture`) is replayed line by line, in constant memory, through the
sans-I/O cores of both sides, as the session players of the conformance runner drive them
(:mod:`voxwire.conformance.sessions`): Brisvox through an ``EngineCore`` and an ``AgentCore``
(one per link), OVP through a ``GatewayCore`` and a ``ClientCore``. Every message goes to both
cores: the receiver's judges it as it does live (the generated codec's schema, value, size,
direction and frame rules, then the session's: handshake order, seq and t_ms, session ids,
frame order, resume and replay bounds, nothing after the end), and the sender's sends it through
its own API, which refuses what that side would never send there (an event before the agent
accepted, a command on a link that is not open, a message its encoder refuses). Link events
(version 2 captures) are told to both; where none is recorded (version 1, or an adapter that
records none), a Brisvox ``session.start`` or an OVP ``session.resume`` on a link already up
stands for a new link (lost, then open, at its time).

A capture shows the recorder's order; a message of the other side refused only because of
what the recorder wrote after that side's last message (a ``session.end`` it had not read yet)
crossed it in flight, and is judged by that side's core as it stood before.

So every rule and every message text is the cores' own. Each broken rule is a
:class:`Violation` at its line of the capture, with the protocol's error code: one a line (the
sender's refusal first), and none for the rest of a link a core closed over a broken rule. A
message no side's core can judge (no session has begun to judge it in) is a violation too, and
so is a capture that breaks no other rule but holds no ``session.start`` (at line 1). A
frame_seq gap is a :class:`Note` (OVP allows it: lost audio), and so is a session the peer
declined (Brisvox ``session.reject``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, TypeAlias

import msgspec

from voxwire import brisvox, ovp
from voxwire.capture import CaptureError, CaptureHeader, Frame, LinkEvent, read_capture
from voxwire.conformance.sessions import BROKEN_CODE, PLAYERS, Judged, Player, Step
from voxwire.errors import ProtocolError

__all__ = [
    "CAPTURE_CODE",
    "SIDE_OF",
    "Finding",
    "Judgement",
    "Note",
    "Tally",
    "Violation",
    "check_capture",
    "replay",
]

CAPTURE_CODE: Final = "capture"
"""The code of a line that is not a capture line at all (not JSON, no ``from``...)."""

SIDE_OF: Final[dict[str, dict[str, str]]] = {
    "brisvox": {"server": "engine", "agent": "agent"},
    "ovp": {"server": "gateway", "client": "client"},
}
"""The side (as session cases name it) of each sender of a capture, per protocol."""


@dataclass(frozen=True, slots=True)
class Violation:
    """A rule the session broke, at ``line`` of the capture."""

    line: int
    code: str
    """The protocol's error code (``bad_message``, ``OVP_SEQ_REGRESSION``...)."""
    text: str


@dataclass(frozen=True, slots=True)
class Note:
    """Something worth knowing that breaks no rule."""

    line: int
    text: str


Finding: TypeAlias = Violation | Note


@dataclass(slots=True)
class Tally:
    """What a check has read so far."""

    messages: int = 0
    """Text messages."""
    frames: int = 0
    """Binary messages."""
    violations: int = 0
    line: int = 1
    """The line read last (where a failure of voxwire's own happened)."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """What each side's core made of one line of a capture (a message or a link event)."""

    line: int
    step: Step
    sides: dict[str, Judged]
    """By side (``engine``, ``agent``, ``gateway``, ``client``); a side whose core could not
    start yet (no session to speak of) is missing."""


def check_capture(
    lines: IO[str] | IO[bytes], tally: Tally, *, protocol: str | None = None
) -> tuple[CaptureHeader, Iterator[Finding]]:
    """The capture's header, and its findings in line order as it is read (``tally`` counts).

    ``protocol`` judges the capture by that protocol's rules, whatever its header says.
    Raises :class:`~voxwire.capture.CaptureError` for a file that is no capture.
    """
    header, judgements = replay(lines, protocol=protocol)
    return header, _findings(header.protocol, judgements, tally)


def replay(
    lines: IO[str] | IO[bytes], *, protocol: str | None = None
) -> tuple[CaptureHeader, Iterator[Judgement | CaptureError]]:
    """The capture's header, and each line's judgement by both sides' cores, as it is read.

    Raises :class:`~voxwire.capture.CaptureError` for a file that is no capture.
    """
    header, items = read_capture(lines, protocol=protocol)
    return header, _Replay(header).run(items)


class _Replay:
    """Both sides' players, made as soon as a line lets them start, fed every line."""

    def __init__(self, header: CaptureHeader) -> None:
        self.protocol = header.protocol
        self.sides = SIDE_OF[header.protocol]
        self.players: dict[str, Player] = {}
        self.recorder = recorder = header.recorded_by
        self.peer = next(
            (side for s, side in self.sides.items() if recorder not in (None, s)), None
        )
        """The side that did not record: its messages and the recorder's may cross in flight
        (none where the recorder is not known)."""
        self.unread: Player | None = None
        """The peer's player as it was before the recorder's messages since the peer's last
        one: the state the peer may still have been in when it sent its next message."""
        self.opened = False
        """The last line was a recorded link event ``open``."""

    def run(
        self, items: Iterator[Frame | LinkEvent | CaptureError]
    ) -> Iterator[Judgement | CaptureError]:
        for item in items:
            if isinstance(item, CaptureError):
                yield item
            elif isinstance(item, LinkEvent):
                self.opened = item.event == "open"
                yield self._judge(item.line, {"t": item.t, "link": item.event})
            else:
                kind = "text" if isinstance(item.data, str) else "binary"
                step: Step = {"t": item.t, "from": item.sender, kind: item.data}
                opened, self.opened = self.opened, False
                if not opened and self._opens_a_link(step):
                    for event in ("lost", "open"):
                        yield self._judge(item.line, {"t": item.t, "link": event})
                yield self._judge(item.line, step)

    def _judge(self, line: int, step: Step) -> Judgement:
        sender = step.get("from")
        peer = None if self.peer is None else self.players.get(self.peer)
        if sender == self.recorder and self.unread is None and peer is not None:
            self.unread = copy.deepcopy(peer)
        judged: dict[str, Judged] = {}
        for side in self.sides.values():
            player = self.players.get(side)
            if player is None and "link" not in step:
                player = self._start(side, step)
            if player is not None:
                judged[side] = player.step(step)
        if sender is not None and self.recorder not in (None, sender):
            self._crossed(step, judged)
            self.unread = None
        return Judgement(line, step, judged)

    def _crossed(self, step: Step, judged: dict[str, Judged]) -> None:
        """A message the peer's core refuses only because of what the recorder wrote after the
        peer's last message (a session.end, an end command) crossed it in flight: the peer's
        core, as it stood before those, judges it instead."""
        refused = None if self.peer is None else judged.get(self.peer)
        if self.unread is None or self.peer is None or refused is None or refused.code is None:
            return
        before = self.unread.step(step)
        if before.code is None:
            judged[self.peer] = before

    def _start(self, side: str, step: Step) -> Player | None:
        try:
            player = PLAYERS[(self.protocol, side)](step)
        except (ValueError, ProtocolError, KeyError):
            return None  # not a step to start from: the next one may be
        self.players[side] = player
        return player

    def _opens_a_link(self, step: Step) -> bool:
        """A message that begins a new link of the session (Brisvox: the server's
        session.start; OVP: the client's session.resume) where no link event says so."""
        opening = {
            "brisvox": ("server", brisvox.SessionStart.type),
            "ovp": ("client", ovp.SessionResume.type),
        }
        sender, kind = opening[self.protocol]
        if (
            step.get("from") != sender
            or "text" not in step
            or self.sides[sender] not in self.players
        ):
            return False
        return bool(_type_of(step["text"]) == kind)


class _Type(msgspec.Struct):
    type: Any = None


_TYPE: Final = msgspec.json.Decoder(_Type)


def _type_of(text: str) -> Any:
    try:
        return _TYPE.decode(text).type
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeEncodeError):
        return None  # not a message (a lone surrogate is no UTF-8): the cores say why


_MODULES: Final = {"brisvox": brisvox, "ovp": ovp}
_STARTS: Final = {"brisvox": brisvox.SessionStart.type, "ovp": ovp.SessionStart.type}
"""The message that begins a session, sent by the server in both protocols."""


def _unjudged(protocol: str, line: int, step: Step) -> Violation:
    """A message no side's core could take up: no session had begun to judge it in."""
    start = _STARTS[protocol]
    if "binary" in step:
        return Violation(line, BROKEN_CODE[protocol], f"a binary frame before the {start}")
    try:
        message = _MODULES[protocol].decode(step["text"], step["from"])
    except ProtocolError as exc:
        return Violation(line, exc.code, str(exc).removeprefix(f"{exc.code}: "))
    return Violation(line, BROKEN_CODE[protocol], f"{message.type} before the {start}")


class _Gap:
    """Notes the frames one direction skipped (loss, which OVP allows)."""

    def __init__(self) -> None:
        self.last: int | None = None

    def note(self, line: int, data: bytes) -> Note | None:
        try:
            frame_seq = ovp.decode_frame(data).frame_seq
        except ovp.ProtocolError:
            return None
        last, self.last = self.last, frame_seq
        if last is None:
            return None
        lost = (frame_seq - last - 1) % ovp.FRAME_SEQ_MODULUS
        if lost == 0:
            return None
        return Note(
            line, f"frame_seq {frame_seq} after {last}: {lost} frame{'' if lost == 1 else 's'} lost"
        )


@dataclass(slots=True)
class _Findings:
    """Turns judgements into findings: one violation a line, none on a link a core closed."""

    protocol: str
    quiet: bool = False
    """A core closed the link over a broken rule: the rest of the link is not judged."""
    reported: int = 0
    """The last line with a violation (an inferred link event shares its message's line)."""
    gaps: dict[str, _Gap] = field(default_factory=dict)
    started: bool = False
    """A session.start from the server was read (valid or not: the cores judge it)."""

    def of(self, judgement: Judgement) -> list[Finding]:
        step, line = judgement.step, judgement.line
        if step.get("link") == "open":
            self.quiet = False
        if "text" in step and step["from"] == "server" and not self.started:
            self.started = _type_of(step["text"]) == _STARTS[self.protocol]
        if self.quiet:
            return []
        if not judgement.sides and "link" not in step:
            self.reported = line
            return [_unjudged(self.protocol, line, step)]
        sides = SIDE_OF[self.protocol]
        sender = sides.get(step.get("from", ""))
        order = [sender, *(s for s in judgement.sides if s != sender)]
        judged = [judgement.sides[s] for s in order if s in judgement.sides]
        found: list[Finding] = []
        broken = next((j for j in judged if j.code is not None), None)
        if broken is not None and broken.code is not None and line != self.reported:
            self.reported = line
            found.append(Violation(line, broken.code, broken.why))
        for j in judged:
            if j.declined:
                found.append(Note(line, f"the session was declined: {j.why}"))
            if j.code is not None and ("close" in j.verdict or "link" in step):
                self.quiet = True  # closed over a broken rule, or a link never to be
        if "binary" in step and broken is None:
            note = self.gaps.setdefault(step["from"], _Gap()).note(line, step["binary"])
            found += [note] if note else []
        return found


def _findings(
    protocol: str, judgements: Iterator[Judgement | CaptureError], tally: Tally
) -> Iterator[Finding]:
    findings = _Findings(protocol)
    for judgement in judgements:
        tally.line = judgement.line
        if isinstance(judgement, CaptureError):
            found: list[Finding] = [Violation(judgement.line, CAPTURE_CODE, judgement.problem)]
        else:
            step = judgement.step
            if "text" in step:
                tally.messages += 1
            elif "binary" in step:
                tally.frames += 1
            found = findings.of(judgement)
        yield from _counted(found, tally)
    if not findings.started and tally.violations == 0:  # else the first violation said so
        start = _STARTS[protocol]
        yield from _counted([Violation(1, BROKEN_CODE[protocol], f"no {start}: no session")], tally)


def _counted(found: list[Finding], tally: Tally) -> Iterator[Finding]:
    for finding in found:
        if isinstance(finding, Violation):
            tally.violations += 1
        yield finding
