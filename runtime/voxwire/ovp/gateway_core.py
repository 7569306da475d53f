"""The sans-I/O gateway side of OVP: :class:`GatewayCore`, its states and their transition table.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order. The gateway's core serves one session across its connections, so its actions name the
link they go to (:class:`ToLink`); ``tick(now)`` fires its deadlines and ``next_deadline()`` says
when to call it next.

```text
gateway = GatewayCore("ovps_1", epoch=...)
link, out = gateway.open_link(now)          # an authenticated connection
gateway.start(call, agent, now)             # [Sent(SessionStart(...)), ToLink(link, SendText(...))]
gateway.receive_text(link, data, now)       # [ClientEvent(..)] or [Sent(ErrorEvent(..)), ToLink]
gateway.drained(link, 1024, now)            # room for 1024 events: the next ones of the stream
```

**The stream.** Every server event is stamped here (``seq`` +1 from 0 for the whole session),
kept in the replay buffer, and written to the current link through a cursor: at most ``window``
events are handed to the adapter unwritten (``ToLink(..., stream=True)``), and
:meth:`GatewayCore.drained` hands out the next ones as the link's queue has room. A replay is the
same cursor set back to the resumed ``last_server_seq``, so neither a replay of 4096 events nor a
burst of events larger than the adapter's queue ever enters the queue at once. Audio frames go
out only while the stream is caught up (stale audio is dropped).

The session's state is :attr:`GatewayCore.state`, a :class:`~voxwire.ovp.machines.GatewayState`;
what may happen in each state is the spec's table :data:`~voxwire.ovp.machines.GATEWAY_MACHINE`
(state x input -> next state), and every change of state goes through
:func:`voxwire.machine.step`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import msgspec
from msgspec import UNSET

from voxwire.machine import step
from voxwire.ovp import (
    CARRIED_BY_AGENT_TOOL_ERROR,
    END_REASONS,
    FRAME_ERROR_REPORT_INTERVAL_MS,
    MAX_ELAPSED_MS,
    MAX_SEQ,
    PROTOCOL_VERSION,
    RAISED_BY_PROTOCOL,
    RECOVERABLE,
    REPLAY_BUFFER_MAX_AGE_MS,
    REPLAY_BUFFER_MAX_BYTES,
    REPLAY_BUFFER_MAX_EVENTS,
    SERVER_MESSAGE_TYPES,
    AgentBargeIn,
    AgentConfig,
    AgentCostTick,
    AgentHandoffAccepted,
    AgentHandoffCompleted,
    AgentHandoffFailed,
    AgentHandoffRequested,
    AgentOutput,
    AgentToolInvoke,
    AudioFrame,
    CallInfo,
    CallQualityUpdate,
    ClientMessage,
    CloseCode,
    CostBreakdown,
    ErrorCode,
    ErrorEvent,
    FinalStats,
    FrameDirection,
    Message,
    ProtocolError,
    SessionEnd,
    SessionEndReason,
    SessionPatch,
    SessionResume,
    SessionStart,
    SessionUpdate,
    SupervisorRelease,
    SupervisorTakeover,
    decode,
    decode_frame,
    encode,
)
from voxwire.ovp._session import (
    AUDIO_FORMAT,
    RESUME_WINDOW,
    STREAM_WINDOW,
    AudioIn,
    FrameOrder,
    FrameWriter,
    Sent,
    SessionOver,
    SessionStateError,
    Stamper,
    describe,
    timestamp,
)
from voxwire.ovp.gateway_periodic import (
    COST_INTERVAL,
    NO_COST,
    QUALITY_INTERVAL,
    Quality,
    next_due,
    total_cost,
)
from voxwire.ovp.machines import (
    GATEWAY_ENDED,
    GATEWAY_MACHINE,
    GATEWAY_SENDING,
    GATEWAY_WINDOWED,
    GatewayInput,
    GatewayState,
)
from voxwire.sansio import Action, Close, Ignored, SendBinary, SendText

__all__ = [
    "STREAM_WINDOW",
    "ClientEvent",
    "GatewayCore",
    "GatewayOutput",
    "GatewayState",
    "LinkDropped",
    "Resumed",
    "ToLink",
    "refuse_token",
]


# The window is closed (exactly 30 s is inside), so its deadline fires just after it.
_WINDOW_EPSILON: Final = 0.001
_FRAME_REPORT_INTERVAL: Final = FRAME_ERROR_REPORT_INTERVAL_MS / 1000
_FRAME_ERROR_CODES: Final = (ErrorCode.OVP_AUDIO_FRAME_INVALID, ErrorCode.OVP_SEQ_REGRESSION)
"""The frame errors reported in aggregate, in the order a tick reports them."""


# The spec's state groups are tuples, not sets: membership by identity, without Enum.__hash__
# (a Python call on 3.11).
_LIVE: Final = GatewayState.LIVE  # bound once, as an Enum member look-up is a call on 3.11
_FROM_CLIENT: Final = int(FrameDirection.CLIENT_TO_SERVER)  # compared int to int per frame


class ClientEvent(msgspec.Struct, frozen=True):
    """A client event the gateway accepted, for the gateway's application."""

    message: ClientMessage


class ToLink(msgspec.Struct, frozen=True):
    """Perform ``action`` on the gateway's connection ``link``.

    ``stream``: an event of the session's stream, which counts against the link's window (the
    adapter queues it as an event; anything else is control: audio, refusals, closes).
    """

    link: int
    action: Action
    stream: bool = False


@dataclass(frozen=True, slots=True)
class LinkDropped:
    """The session's current connection is gone; the resume window runs from ``at``."""

    link: int
    at: float


@dataclass(frozen=True, slots=True)
class Resumed:
    """``link`` resumed the session; ``replayed`` events are sent again before live ones.
    ``message``: the client's ``session.resume``."""

    link: int
    replayed: int
    message: SessionResume | None = field(default=None, compare=False)


GatewayOutput: TypeAlias = (
    ToLink | Sent | ClientEvent | AudioIn | Ignored | LinkDropped | Resumed | SessionOver
)
"""What :class:`GatewayCore` returns: actions addressed to a link, and events."""


class _Link:
    """One authenticated connection: waiting for its session.resume, or carrying the stream."""

    def __init__(self) -> None:
        self.streaming = False  # the session's current link
        self.next_seq = 0  # the seq of the next event of the stream to hand out
        self.unwritten = 0  # events handed out that the link's queue may still hold
        self.close_after: Close | None = None  # once the stream is written out
        self.cut = False  # closed: nothing more goes to it


class _ReplayBuffer:
    """The server events sent, for replay: bounded by count, encoded bytes and age.

    Seqs are consecutive (every stamped event enters), so a seq's place is ``seq - first``.
    """

    def __init__(self) -> None:
        self._events: deque[tuple[int, float, bytes]] = deque()
        self._bytes = 0
        self.evicted_through = -1  # highest seq no longer held

    def add(self, seq: int, data: bytes, now: float) -> None:
        self._events.append((seq, now, data))
        self._bytes += len(data)
        self.evict(now)

    def evict(self, now: float) -> None:
        events = self._events
        oldest = now - REPLAY_BUFFER_MAX_AGE_MS / 1000
        while events and (
            len(events) > REPLAY_BUFFER_MAX_EVENTS
            or self._bytes > REPLAY_BUFFER_MAX_BYTES
            or events[0][1] < oldest
        ):
            seq, _, data = events.popleft()
            self._bytes -= len(data)
            self.evicted_through = seq

    def holds_after(self, last_seq: int) -> bool:
        """Whether every event after ``last_seq`` is still held."""
        return last_seq >= self.evicted_through

    def take(self, first_seq: int, count: int) -> list[bytes]:
        """Up to ``count`` encoded events from ``first_seq`` on (which must be held)."""
        events = self._events
        if not events or count <= 0:
            return []
        start = first_seq - events[0][0]
        # By index: a deque finds one from its nearer end, so the live stream (the newest
        # events) costs the same with 4096 held as with one (islice would walk from the left).
        return [events[i][2] for i in range(start, min(start + count, len(events)))]

    def clear(self) -> None:
        self._events.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._events)

    @property
    def size(self) -> int:
        """Encoded bytes held."""
        return self._bytes


class _FrameErrors:
    """Frame errors of one code, reported at most once per interval with a dropped count."""

    def __init__(self) -> None:
        self.dropped = 0
        self.last_detail = ""
        self.next_report = float("-inf")

    def due(self, now: float) -> bool:
        return self.dropped > 0 and now >= self.next_report

    @property
    def deadline(self) -> float | None:
        return self.next_report if self.dropped > 0 else None


class GatewayCore:
    """The gateway side of one OVP session, across the connections that carry it.

    The application starts the session (:meth:`start`), emits events (:meth:`send`), audio
    (:meth:`send_audio`), errors (:meth:`fail`) and the end (:meth:`end`), and supplies the
    values of the 5 s quality and cost events (:meth:`set_quality`, :meth:`set_cost`). The core
    checks every client event and frame, applies ``session.update`` patches (``accept_patch``
    may refuse one with a reason), keeps the replay buffer, and resumes or refuses a reconnect.

    Args:
        session_id: The session (the endpoint path's id, checked against the token).
        epoch: Wall-clock seconds at ``now == 0``, for the ``ts`` of every event.
        accept_patch: Judges a well-formed patch: ``None`` to apply it, or why it is refused
            (answered with ``OVP_SESSION_UPDATE_REJECTED``).
        window: Events of the stream one link's queue holds at most (its event bound):
            never more are handed out before :meth:`drained` reports room.
        measure: What the session measured, asked when a ``call.quality.update`` is due and the
            application set no values; with it, both 5 s events are always sent (the cost tick
            with zeros until :meth:`set_cost`). Without it, each is sent only once the
            application gave its values (the conformance players' core).
    """

    def __init__(
        self,
        session_id: str,
        *,
        epoch: float,
        accept_patch: Callable[[SessionPatch], str | None] | None = None,
        window: int = STREAM_WINDOW,
        measure: Callable[[float], Quality] | None = None,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self.session_id = session_id
        self.state = GatewayState.NEW
        self.agent: AgentConfig | None = None
        self.caller_context: dict[str, Any] | None = None
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.over: SessionOver | None = None
        self.dropped_at: float | None = None
        self.current_link: int | None = None
        self._window = window
        self._accept_patch = accept_patch
        self._stamper = Stamper(session_id, epoch, SERVER_MESSAGE_TYPES)
        self._links: dict[int, _Link] = {}
        self._next_link = 0
        self._start_link: int | None = None
        self._last_client_seq: int | None = None
        self._replay = _ReplayBuffer()
        self._frames_out = FrameWriter(FrameDirection.SERVER_TO_CLIENT)
        self._frames_in = FrameOrder()
        self._frame_errors: dict[ErrorCode, _FrameErrors] = {}  # each made at its first error
        self._takeover: bool | None = None  # resumable flag of the takeover in force
        self._handoff: str | None = None  # "requested" or "accepted"
        self._quality: Quality | None = None
        self._measure = measure
        self._cost: CostBreakdown | None = None
        self._next_quality: float | None = None
        self._next_cost: float | None = None
        self._counts = {"turns": 0, "tool_calls": 0, "barge_ins": 0}
        self.client_frames = 0
        self.server_frames = 0
        self.frames_unsent = 0

    # ------------------------------------------------------------------ links

    def open_link(self, now: float) -> tuple[int, list[GatewayOutput]]:
        """An authenticated connection for this session; returns its link id.

        A session not yet started takes it as its current link (the newest wins); a started or
        ended one waits on it for ``session.resume``; one that is over refuses it at once
        (``OVP_RESUME_EXPIRED``: decision ended-session-id-taken).
        """
        link = self._next_link
        self._next_link += 1
        self._links[link] = _Link()
        if self.state is GatewayState.OVER:
            return link, self._refuse_resume(link, None, self._over_detail(), now)
        out: list[GatewayOutput] = []
        if self.state is GatewayState.NEW:
            if self.current_link is not None:
                out += self._cut(self.current_link, Close(CloseCode.NORMAL, "superseded"))
            self._stream_to(link, 0)
        return link, out

    def link_lost(
        self, link: int, now: float, *, answered_close: bool = False
    ) -> list[GatewayOutput]:
        """Connection ``link`` is gone (close frame, TCP error or missed pong).

        ``answered_close``: the client answered the close this side sent, so it read everything
        before it (after ``session.end``: the end was delivered).
        """
        self._links.pop(link, None)
        if link != self.current_link:
            return []
        self.current_link = None
        state = self.state
        if state is GatewayState.ENDING and answered_close:
            self._go(GatewayInput.END_DELIVERED)
            self._replay.clear()
            return []
        if state in (GatewayState.LIVE, GatewayState.ENDING):
            self._go(GatewayInput.LINK_LOST)
            self.dropped_at = now
            return [LinkDropped(link, now)] if state is GatewayState.LIVE else []
        return []

    def drained(self, link: int, room: int, now: float) -> list[GatewayOutput]:
        """``link``'s queue drained and has ``room`` for events: the next part of the stream."""
        state = self._links.get(link)
        if state is None:
            return []
        state.unwritten = max(0, self._window - room)
        return self._pump(link)

    # ------------------------------------------------------------------ application

    def start(self, call: CallInfo, agent: AgentConfig, now: float) -> list[GatewayOutput]:
        """Send ``session.start`` (seq 0) with the call, the agent and the audio invariants."""
        if self.state is not GatewayState.NEW:
            raise SessionStateError(f"the session cannot start: it is {self.state.value}")
        self._go(GatewayInput.START)
        self.agent = agent
        self.started_at = now
        self._start_link = self.current_link
        self._next_quality, self._next_cost = now + QUALITY_INTERVAL, now + COST_INTERVAL
        out = self._emit(
            SessionStart,
            {
                "protocol_version": PROTOCOL_VERSION,
                "call": call,
                "agent": agent,
                "audio": AUDIO_FORMAT,
            },
            now,
        )
        if self.current_link is None:  # the client went away before the start: resumable
            self._go(GatewayInput.LINK_LOST)
            self.dropped_at = now
        return out

    def send(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp, buffer and stream one server event; ``[Sent(message), ToLink(...)?]``.

        While the session has no link the event is only buffered, for the replay. ``start``,
        ``fail`` and ``end`` send session.start, error and session.end.
        """
        if kind in (SessionStart, ErrorEvent, SessionEnd):
            raise TypeError(f"send {kind.__name__} with start(), fail() or end()")
        self._require_live()
        return self._emit(kind, fields, now)

    def send_audio(
        self, pcm: bytes | bytearray | memoryview, now: float, *, flags: int = 0
    ) -> list[GatewayOutput]:
        """One 20 ms frame of agent audio; dropped (frame_seq still advances) while the client
        is away or its link is behind on the stream."""
        if self.state is not _LIVE:
            self._require_live()
        data = self._frames_out.build(pcm, flags, None)
        link = self.current_link
        state = None if link is None else self._links[link]
        if link is None or state is None or state.cut or state.next_seq < self._stamper.next_seq:
            self.frames_unsent += 1
            return []
        self.server_frames += 1
        return [ToLink(link, SendBinary(data))]

    @property
    def frame_sent(self) -> AudioFrame | None:
        """The last audio frame :meth:`send_audio` built."""
        return self._frames_out.last

    def fail(
        self,
        code: str,
        message: str,
        now: float,
        *,
        recoverable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> list[GatewayOutput]:
        """Send an ``error``; an unrecoverable one is followed by ``session.end``.

        The recoverable flag of a code of the error table is the table's; a code of the
        application's own needs ``recoverable``. The tool codes ride ``agent.tool.error``, and
        the handshake and resume codes are the core's own.
        """
        self._require_live()
        if code in CARRIED_BY_AGENT_TOOL_ERROR:
            raise ValueError(f"{code} is sent as the code of an agent.tool.error")
        if code in RAISED_BY_PROTOCOL:
            raise ValueError(f"{code} is sent by the gateway itself")
        if code in RECOVERABLE:
            table = RECOVERABLE[ErrorCode(code)]
            if recoverable not in (None, table):
                raise ValueError(f"{code} is recoverable: {str(table).lower()} by the spec")
            recoverable = table
        elif recoverable is None:
            raise ValueError(f"{code} is not in the error table: say whether it is recoverable")
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": recoverable}
        if details:
            fields["details"] = details
        if recoverable:
            return self._emit(ErrorEvent, fields, now)
        out = self._stamp(ErrorEvent, fields, now)
        reason = END_REASONS[ErrorCode(code)] if code in END_REASONS else SessionEndReason.ERROR
        return out + self.end(reason, now, error_code=code)

    def end(self, reason: str, now: float, *, error_code: str | None = None) -> list[GatewayOutput]:
        """Send ``session.end`` with the final stats and close with 1000 once it is written."""
        self._require_live()
        assert self.started_at is not None
        duration = min(MAX_ELAPSED_MS, max(0, round((now - self.started_at) * 1000)))
        cost = self._cost or NO_COST
        stats = FinalStats(
            duration_ms=duration,
            client_frames=self.client_frames,
            server_frames=self.server_frames,
            total_cost_usd_micros=total_cost(cost),
            cost_breakdown=cost,
            **self._counts,
        )
        fields: dict[str, Any] = {"reason": reason, "stats": stats}
        if error_code is not None:
            fields["error_code"] = error_code
        out = self._stamp(SessionEnd, fields, now)
        self._go(GatewayInput.END)
        self.ended_at = now
        sent = out[0]
        assert isinstance(sent, Sent) and isinstance(sent.message, SessionEnd)
        if self.current_link is not None:  # a link waiting for its resume may still get the end
            out += self._close_after_stream(
                self.current_link, Close(CloseCode.NORMAL, "session ended")
            )
        self.over = SessionOver(sent.message, error_code, f"ended: {reason}")
        return [*out, self.over]

    def abort(self, detail: str, now: float) -> list[GatewayOutput]:
        """End the session without session.end (the gateway shuts down, or the app gave up
        before starting it): close every link with 1011; ``OVP_INTERNAL_ERROR``."""
        if self.state is GatewayState.OVER:
            return []
        out: list[GatewayOutput] = []
        for link in list(self._links):
            out += self._cut(link, Close(CloseCode.INTERNAL_ERROR, "session aborted"))
        return out + self._finish(ErrorCode.OVP_INTERNAL_ERROR, f"aborted: {detail}")

    def set_quality(
        self, *, packet_loss_pct: float, jitter_ms: float, rtt_ms: float, mos: float
    ) -> None:
        """The values the next 5 s ``call.quality.update`` carries (instead of ``measure``'s)."""
        self._quality = Quality(packet_loss_pct, jitter_ms, rtt_ms, mos)

    def set_cost(self, breakdown: CostBreakdown) -> None:
        """The running cost the next 5 s ``agent.cost.tick`` (and session.end's stats) carry."""
        self._cost = breakdown

    # ------------------------------------------------------------------ input

    def receive_text(self, link: int, data: bytes | str, now: float) -> list[GatewayOutput]:
        """Judge one text message from connection ``link``."""
        state = self._links.get(link)
        if state is None or state.cut:
            return [Ignored(f"a text message on link {link}, which is closing")]
        if not state.streaming:
            return self._first_on_resumed_link(link, data, now)
        if self.state not in (GatewayState.NEW, *GATEWAY_SENDING):
            return [Ignored(f"a text message on link {link} after session.end")]
        try:
            message = decode(data, sender="client")
        except ProtocolError as exc:
            details = {"event_type": exc.message_type} if exc.message_type else None
            return self._answer(exc.code, describe(exc), now, details)
        about = {"event_seq": message.seq, "event_type": message.type}
        if message.session_id != self.session_id:
            return self._answer(
                ErrorCode.OVP_EVENT_SCHEMA_INVALID,
                f"the event names another session ({message.session_id!r})",
                now,
                about,
            )
        if isinstance(message, SessionResume) and (
            self.state is GatewayState.NEW or link == self._start_link
        ):
            # This link carried the session's start, so the client resumes a session this
            # gateway does not hold (a restarted gateway): refused, never stitched on.
            detail = f"this gateway does not hold session {self.session_id!r} (it started anew)"
            return self._refuse_resume(link, message.last_server_seq, detail, now)
        if self._last_client_seq is not None and message.seq <= self._last_client_seq:
            return self._answer(
                ErrorCode.OVP_SEQ_REGRESSION,
                f"seq {message.seq} is not greater than {self._last_client_seq}",
                now,
                about,
            )
        problem = self._out_of_place(message)
        if problem is not None:
            return self._answer(ErrorCode.OVP_EVENT_SCHEMA_INVALID, problem, now, about)
        if isinstance(message, SessionUpdate):
            refusal = self._accept_patch(message.patch) if self._accept_patch else None
            if refusal is not None:
                return self._answer(ErrorCode.OVP_SESSION_UPDATE_REJECTED, refusal, now, about)
            self._apply(message.patch)
        self._last_client_seq = message.seq
        self._track_client(message)
        return [ClientEvent(message)]

    def receive_binary(
        self, link: int, data: bytes | bytearray | memoryview, now: float
    ) -> list[GatewayOutput]:
        """Judge one binary message (an audio frame) from connection ``link``."""
        if link != self.current_link or self.state is not _LIVE:
            early = ErrorCode.OVP_AUDIO_FRAME_INVALID if self.state is GatewayState.NEW else None
            return [Ignored("an audio frame before the session started or resumed", early)]
        try:
            frame = decode_frame(data, _FROM_CLIENT)
        except ProtocolError as exc:
            return self._frame_error(ErrorCode.OVP_AUDIO_FRAME_INVALID, describe(exc), now)
        problem = self._frames_in.accept(frame.frame_seq)
        if problem is not None:
            return self._frame_error(ErrorCode.OVP_SEQ_REGRESSION, problem, now)
        self.client_frames += 1
        return [AudioIn(frame)]

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[GatewayOutput]:
        """Fire what is due: the resume window's end, frame error reports, the 5 s events."""
        out: list[GatewayOutput] = []
        if self._window_passed(now):
            out += self._expire(now)
        if self.state not in GATEWAY_SENDING:
            return out
        for code in _FRAME_ERROR_CODES:
            errors = self._frame_errors.get(code)
            if errors is not None and errors.due(now):
                out += self._report_frames(code, errors, now)
        if self._next_quality is not None and now >= self._next_quality:
            self._next_quality = next_due(self._next_quality, now, QUALITY_INTERVAL)
            q = self._quality or (self._measure(now) if self._measure is not None else None)
            if q is not None:
                out += self._emit(CallQualityUpdate, q.fields(), now)
        if self._next_cost is not None and now >= self._next_cost:
            self._next_cost = next_due(self._next_cost, now, COST_INTERVAL)
            cost = self._cost or (NO_COST if self._measure is not None else None)
            if cost is not None:
                out += self._emit(
                    AgentCostTick,
                    {"total_cost_usd_micros": total_cost(cost), "breakdown": cost},
                    now,
                )
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must be called next, or ``None``."""
        deadlines = []
        if self.state in GATEWAY_WINDOWED and self.dropped_at is not None:
            deadlines.append(self.dropped_at + RESUME_WINDOW + _WINDOW_EPSILON)
        if self.state in GATEWAY_SENDING:
            deadlines += [e.deadline for e in self._frame_errors.values() if e.deadline is not None]
            deadlines += [t for t in (self._next_quality, self._next_cost) if t is not None]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ inspection

    @property
    def last_seq(self) -> int:
        """The seq of the last server event sent (-1 before session.start)."""
        return self._stamper.next_seq - 1

    @property
    def replay_size(self) -> tuple[int, int]:
        """Events and encoded bytes the replay buffer holds."""
        return len(self._replay), self._replay.size

    # ------------------------------------------------------------------ internals

    def _go(self, event: GatewayInput) -> None:
        """Take the transition ``event`` from the current state (the table refuses a missing one
        with :class:`~voxwire.machine.TransitionRefused`, a ``SessionStateError``)."""
        self.state = step(GATEWAY_MACHINE, self.state, event).target

    def _require_live(self) -> None:
        if self.state is _LIVE:
            return
        if self.state is GatewayState.NEW:
            raise SessionStateError("the session has not started: call start() first")
        if self.state not in GATEWAY_SENDING:
            assert self.over is not None
            raise SessionStateError(f"the session is over ({self.over.detail})")

    def _window_passed(self, now: float) -> bool:
        return (
            self.state in GATEWAY_WINDOWED
            and self.dropped_at is not None
            and now - self.dropped_at > RESUME_WINDOW
        )

    def _over_detail(self) -> str:
        if self.over is not None and self.over.end is not None:
            return "the session ended and its session.end was delivered"
        return "the session is over" + (f" ({self.over.detail})" if self.over else "")

    # --- the stream

    def _stream_to(self, link: int, next_seq: int) -> None:
        """Make ``link`` the current link, its stream going on from ``next_seq``."""
        state = self._links[link]
        state.streaming = True
        state.next_seq = next_seq
        self.current_link = link
        self.dropped_at = None

    def _pump(self, link: int) -> list[GatewayOutput]:
        """Hand ``link`` the next events of the stream its window allows (then a pending close)."""
        state = self._links.get(link)
        if state is None or state.cut or not state.streaming:
            return []
        out: list[GatewayOutput] = []
        behind = self._stamper.next_seq - state.next_seq
        room = self._window - state.unwritten
        if behind > 0 and room > 0:
            if not self._replay.holds_after(state.next_seq - 1):
                return self._cut(link, Close(CloseCode.POLICY, "too slow: the stream was evicted"))
            chunk = self._replay.take(state.next_seq, min(behind, room))
            out = [ToLink(link, SendText(data), stream=True) for data in chunk]
            state.next_seq += len(chunk)
            state.unwritten += len(chunk)
        if state.close_after is not None and state.next_seq == self._stamper.next_seq:
            out += self._cut(link, state.close_after)
        return out

    def _close_after_stream(self, link: int, close: Close) -> list[GatewayOutput]:
        self._links[link].close_after = close
        return self._pump(link)

    def _cut(self, link: int, close: Close) -> list[GatewayOutput]:
        """Close ``link`` now; it gets nothing more (the adapter reports it lost)."""
        state = self._links.get(link)
        if state is None or state.cut:
            return []
        state.cut = True
        return [ToLink(link, close)]

    def _emit(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp one server event; the last two seqs are kept for the error and session.end."""
        if self._stamper.next_seq >= MAX_SEQ - 1:
            return self._seq_exhausted(now)
        return self._stamp(kind, fields, now)

    def _seq_exhausted(self, now: float) -> list[GatewayOutput]:
        detail = f"the server seq would pass {MAX_SEQ}"
        out = self._stamp(
            ErrorEvent,
            {"code": ErrorCode.OVP_INTERNAL_ERROR, "message": detail, "recoverable": False},
            now,
        )
        return out + self.end(SessionEndReason.ERROR, now, error_code=ErrorCode.OVP_INTERNAL_ERROR)

    def _stamp(
        self, kind: type[Message], fields: Mapping[str, Any], now: float
    ) -> list[GatewayOutput]:
        """Stamp one server event, keep it for replay, and stream it to the current link."""
        message, data = self._stamper.build(kind, fields, now)
        self._replay.add(self.last_seq, data, now)
        self._track_server(message)
        out: list[GatewayOutput] = [Sent(message, len(data))]
        if self.current_link is not None:
            out += self._pump(self.current_link)
        return out

    def _answer(
        self, code: str, message: str, now: float, details: dict[str, Any] | None
    ) -> list[GatewayOutput]:
        """A recoverable error about a client event (it goes on the stream, to its link)."""
        if self.state not in GATEWAY_SENDING:
            return [Ignored(f"{code} outside the session: {message}", code)]
        fields: dict[str, Any] = {"code": code, "message": message, "recoverable": True}
        if details:
            fields["details"] = details
        return self._emit(ErrorEvent, fields, now)

    def _frame_error(self, code: ErrorCode, detail: str, now: float) -> list[GatewayOutput]:
        errors = self._frame_errors.get(code)
        if errors is None:
            errors = self._frame_errors[code] = _FrameErrors()
        errors.dropped += 1
        errors.last_detail = detail
        dropped: list[GatewayOutput] = [Ignored(detail, code)]  # reported at most once a second
        return dropped + self._report_frames(code, errors, now) if errors.due(now) else dropped

    def _report_frames(
        self, code: ErrorCode, errors: _FrameErrors, now: float
    ) -> list[GatewayOutput]:
        fields = {
            "code": code,
            "message": errors.last_detail,
            "recoverable": RECOVERABLE[code],
            "details": {"dropped_frames": errors.dropped},
        }
        errors.dropped = 0
        errors.next_report = now + _FRAME_REPORT_INTERVAL
        return self._emit(ErrorEvent, fields, now)

    # --- resuming

    def _resume(self, link: int, resume: SessionResume, now: float) -> list[GatewayOutput]:
        last = resume.last_server_seq
        if self.state in GATEWAY_WINDOWED and self._window_passed(now):
            assert self.dropped_at is not None
            return self._refuse_resume(
                link,
                last,
                f"{now - self.dropped_at:.3f} s after the drop, more than {RESUME_WINDOW:g} s",
                now,
            )
        if last > self.last_seq:
            return self._refuse_resume(
                link, last, f"last_server_seq {last} was never sent (last is {self.last_seq})", now
            )
        self._replay.evict(now)  # the age bound holds at the resume too, not only on a send
        if not self._replay.holds_after(last):
            return self._refuse_resume(
                link, last, f"the events after seq {last} are no longer all held", now
            )
        out: list[GatewayOutput] = []
        if self.current_link is not None:  # a half-open link: the resume takes the session over
            out += self._cut(self.current_link, Close(CloseCode.NORMAL, "resumed elsewhere"))
            self._links.pop(self.current_link, None)
        ended = self.state in GATEWAY_ENDED
        self._go(GatewayInput.RESUME)
        self._stream_to(link, last + 1)
        self._last_client_seq = resume.seq
        out.append(Resumed(link, self.last_seq - last, resume))
        if ended:  # the client gets the rest, session.end included, then 1000
            return out + self._close_after_stream(link, Close(CloseCode.NORMAL, "session ended"))
        return out + self._pump(link)

    def _first_on_resumed_link(
        self, link: int, data: bytes | str, now: float
    ) -> list[GatewayOutput]:
        """A connection to a started session speaks a valid session.resume first, or the resume
        is refused and the session ends (decision first-event-on-a-resumed-link): an answer
        kept in the session's stream would let a client resuming after it skip what it missed.
        """
        try:
            message = decode(data, sender="client")
        except ProtocolError as exc:
            if exc.message_type == SessionResume.type:
                detail = f"malformed session.resume: {describe(exc)}"
                return self._refuse_resume(link, None, detail, now)
            detail = f"expected session.resume: {describe(exc)}"
            return self._refuse_resume(link, None, detail, now, exc.code)
        invalid = ErrorCode.OVP_EVENT_SCHEMA_INVALID
        if not isinstance(message, SessionResume):
            detail = f"expected session.resume, got {message.type}"
            return self._refuse_resume(link, None, detail, now, invalid)
        if message.session_id != self.session_id:
            detail = f"session.resume names another session ({message.session_id!r})"
            return self._refuse_resume(link, None, detail, now, invalid)
        if self._last_client_seq is not None and message.seq <= self._last_client_seq:
            detail = f"session.resume seq {message.seq} is not greater than {self._last_client_seq}"
            return self._refuse_resume(link, None, detail, now, ErrorCode.OVP_SEQ_REGRESSION)
        return self._resume(link, message, now)

    def _refuse_resume(
        self,
        link: int,
        last: int | None,
        detail: str,
        now: float,
        code: ErrorCode = ErrorCode.OVP_RESUME_EXPIRED,
    ) -> list[GatewayOutput]:
        """An error (not kept for replay), close 1008, and the session is over."""
        seq = max(self.last_seq, -1 if last is None else last) + 1
        error = ErrorEvent(
            seq=min(seq, MAX_SEQ),
            ts=self._stamper.ts(now),
            session_id=self.session_id,
            code=code,
            message=f"resume refused: {detail}",
            recoverable=False,
        )
        self._links[link].cut = True
        data = encode(error)
        out: list[GatewayOutput] = [
            Sent(error, len(data)),
            ToLink(link, SendText(data)),
            ToLink(link, Close(CloseCode.POLICY, "resume refused")),
        ]
        if self.state is not GatewayState.OVER:
            for other in list(self._links):
                out += self._cut(other, Close(CloseCode.POLICY, "session expired"))
            out += self._finish(code, f"resume refused: {detail}")
        return out

    def _expire(self, now: float) -> list[GatewayOutput]:
        """The resume window passed: refuse the links still waiting; the session is over."""
        waiting = [link for link, state in self._links.items() if not state.streaming]
        detail = f"no resume within {RESUME_WINDOW:g} s of the drop"
        out: list[GatewayOutput] = []
        for link in waiting:
            out += self._refuse_resume(link, None, detail, now)
        if self.state is not GatewayState.OVER:
            out += self._finish(
                ErrorCode.OVP_RESUME_EXPIRED, f"expired: {detail}", GatewayInput.WINDOW_PASSED
            )
        return out

    def _finish(
        self, code: str, detail: str, why: GatewayInput = GatewayInput.FAIL
    ) -> list[GatewayOutput]:
        """No more session: the replay goes; a session that had not ended fails."""
        self._go(why)
        self._replay.clear()
        self.dropped_at = None
        if self.over is not None:  # ended before: the application learnt it then
            return []
        self.over = SessionOver(None, code, detail)
        return [self.over]

    # --- the session's bookkeeping

    def _out_of_place(self, message: ClientMessage) -> str | None:
        """Why a valid client event does not fit the session's state, or ``None``."""
        if self.state is GatewayState.NEW:
            return f"{message.type} before session.start"
        if isinstance(message, SessionResume):
            return "session.resume on a connection that already resumed"
        if isinstance(message, SupervisorRelease) and self._takeover is not True:
            return "supervisor.release with no resumable supervisor.takeover in force"
        if isinstance(message, AgentHandoffAccepted) and self._handoff != "requested":
            return "agent.handoff_accepted with no pending agent.handoff_requested"
        if (
            isinstance(message, AgentHandoffCompleted | AgentHandoffFailed)
            and self._handoff is None
        ):
            return f"{message.type} with no handoff requested or accepted"
        return None

    def _track_client(self, message: ClientMessage) -> None:
        if isinstance(message, SupervisorTakeover):
            self._takeover = message.resumable
        elif isinstance(message, SupervisorRelease):
            self._takeover = None
        elif isinstance(message, AgentHandoffAccepted):
            self._handoff = "accepted"
        elif isinstance(message, AgentHandoffCompleted | AgentHandoffFailed):
            self._handoff = None

    def _track_server(self, message: Message) -> None:
        if isinstance(message, AgentHandoffRequested):
            self._handoff = "requested"
        elif isinstance(message, AgentHandoffCompleted):
            self._handoff = None
        elif isinstance(message, AgentToolInvoke):
            self._counts["tool_calls"] += 1
        elif isinstance(message, AgentBargeIn):
            self._counts["barge_ins"] += 1
        elif isinstance(message, AgentOutput) and message.final:
            self._counts["turns"] += 1

    def _apply(self, patch: SessionPatch) -> None:
        """Apply a patch atomically: every field it sets, from the next turn."""
        assert self.agent is not None
        changes = {
            name: value
            for name, value in msgspec.structs.asdict(patch).items()
            if value is not UNSET
        }
        context = changes.pop("caller_context", None)
        if context is not None:
            self.caller_context = context
        if changes:
            self.agent = msgspec.structs.replace(self.agent, **changes)


def refuse_token(session_id: str, detail: str, *, epoch: float, now: float) -> list[Action]:
    """What a connection with a bad token gets: ``error`` OVP_AUTH_FAILED (seq 0), close 1008.

    The handshake has completed; no session.start and no session.end are sent.
    """
    error = ErrorEvent(
        seq=0,
        ts=timestamp(epoch + now),
        session_id=session_id,
        code=ErrorCode.OVP_AUTH_FAILED,
        message=detail,
        recoverable=False,
    )
    return [SendText(encode(error)), Close(CloseCode.POLICY, "authentication failed")]
