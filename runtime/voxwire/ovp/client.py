"""The OVP client over ``websockets``: :class:`OVPClient`.

It connects to ``{base}/voice/ws/{session_id}?token=...`` offering the subprotocol
``orbit-voice/1.0`` exactly, takes ``session.start``, then exchanges events and 20 ms audio frames
with the gateway; a dropped link is reconnected and resumed within the 30 s window, the replayed
events delivered exactly once and in order.

```text
client = OVPClient("wss://voice.example.com", session_id, token)
client.on("transcript.final", lambda event: print(event.text))
start = await client.connect()                    # session.start
await client.stream_audio(pcm)                    # paced at 20 ms a frame
await client.send_agent_input(source=ovp.InputSource.DEVELOPER_INJECT, text="Hi")
end = await client.run()                          # until session.end; handlers as events come
```

The upgrade (the subprotocol ``orbit-voice/1.0``, which ``websockets`` would refuse, offered
verbatim, and a refusal read into a :class:`HandshakeError`) is :mod:`voxwire.ovp._upgrade`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final, assert_never
from urllib.parse import quote

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voxwire.capture import Record, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import HandshakeError, VoxwireError
from voxwire.hosts import check_url
from voxwire.link import Link, Put
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats
from voxwire.ovp import (
    ENDPOINT_PATH,
    FLAG_LAST_OF_UTTERANCE,
    FRAME_MS,
    OPEN_TIMEOUT_MS,
    PCM_BYTES_PER_FRAME,
    RECONNECT_BACKOFF_INITIAL_MS,
    RECONNECT_BACKOFF_MAX_MS,
    REPLAY_BUFFER_MAX_EVENTS,
    SILENCE_TIMEOUT_MS,
    TOKEN_QUERY_PARAMETER,
    WRITE_TIMEOUT_MS,
    AudioFrame,
    ClientMessage,
    ServerMessage,
    SessionEnd,
    SessionStart,
)
from voxwire.ovp._session import (
    AudioIn,
    Sent,
    SessionOver,
    SessionStateError,
    check_session_id,
)
from voxwire.ovp._transport import count_read, open_link, perform
from voxwire.ovp._upgrade import VERIFIED_WEBSOCKETS, passing, upgrade
from voxwire.ovp.client_core import (
    ClientCore,
    ClientOutput,
    Dropped,
    Rejected,
    ServerEvent,
)
from voxwire.ovp.roles import ClientReceives, ClientSends
from voxwire.redaction import install_redaction
from voxwire.sansio import Close, Ignored, SendBinary, SendText
from voxwire.session import Handler, Handlers, Inbox, SessionCounts

__all__ = [
    "VERIFIED_WEBSOCKETS",
    "EventHandler",
    "HandshakeError",
    "OVPClient",
    "SessionFailed",
    "SessionStateError",
    "TokenSource",
]


log = logging.getLogger(__name__)

TokenSource = str | Callable[[], Awaitable[str]]
"""The session token, or a coroutine function that returns the token to use for each connection
(a resume late in a call may need a fresh one)."""

EventHandler = Handler
"""Called with each server event of its type; may return an awaitable, run as a task."""

_FRAME_S: Final = FRAME_MS / 1000
_RECONNECT_FIRST_S: Final = RECONNECT_BACKOFF_INITIAL_MS / 1000
_RECONNECT_MAX_S: Final = RECONNECT_BACKOFF_MAX_MS / 1000


class SessionFailed(VoxwireError):
    """The session ended without ``session.end``: refused, expired, or broken.

    Attributes:
        code: The OVP error code (``OVP_AUTH_FAILED``, ``OVP_RESUME_EXPIRED``, ...), or ``None``.
        detail: What happened.
    """

    def __init__(self, code: str | None, detail: str) -> None:
        super().__init__(f"{code}: {detail}" if code else detail)
        self.code = code
        self.detail = detail


class OVPClient(ClientSends[Coroutine[Any, Any, ClientMessage]], ClientReceives, SessionCounts):
    """An OVP client for one session.

    It sends with one typed method per client event (``await client.send_agent_input(...)``,
    ``send_dtmf``, ...: keyword arguments, the event's own fields) and takes a handler per
    server event type (``client.on("transcript.final", handler)``, the handler called with a
    :class:`~voxwire.ovp.TranscriptFinal`; a type the gateway does not send raises
    ``ValueError`` at once). Handlers run as :mod:`voxwire.session` says for every role: in the
    reader, in arrival order (an ``async`` one as a task); what a handler takes is not iterated
    (``session.end`` reaches both); one that raises is logged with the session and the event
    type and counted in ``handler_errors``. Iterate the client (or :meth:`run`) for the rest.

    Args:
        base_url: ``wss://host[:port]`` of the gateway (``ws://`` only to a loopback or private
            host, unless ``allow_insecure``); the endpoint path and the token are appended.
        session_id: The session, as issued with the token.
        token: The session token, or a coroutine function returning one per connection.
        allow_insecure: Accept ``ws://`` to a public host (the token travels in clear).
        clock: The clock of every timer (resume window, pacing, reconnect backoff).
        ssl: An ``ssl.SSLContext`` for ``wss://`` (the default verifies the server).
        open_timeout: Seconds to open a connection and, on the first, to get session.start.
        write_timeout: Seconds one drain of the link's queue may take before the link counts as
            dropped.
        keepalive: Seconds of silence (no message, no pong) after which the link counts as
            dropped; it is pinged twice as often.
        max_events: Server events held for the application before new ones are lost (counted);
            by default as many as a resume may replay at once (``REPLAY_BUFFER_MAX_EVENTS``).
        max_audio: Server frames held for :meth:`audio` before new ones are lost (counted).
        audio_buffer: Frames :meth:`stream_audio` queues ahead of the paced sender.
        record: Record every message of the session, sent and received, across its
            connections, into this capture (a path, ``{session_id}`` in it replaced by the
            session's id; or a ``voxwire.capture.Recorder``); see ``voxwire validate``.

    Attributes:
        rejected: Bad server events and frames dropped (each logged at WARNING).
        handler_errors: Times a handler registered with ``on()`` raised.
        ignored: Replayed duplicates and events of unknown types dropped (logged at DEBUG).
        reconnects: Connections that resumed the session.
    """

    def __init__(
        self,
        base_url: str,
        session_id: str,
        token: TokenSource,
        *,
        allow_insecure: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        ssl: Any = None,
        open_timeout: float = OPEN_TIMEOUT_MS / 1000,
        write_timeout: float = WRITE_TIMEOUT_MS / 1000,
        keepalive: float = SILENCE_TIMEOUT_MS / 1000,
        max_events: int = REPLAY_BUFFER_MAX_EVENTS,
        max_audio: int = 500,
        audio_buffer: int = 50,
        record: Record = None,
    ) -> None:
        self._checked = check_url(base_url, allow_insecure=allow_insecure)
        if "?" in base_url or "#" in base_url:
            raise ValueError(f"{self._checked.redacted}: the base URL takes no query or fragment")
        if self._checked.warning:
            log.warning("%s: %s", self._checked.redacted, self._checked.warning)
        self.session_id = check_session_id(session_id)
        self._base = base_url.rstrip("/")
        self._token = token
        self._clock = clock
        self._ssl = ssl
        self._open_timeout = open_timeout
        self._write_timeout = write_timeout
        self._keepalive = keepalive
        self._core = ClientCore(session_id, epoch=time.time() - clock.now())
        self._inbox: Inbox[ServerMessage] = Inbox(max_events, at_end=self._end_error)
        self._audio: Inbox[AudioFrame] = Inbox(max_audio)
        self._pcm: asyncio.Queue[tuple[bytes, int]] = asyncio.Queue(audio_buffer)
        self._handlers = Handlers(session_id, log)
        self._stats = SessionStats.of("ovp", own="client")
        self._link: Link | None = None
        self._recorder, self._capture = open_recorder(
            record, protocol="ovp", recorded_by="client", session_id=session_id, clock=clock
        )
        self._runner: asyncio.Task[None] | None = None
        self._pacer: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._resume_by = 0.0
        self._hung_up = False
        self.rejected = 0
        self.ignored = 0
        self.reconnects = 0
        install_redaction()

    def __repr__(self) -> str:
        return f"OVPClient({self._checked.redacted}, session_id={self.session_id!r})"

    # ------------------------------------------------------------------ state

    @property
    def session_start(self) -> SessionStart | None:
        """The session's ``session.start``, once received."""
        return self._core.session_start

    @property
    def session_end(self) -> SessionEnd | None:
        """The session's ``session.end``, once received."""
        return self._core.over.end if self._core.over else None

    @property
    def over(self) -> SessionOver | None:
        """How the session ended, once it did."""
        return self._core.over

    @property
    def stats(self) -> Snapshot:
        """The session's statistics so far, across its connections (docs/observability.md)."""
        return self._stats.snapshot()

    @property
    def connected(self) -> bool:
        """Whether a link to the gateway is up now (``False`` while a drop is being resumed)."""
        return self._core.linked

    @property
    def last_server_seq(self) -> int | None:
        """The seq of the last server event processed."""
        return self._core.last_server_seq

    @property
    def audio_lost(self) -> int:
        """Server frames dropped because the application did not read :meth:`audio`."""
        return self._audio.lost

    # ------------------------------------------------------------------ connecting

    async def connect(self) -> SessionStart:
        """Open the connection and wait for ``session.start``.

        Raises :class:`HandshakeError` (refused upgrade, subprotocol not echoed),
        :class:`SessionFailed` (``OVP_AUTH_FAILED``, no session.start in time), ``OSError``.
        """
        if self._runner is not None:
            raise SessionStateError("connect() was already called")
        ws = await self._open()
        self._attach(ws)
        self._runner = asyncio.create_task(self._run(ws))
        try:
            async with asyncio.timeout(self._clock.real_seconds(self._open_timeout)):
                while self._core.session_start is None and self._core.over is None:
                    await self._wait_change()
        except TimeoutError:
            await self.close()
            raise SessionFailed(None, "no session.start in time") from None
        start = self._core.session_start
        if start is None:
            raise self._failure()
        return start

    async def close(self) -> None:
        """Hang up: close with 1000 (the gateway keeps the session for a resume 30 s)."""
        self._hung_up = self._hung_up or self._core.over is None
        self._perform(self._core.close())
        if self._runner is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._clock.real_seconds(self._write_timeout)):
                    await asyncio.shield(self._runner)
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        await self._stop_pacer()
        self._handlers.cancel()
        if self._capture is not None:
            self._capture.close()

    async def __aenter__(self) -> OVPClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ events

    def _on(self, message_type: str, handler: EventHandler) -> None:
        """Register ``handler`` for ``message_type`` (:meth:`on` checked it: a server event)."""
        self._handlers.add(message_type, handler)

    def __aiter__(self) -> Inbox[ServerMessage]:
        """The server events no handler took, in order; ends after session.end, raising
        :class:`SessionFailed` at the end of a session that failed."""
        return self._inbox

    async def run(self) -> SessionEnd | None:
        """Consume every event until the session is over (the handlers run as they arrive).

        Returns ``session.end`` (``None`` if the client closed first); raises
        :class:`SessionFailed` for a session that failed.
        """
        async for _ in self._inbox:
            pass
        return self.session_end

    def audio(self) -> Inbox[AudioFrame]:
        """The gateway's audio frames in order, until the session is over (``async for``)."""
        return self._audio

    async def _send(self, kind: type[ClientMessage], fields: dict[str, Any]) -> ClientMessage:
        """The one send path of every typed ``send_*`` method: one client event of ``fields``;
        seq, ts and session_id are stamped here.

        Waits while a dropped link is being resumed, and while the link's queue is full. Raises
        :class:`SessionFailed` once the session is over, ``TypeError`` for a wrong type or field,
        and :class:`~voxwire.ovp.ProtocolError` for a value the spec refuses.
        """
        link = await self._room()
        out = self._core.send(kind, fields, self._clock.now())
        self._perform(out, link, event=True)  # queued: it had room, and nothing awaited since
        sent = out[0]
        if type(sent) is not Sent:
            raise self._failure()
        assert isinstance(sent.message, kind)
        return sent.message

    # ------------------------------------------------------------------ audio

    def send_audio(
        self,
        pcm: bytes | bytearray | memoryview,
        *,
        flags: int = 0,
        rtp_timestamp: int | None = None,
    ) -> bool:
        """Send one frame (640 bytes of PCM) now; ``False`` when it is lost: the link is down or
        its queue full (audio is never replayed, and a late frame is no use)."""
        now = self._clock.now()
        out = self._core.send_audio(pcm, now, flags=flags, rtp_timestamp=rtp_timestamp)
        link = self._link
        if link is not None and len(out) == 1 and type(frame := out[0]) is SendBinary:
            queued = link.event(frame) is Put.QUEUED  # the audio path: one frame, no detour
            if queued:
                self._stats.on_frame("client", self._core.frame_sent, now)
            return queued
        return bool(out) and self._perform(out, link, event=True)

    async def stream_audio(
        self, pcm: bytes | bytearray | memoryview, *, last_of_utterance: bool = True
    ) -> None:
        """Queue PCM of any length for the paced sender, one frame every 20 ms.

        The last frame is padded with silence (and flagged ``last_of_utterance``). Waits while the
        bounded queue is full; :meth:`drain_audio` waits until all was sent.
        """
        view = memoryview(pcm).cast("B")
        if self._pacer is None:
            self._pacer = asyncio.create_task(self._pace())
        for offset in range(0, len(view), PCM_BYTES_PER_FRAME):
            chunk = bytes(view[offset : offset + PCM_BYTES_PER_FRAME])
            last = offset + PCM_BYTES_PER_FRAME >= len(view)
            flags = FLAG_LAST_OF_UTTERANCE if last and last_of_utterance else 0
            await self._pcm.put((chunk.ljust(PCM_BYTES_PER_FRAME, b"\0"), flags))

    async def drain_audio(self) -> None:
        """Wait until every queued frame was sent (or dropped with the session)."""
        await self._pcm.join()

    async def _pace(self) -> None:
        clock = self._clock
        next_at = clock.now()
        while True:
            chunk, flags = await self._pcm.get()
            try:
                while self._core.session_start is None and self._core.over is None:
                    await self._wait_change()
                now = clock.now()
                if now - next_at > 3 * _FRAME_S:  # idle or stalled: restart the schedule
                    next_at = now
                elif next_at > now:
                    await clock.sleep(next_at - now)
                next_at += _FRAME_S
                if self._core.over is None:
                    self.send_audio(chunk, flags=flags)
            finally:
                self._pcm.task_done()

    async def _stop_pacer(self) -> None:
        if self._pacer is not None:
            self._pacer.cancel()
            await asyncio.gather(self._pacer, return_exceptions=True)
            while not self._pcm.empty():
                self._pcm.get_nowait()
                self._pcm.task_done()

    # ------------------------------------------------------------------ adapter

    async def _open(self) -> ClientConnection:
        token = self._token if isinstance(self._token, str) else await self._token()
        path = ENDPOINT_PATH.format(session_id=self.session_id)
        url = f"{self._base}{path}?{TOKEN_QUERY_PARAMETER}={quote(token, safe='')}"
        options: dict[str, Any] = dict(self._checked.connect_overrides())  # an IPv6 zone
        if self._ssl is not None:
            options["ssl"] = self._ssl
        return await upgrade(
            url,
            self._checked.redacted,
            open_timeout=self._clock.real_seconds(self._open_timeout),
            close_timeout=self._clock.real_seconds(self._write_timeout),
            **options,
        )

    def _attach(self, ws: ClientConnection) -> None:
        record = None if self._recorder is None else partial(self._recorder.record, "client")
        self._link = open_link(
            ws,
            self._clock,
            write_timeout=self._write_timeout,
            keepalive=self._keepalive,
            name=f"OVP session {self.session_id} to {self._checked.redacted}",
            record=record,
        )
        self._perform(self._core.connected(self._clock.now()))
        self._notify()

    async def _run(self, ws: ClientConnection) -> None:
        """Read the link; on a drop reconnect and resume, until the session is over."""
        core, clock = self._core, self._clock
        try:
            while True:
                await self._read(ws)
                self._stats.on_link("lost" if core.over is None else "closed", clock.now())
                self._perform(core.link_lost(clock.now()))
                if core.over is not None:
                    return
                if self._recorder is not None:
                    self._recorder.link("lost")
                self._notify()
                reconnected = await self._reconnect()
                if reconnected is None:
                    self._perform(core.give_up("no connection resumed the session in time"))
                    return
                if core.over is not None:  # closed by the application meanwhile
                    await reconnected.close()
                    return
                ws = reconnected
                self.reconnects += 1
                self._stats.on_link("open", clock.now())
                if self._recorder is not None:
                    self._recorder.link("open")
                self._attach(ws)
        finally:
            self._inbox.close()
            self._audio.close()
            self._notify()

    async def _read(self, ws: ClientConnection) -> None:
        core, clock, stats = self._core, self._clock, self._stats
        try:
            async for data in ws:
                if self._link is not None:
                    self._link.heard()
                if self._recorder is not None:
                    self._recorder.record("server", data)
                now = clock.now()
                if isinstance(data, str):
                    out = core.receive_text(data, now)
                else:
                    out = core.receive_binary(data, now)
                count_read(stats, "server", out, now, data)
                self._perform(out)
        except ConnectionClosed:
            pass
        finally:
            if self._link is not None:  # the connection is closed: nothing more to write
                await self._link.stop()

    async def _reconnect(self) -> ClientConnection | None:
        clock = self._clock
        resume_by = self._resume_by
        delay = _RECONNECT_FIRST_S
        while self._core.over is None and (left := resume_by - clock.now()) > 0:
            try:
                async with asyncio.timeout(clock.real_seconds(min(left, self._open_timeout))):
                    return await self._open()
            except (ConnectionError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
                log.info("session %s: reconnect failed: %s", self.session_id, reason)
            except HandshakeError as exc:
                if not passing(exc):
                    log.warning("session %s: reconnect refused: %s", self.session_id, exc)
                    return None
                log.info("session %s: reconnect failed: %s", self.session_id, exc)
            await clock.sleep(min(delay, max(0.0, resume_by - clock.now())))
            delay = min(2 * delay, _RECONNECT_MAX_S)
        return None

    def _perform(
        self, out: list[ClientOutput], link: Link | None = None, *, event: bool = False
    ) -> bool:
        """Carry out the core's output; its messages go to ``link`` (the current one), as
        events (bounded) or control. ``False`` when one found no room or no link."""
        link = self._link if link is None else link
        written = True
        for item in out:
            match item:
                case ServerEvent(message=message):
                    # To its handlers, else (and session.end always) to the iteration.
                    kind, handlers = message.type, self._handlers
                    if (
                        kind not in handlers.types
                        or not handlers.dispatch(kind, message)
                        or type(message) is SessionEnd
                    ) and not self._inbox.put(message):
                        log.warning(
                            "session %s: %s lost: the application is not keeping up",
                            self.session_id,
                            kind,
                        )
                    if type(message) is SessionStart:
                        self._notify()
                case AudioIn(frame=frame):
                    self._audio.put(frame)
                case SendText() | SendBinary() | Close():
                    put = Put.CLOSED if link is None else perform(link, item, event=event)
                    written = written and put is Put.QUEUED
                case Sent(message=message, size=size):  # the caller's to return
                    self._stats.on_message("client", message, self._clock.now(), size=size)
                case Rejected(error=error):
                    self.rejected += 1
                    log.warning(
                        "session %s: dropped a bad server message: %s", self.session_id, error
                    )
                case Ignored(what=what):
                    self.ignored += 1
                    log.debug("session %s: ignored %s", self.session_id, what)
                case Dropped(resume_by=resume_by):
                    self._resume_by = resume_by
                    log.info("session %s: link dropped, resuming", self.session_id)
                case SessionOver(detail=detail):
                    log.info("session %s is over: %s", self.session_id, detail)
                    self._notify()
                case _:
                    assert_never(item)
        return written

    async def _room(self) -> Link:
        """The current link once the session is live and its queue has room for an event."""
        while True:
            link = self._link
            if self._core.over is not None:
                raise self._failure()
            if not self._core.live or link is None or not link.outbound.accepting:
                await self._wait_change()  # a resume, or the reader noticing the drop
            elif link.outbound.room > 0:
                return link
            else:
                await link.wait_room()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def _end_error(self) -> SessionFailed | None:
        """What ends the iteration of a session that failed (not of one the client hung up)."""
        over = self._core.over
        if over is not None and over.end is None and not self._hung_up:
            return self._failure()
        return None

    def _failure(self) -> SessionFailed:
        over = self._core.over
        if over is None:
            return SessionFailed(None, "the session has not started")
        return SessionFailed(over.code, over.detail)
