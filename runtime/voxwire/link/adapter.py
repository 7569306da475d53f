"""The asyncio adapter of the outbound link of one ``websockets`` asyncio
:class:`~websockets.asyncio.connection.Connection`: writes in the caller's loop turn, a writer
task only once one must wait (a full socket buffer, the close), the keepalive on a loop timer.

It owns no protocol rule: the role encodes its messages (so checks them, in its own task),
hands the bytes to :class:`Link`, and feeds every frame it reads to :meth:`Link.heard`.
Everything queued in one turn of the event loop is written once that turn ends, as one socket
write (one loop callback per turn for every link of the loop, no task switch); an ``eager`` link
writes the first message of a turn at once instead, and what follows it in the same turn at the
turn's end (a message alone in its turn, a real-time audio frame, then waits no loop turn at
all). While the socket's buffer is over its high-water mark the writer task (started the first
time) waits for it to drain, under one drain timeout, and writes what queued meanwhile as the
next batch. A link that never has to wait runs no task of its own.
If anything goes wrong on the way out (the drain timeout, the connection, silence past the
keepalive bound, a control queue the peer does not read, any other error) the link goes down
once, visibly: the transport is aborted (the role's reader sees the connection end), it is
logged, and ``on_down`` is called with a :class:`LinkDown`.

```text
outbound = Outbound(event_bound=1024, overflow=Overflow.DROP, report_lost=events_lost)
link = Link(ws, outbound, clock=clock, drain_timeout=2.0, keepalive=Keepalive(...),
            on_down=role.link_down)
link.control(SendText(encode(message)))      # never waits, never dropped
link.event(SendText(encode(event)))          # Put.DROPPED when full (Overflow.DROP)
await link.put_event(SendText(...))          # Overflow.WAIT: waits for room
link.feed(replay)                            # a stream that enters as the queue drains
async for data in ws:
    link.heard()
    ...
link.close(1000, "bye", final=[SendText(encode(end))])   # after everything queued
await link.wait_closed()
```
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from voxwire.clock import Clock
from voxwire.link.keepalive import Keepalive, KeepaliveAction
from voxwire.link.outbound import Frame, Outbound, Put
from voxwire.sansio import Close, DownCause, LinkDown, SendText

__all__ = ["DownCause", "Link", "LinkDown"]

log = logging.getLogger(__name__)

# Bound once: an Enum member look-up is a call on Python 3.11, and these are tested per message.
_QUEUED: Final = Put.QUEUED
_OPEN: Final = State.OPEN


class Link:
    """One connection's way out: the writer, the keepalive and the close, over ``outbound``.

    Args:
        ws: The open connection (made with ``ping_interval=None``: the keepalive is here).
        outbound: The connection's queue, configured by the role.
        clock: The clock the timers follow.
        drain_timeout: Clock seconds a batch (everything queued in one loop turn) may take to
            drain from the socket's buffer once it is over its high-water mark.
        keepalive: The ping and silence policy; None for no keepalive.
        close_timeout: Clock seconds the closing handshake may take (default: the drain
            timeout).
        on_down: Called once, when the link goes down (not after a clean close).
        on_drained: Called after a drain that made room for events was written (and after each
            wait for the socket to drain), with the events that may be queued now (a sans-I/O
            core that sends on credit tops it up here).
        record: Called with each message as it is written (text as ``str``).
        name: How the logs name the link (never a URL's query).
        eager: Write the first message queued in a loop turn at once (what follows it in the
            same turn waits for the turn's end, as without ``eager``): a message that comes
            alone, such as a real-time audio frame, leaves one loop turn sooner, at the cost of
            a second write when more follows in its turn.
    """

    def __init__(
        self,
        ws: Connection,
        outbound: Outbound,
        *,
        clock: Clock,
        drain_timeout: float,
        keepalive: Keepalive | None = None,
        close_timeout: float | None = None,
        on_down: Callable[[LinkDown], None] | None = None,
        on_drained: Callable[[int], None] | None = None,
        record: Callable[[str | bytes], None] | None = None,
        name: str = "link",
        eager: bool = False,
    ) -> None:
        self.ws = ws
        self.outbound = outbound
        self.clock = clock
        self.keepalive = keepalive
        self.name = name
        self.down: LinkDown | None = None
        """Why the link went down, once it did."""
        self.drains = 0
        """Batches written (each one socket write of one or more frames)."""
        self.frames = 0
        """Frames written."""
        self.pings = 0
        self.pongs = 0
        self.rtt: float | None = None
        """The round trip of the last keepalive ping, in seconds (None before its pong)."""
        self._drain_timeout = drain_timeout
        self._close_timeout = drain_timeout if close_timeout is None else close_timeout
        self._on_down = on_down
        self._on_drained = on_drained
        self._record = record
        self._eager = eager
        self._turn_end = _turn_end(asyncio.get_running_loop())
        self._in_turn = False  # the link waits for the end of this loop turn
        self._flush_due = False  # and has something to write then
        self._report_due = False  # or the room an eager write left to report
        self._flushing = False  # a flush runs: it writes what is queued meanwhile
        self._waiting = False  # the writer task owns the socket: it waits for a drain or closes
        self._closing: Close | None = None
        self._kick = asyncio.Event()  # for the writer task
        self._room: asyncio.Event | None = None  # made for the first producer that waits
        self._room_awaited = False  # a producer waits on _room: a flush that takes sets it
        self._pings: set[asyncio.Task[None]] = set()
        # The writer task starts when a flush first hands over (a full socket buffer, the
        # close), and is let go once done: a cancelled one holds its CancelledError, whose
        # traceback holds the task's frame and so this link (a cycle only a full collection
        # would free, with the connection and everything else the link holds).
        self._writer: asyncio.Task[None] | None = None
        self._ended = False  # the close was written, the link went down, or it was stopped
        self._end: asyncio.Future[None] | None = None  # what wait_closed waits on
        # The keepalive is one loop timer at its next deadline, not a task.
        self._keeper: asyncio.TimerHandle | None = None
        if keepalive is not None:
            self._set_keepalive(keepalive)

    # -- state ----------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the link is neither down nor closed."""
        return self.down is None and not self._ended

    # -- sending --------------------------------------------------------------------------------

    def control(self, frame: Frame) -> Put:
        """Queue a control message (never dropped; never waits)."""
        put = self.outbound.control(frame)
        if put is _QUEUED:  # the audio path: one call fewer
            self._schedule()
            return put
        return self._queued(put)

    def event(self, frame: Frame) -> Put:
        """Queue an event: :data:`Put.DROPPED` or :data:`Put.FULL` when the class is full."""
        return self._queued(self.outbound.event(frame))

    async def put_event(self, frame: Frame) -> Put:
        """Queue an event, waiting for room while the class is full (:data:`Overflow.WAIT`)."""
        while (put := self.event(frame)) is Put.FULL:
            await self._wait_for_room()
        return put

    def feed(self, frames: Iterable[Frame]) -> Put:
        """Queue a stream of events (a replay) that enters the queue as it drains."""
        return self._queued(self.outbound.feed(frames))

    def flush(self) -> None:
        """Write what is queued now rather than at the turn's end: the caller is done queuing
        (an application about to wait for its next input), so its messages leave in one write
        without waiting for the rest of the loop's turn."""
        if self._flush_due and not self._flushing:
            self._flush()

    async def wait_room(self) -> None:
        """Wait until an event may be queued (or the link is down or closing)."""
        while self.outbound.room <= 0 and self.outbound.accepting:
            await self._wait_for_room()

    async def _wait_for_room(self) -> None:
        if self._room is None:
            self._room = asyncio.Event()
        self._room.clear()
        self._room_awaited = True
        await self._room.wait()

    def heard(self, now: float | None = None) -> None:
        """A frame arrived from the peer (at ``now``, this clock's time, when the caller read
        it already): a sign of life."""
        if self.keepalive is not None:
            self.keepalive.heard(self.clock.now() if now is None else now)

    # -- the end --------------------------------------------------------------------------------

    def close(self, code: int, reason: str = "", final: Sequence[Frame] = ()) -> None:
        """Queue ``final`` and the close after everything queued before."""
        self.outbound.close(code, reason, final)
        self._schedule()

    async def wait_closed(self) -> None:
        """Wait until the writer is done: the close was written, or the link went down."""
        if not self._ended:
            if self._end is None:
                self._end = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._end)
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    def abort(self, reason: str) -> None:
        """Take the link down now (what is queued is dropped)."""
        self._go_down(DownCause.ABORTED, reason)

    async def stop(self) -> None:
        """Stop the writer and the keepalive (the connection ended); what is queued is dropped."""
        self.outbound.fail()
        self._stop_keepalive()
        tasks = [self._writer] if self._writer is not None else []
        tasks += self._pings
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._wake_producers()
        self._mark_ended()

    # -- the tasks ------------------------------------------------------------------------------

    def _wake_producers(self) -> None:
        self._room_awaited = False
        if self._room is not None:
            self._room.set()

    def _mark_ended(self) -> None:
        self._ended = True
        if self._end is not None and not self._end.done():
            self._end.set_result(None)

    def _writer_done(self, _: asyncio.Task[None]) -> None:
        self._writer = None
        self._mark_ended()  # it returns once the close is written, or the link is down

    def _queued(self, put: Put) -> Put:
        if put is _QUEUED:
            self._schedule()
        elif put is Put.OVERFLOWED:
            self._go_down(
                DownCause.OVERFLOW,
                f"more than {self.outbound.control_bound} control messages waiting: "
                "the peer is not reading",
            )
        return put

    def _schedule(self) -> None:
        if self._waiting or self._flushing or self.down is not None:
            return  # the writer task or the running flush writes it; a link down writes nothing
        if not self._in_turn:
            self._in_turn = True
            self._turn_end.join(self)
            if self._eager and _writable(self.ws):
                self._flush(eager=True)  # a connection not open fails at the turn's end instead
                return
        self._flush_due = True

    def _turn_over(self) -> None:
        """The loop turn in which the link was used ended: write what queued in it, and report
        the room an eager write left."""
        self._in_turn = False
        report, self._report_due = self._report_due, False
        if self._flush_due or report:
            self._flush(report=report)

    def _flush(self, *, eager: bool = False, report: bool = False) -> None:
        """Write what is queued now, in one write per batch, without waiting (at the turn's end,
        or at once for the first message of an eager link's turn).

        A full socket buffer, or the close, hands over to the writer task. ``on_drained`` is
        called after each batch that made room for events (not after control or audio alone),
        and may queue more (the loop writes it), except in an eager write: its caller may be
        amid queuing a sequence, so the turn's end reports the room (``report``).
        """
        self._flush_due = False
        self._flushing = True
        outbound, ws, on_drained = self.outbound, self.ws, self._on_drained
        try:
            while not self._waiting and self.down is None:
                if not outbound.pending:
                    if not report or on_drained is None:
                        break
                    report = False
                    on_drained(outbound.room)
                    continue
                if ws.protocol.state is not _OPEN or ws.transport.is_closing():
                    # Nothing is taken (and stamped) that cannot be written: what stays queued
                    # is what the link went down with, and a role counts it lost.
                    self._closed_under(f"the connection is {ws.protocol.state.name.lower()}")
                    return
                room = outbound.room
                batch = outbound.take(self.clock.now())
                if self._room_awaited:
                    self._wake_producers()
                frames = batch.frames
                if frames and not self._write_now(frames):
                    self._closed_under(f"the connection is {ws.protocol.state.name.lower()}")
                    return
                if batch.close is not None:
                    self._closing = batch.close
                    self._hand_over()
                elif _over_high_water(ws):
                    self._hand_over()
                elif on_drained is None or outbound.room == room:
                    pass  # no room made (control and audio only): nothing to report
                elif eager:  # reported at the turn's end
                    self._report_due = True
                else:
                    report = False
                    on_drained(outbound.room)
        except Exception as exc:
            log.exception("%s: the writer failed", self.name)
            self._go_down(DownCause.WRITER_FAILED, f"the writer failed: {exc!r}")
        finally:
            self._flushing = False

    def _write_now(self, frames: list[Frame]) -> bool:
        """Build the frames with websockets' sans-I/O protocol object and write them at once;
        False when the connection is no longer open."""
        ws = self.ws
        protocol, transport = ws.protocol, ws.transport
        if protocol.state is not _OPEN or transport.is_closing():  # _writable(ws), inline
            return False
        if self._record is not None:
            for frame in frames:
                self._record(frame.data.decode() if isinstance(frame, SendText) else frame.data)
        for frame in frames:
            if isinstance(frame, SendText):
                protocol.send_text(frame.data)
            else:
                protocol.send_binary(frame.data)
        data = protocol.data_to_send()
        transport.write(data[0] if len(data) == 1 else b"".join(data))
        self.drains += 1
        self.frames += len(frames)
        return True

    def _hand_over(self) -> None:
        self._waiting = True
        self._kick.set()
        if self._writer is None and not self._ended:
            self._writer = asyncio.create_task(self._write(), name=f"{self.name} writer")
            self._writer.add_done_callback(self._writer_done)

    async def _write(self) -> None:
        """The writer task: waits for the socket to drain (bounded), then for the close."""
        ws = self.ws
        try:
            while True:
                await self._kick.wait()
                self._kick.clear()
                async with asyncio.timeout(self.clock.real_seconds(self._drain_timeout)):
                    async with ws.send_context():  # waits until under the low-water mark
                        pass
                if self._closing is not None:
                    await self._close(self._closing)
                    return
                self._waiting = False
                self._flush(report=True)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._go_down(
                DownCause.DRAIN_TIMEOUT,
                f"a drain took longer than the drain timeout ({self._drain_timeout:g} s)",
            )
        except ConnectionClosed as exc:
            self._closed_under(f"the connection closed: {exc}")
        except Exception as exc:
            log.exception("%s: the writer failed", self.name)
            self._go_down(DownCause.WRITER_FAILED, f"the writer failed: {exc!r}")

    async def _close(self, close: Close) -> None:
        ws = self.ws
        try:
            async with asyncio.timeout(self.clock.real_seconds(self._close_timeout)):
                await ws.close(close.code, close.reason)
        except TimeoutError:
            ws.transport.abort()
        self._stop_keepalive()

    def _set_keepalive(self, keepalive: Keepalive) -> None:
        delay = self.clock.real_seconds(max(0.0, keepalive.next_deadline() - self.clock.now()))
        self._keeper = asyncio.get_running_loop().call_later(delay, self._keep_alive, keepalive)

    def _keep_alive(self, keepalive: Keepalive) -> None:
        """The keepalive's deadline: ping, or take the link down, or nothing yet; then the next."""
        self._keeper = None
        action = keepalive.tick(self.clock.now())
        if action is KeepaliveAction.PING:
            task = asyncio.create_task(self._ping(), name=f"{self.name} ping")
            self._pings.add(task)
            task.add_done_callback(self._pings.discard)
        elif action is KeepaliveAction.DOWN:
            self._go_down(DownCause.SILENCE, f"nothing heard for {keepalive.silence_timeout:g} s")
            return
        self._set_keepalive(keepalive)

    async def _ping(self) -> None:
        try:
            pong = await self.ws.ping()
            self.pings += 1
            self.rtt = await pong  # websockets measures it: the pong's latency in seconds
        except ConnectionClosed:
            return
        self.pongs += 1
        self.heard()

    def _stop_keepalive(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            self._keeper = None
        current = asyncio.current_task()
        for task in self._pings:
            if task is not current:
                task.cancel()

    def _closed_under(self, reason: str) -> None:
        """The connection closed while frames were waiting: after the peer's close (the end
        of the link, as its reader sees too) or not (a failure)."""
        peer_closed = self.ws.protocol.close_rcvd is not None
        self._go_down(DownCause.CLOSED, reason, peer_closed=peer_closed)

    def _go_down(self, cause: DownCause, reason: str, *, peer_closed: bool = False) -> None:
        if self.down is not None:
            return
        self.down = LinkDown(reason, cause=cause)
        self.outbound.fail()
        if not peer_closed:  # else websockets finishes the closing handshake the peer began
            self.ws.transport.abort()
        self._stop_keepalive()
        if self._writer is not None and self._writer is not asyncio.current_task():
            self._writer.cancel()
        self._mark_ended()
        self._wake_producers()
        if peer_closed:
            log.info("%s: link closed by the peer; what was queued is not written", self.name)
        else:
            log.warning("%s: link down: %s", self.name, reason)
        if self._on_down is not None:
            try:
                self._on_down(self.down)
            except Exception:
                log.exception("%s: the link-down callback failed", self.name)


class _TurnEnd:
    """The end of the current loop turn for every link of one event loop: one loop callback a
    turn for all of them, rather than one per link."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._links: list[Link] = []

    def join(self, link: Link) -> None:
        if not self._links:
            self._loop.call_soon(self._run)
        self._links.append(link)

    def _run(self) -> None:
        links, self._links = self._links, []
        for link in links:
            link._turn_over()


_TURN_ENDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _TurnEnd] = (
    weakref.WeakKeyDictionary()
)


def _turn_end(loop: asyncio.AbstractEventLoop) -> _TurnEnd:
    turn_end = _TURN_ENDS.get(loop)
    if turn_end is None:
        turn_end = _TURN_ENDS[loop] = _TurnEnd(loop)
    return turn_end


def _writable(ws: Connection) -> bool:
    """Whether frames can be written to the connection now."""
    return ws.protocol.state is _OPEN and not ws.transport.is_closing()


def _over_high_water(ws: Connection) -> bool:
    """Whether the socket's buffer is over its high-water mark (the protocol is paused)."""
    transport = ws.transport
    size = transport.get_write_buffer_size()  # 0 but for a socket that is behind
    return size > 0 and size > transport.get_write_buffer_limits()[1]
