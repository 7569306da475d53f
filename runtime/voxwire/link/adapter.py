"""The asyncio adapter of the outbound link: one writer task and one keepalive task per
connection, on a ``websockets`` asyncio :class:`~websockets.asyncio.connection.Connection`.

It owns no protocol rule: the role encodes its messages (so checks them, in its own task),
hands the bytes to :class:`Link`, and feeds every frame it reads to :meth:`Link.heard`. The
writer writes everything queued in one wakeup as one socket write, under one drain timeout.
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from voxwire.clock import Clock
from voxwire.link.keepalive import Keepalive, KeepaliveAction
from voxwire.link.outbound import Batch, Frame, Outbound, Put
from voxwire.sansio import SendText

__all__ = ["DownCause", "Link", "LinkDown"]

log = logging.getLogger(__name__)


class DownCause(Enum):
    """Why a link went down."""

    DRAIN_TIMEOUT = "drain_timeout"
    """What was queued could not be written within the drain timeout."""
    SILENCE = "silence"
    """Nothing (no frame, no pong) was heard for the keepalive's silence timeout."""
    CLOSED = "closed"
    """The connection closed under the writer."""
    OVERFLOW = "overflow"
    """The control queue passed its bound: the peer is not reading."""
    WRITER_FAILED = "writer_failed"
    """The writer raised an unexpected error (logged with its traceback)."""
    ABORTED = "aborted"
    """The role took the link down (:meth:`Link.abort`)."""


@dataclass(frozen=True, slots=True)
class LinkDown:
    """The link went down: why, in words."""

    cause: DownCause
    reason: str


class Link:
    """One connection's way out: the writer, the keepalive and the close, over ``outbound``.

    Args:
        ws: The open connection (made with ``ping_interval=None``: the keepalive is here).
        outbound: The connection's queue, configured by the role.
        clock: The clock the timers follow.
        drain_timeout: Clock seconds one drain (everything queued at one wakeup) may take.
        keepalive: The ping and silence policy; None for no keepalive.
        close_timeout: Clock seconds the closing handshake may take (default: the drain
            timeout).
        on_down: Called once, when the link goes down (not after a clean close).
        on_drained: Called after each drain was written, with the events that may be queued
            now (a sans-I/O core that sends on credit tops it up here).
        record: Called with each message as it is written (text as ``str``).
        name: How the logs name the link (never a URL's query).
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
    ) -> None:
        self.ws = ws
        self.outbound = outbound
        self.clock = clock
        self.keepalive = keepalive
        self.name = name
        self.down: LinkDown | None = None
        """Why the link went down, once it did."""
        self.drains = 0
        """Drains written (each one socket write of one or more frames)."""
        self.frames = 0
        """Frames written."""
        self.pings = 0
        self.pongs = 0
        self._drain_timeout = drain_timeout
        self._close_timeout = drain_timeout if close_timeout is None else close_timeout
        self._on_down = on_down
        self._on_drained = on_drained
        self._record = record
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._pings: set[asyncio.Task[None]] = set()
        self._writer = asyncio.create_task(self._write(), name=f"{name} writer")
        self._keeper = (
            asyncio.create_task(self._keep_alive(), name=f"{name} keepalive")
            if keepalive is not None
            else None
        )

    # -- state ----------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the link is neither down nor closed."""
        return self.down is None and not self._writer.done()

    # -- sending --------------------------------------------------------------------------------

    def control(self, frame: Frame) -> Put:
        """Queue a control message (never dropped; never waits)."""
        return self._queued(self.outbound.control(frame))

    def event(self, frame: Frame) -> Put:
        """Queue an event: :data:`Put.DROPPED` or :data:`Put.FULL` when the class is full."""
        return self._queued(self.outbound.event(frame))

    async def put_event(self, frame: Frame) -> Put:
        """Queue an event, waiting for room while the class is full (:data:`Overflow.WAIT`)."""
        while (put := self.event(frame)) is Put.FULL:
            self._room.clear()
            await self._room.wait()
        return put

    def feed(self, frames: Iterable[Frame]) -> Put:
        """Queue a stream of events (a replay) that enters the queue as it drains."""
        return self._queued(self.outbound.feed(frames))

    async def wait_room(self) -> None:
        """Wait until an event may be queued (or the link is down or closing)."""
        while self.outbound.room <= 0 and self.outbound.accepting:
            self._room.clear()
            await self._room.wait()

    def heard(self) -> None:
        """A frame arrived from the peer: a sign of life."""
        if self.keepalive is not None:
            self.keepalive.heard(self.clock.now())

    # -- the end --------------------------------------------------------------------------------

    def close(self, code: int, reason: str = "", final: Sequence[Frame] = ()) -> None:
        """Queue ``final`` and the close after everything queued before."""
        self.outbound.close(code, reason, final)
        self._ready.set()

    async def wait_closed(self) -> None:
        """Wait until the writer is done: the close was written, or the link went down."""
        await asyncio.gather(self._writer, return_exceptions=True)

    def abort(self, reason: str) -> None:
        """Take the link down now (what is queued is dropped)."""
        self._go_down(DownCause.ABORTED, reason)

    async def stop(self) -> None:
        """Stop the writer and the keepalive (the connection ended); what is queued is dropped."""
        self.outbound.fail()
        tasks = [self._writer, *self._pings]
        if self._keeper is not None:
            tasks.append(self._keeper)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._room.set()

    # -- the tasks ------------------------------------------------------------------------------

    def _queued(self, put: Put) -> Put:
        if put is Put.QUEUED:
            self._ready.set()
        elif put is Put.OVERFLOWED:
            self._go_down(
                DownCause.OVERFLOW,
                f"more than {self.outbound.control_bound} control messages waiting: "
                "the peer is not reading",
            )
        return put

    async def _write(self) -> None:
        outbound = self.outbound
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                while outbound.pending:
                    batch = outbound.take(self.clock.now())
                    self._room.set()
                    if await self._drain(batch):
                        return
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self._go_down(
                DownCause.DRAIN_TIMEOUT,
                f"a drain took longer than the drain timeout ({self._drain_timeout:g} s)",
            )
        except ConnectionClosed as exc:
            self._go_down(DownCause.CLOSED, f"the connection closed: {exc}")
        except Exception as exc:
            log.exception("%s: the writer failed", self.name)
            self._go_down(DownCause.WRITER_FAILED, f"the writer failed: {exc!r}")

    async def _drain(self, batch: Batch) -> bool:
        """Write one batch; True once the close was written."""
        ws = self.ws
        if batch.frames:
            if self._record is not None:
                for frame in batch.frames:
                    self._record(frame.data.decode() if isinstance(frame, SendText) else frame.data)
            async with asyncio.timeout(self.clock.real_seconds(self._drain_timeout)):
                await _write_frames(ws, batch.frames)
            self.drains += 1
            self.frames += len(batch.frames)
            if self._on_drained is not None:
                self._on_drained(self.outbound.room)
        if batch.close is None:
            return False
        try:
            async with asyncio.timeout(self.clock.real_seconds(self._close_timeout)):
                await ws.close(batch.close.code, batch.close.reason)
        except TimeoutError:
            ws.transport.abort()
        self._stop_keepalive()
        return True

    async def _keep_alive(self) -> None:
        keepalive, clock = self.keepalive, self.clock
        assert keepalive is not None
        while True:
            await clock.sleep(keepalive.next_deadline() - clock.now())
            action = keepalive.tick(clock.now())
            if action is KeepaliveAction.PING:
                task = asyncio.create_task(self._ping(), name=f"{self.name} ping")
                self._pings.add(task)
                task.add_done_callback(self._pings.discard)
            elif action is KeepaliveAction.DOWN:
                self._go_down(
                    DownCause.SILENCE,
                    f"nothing heard for {keepalive.silence_timeout:g} s",
                )
                return

    async def _ping(self) -> None:
        try:
            pong = await self.ws.ping()
            self.pings += 1
            await pong
        except ConnectionClosed:
            return
        self.pongs += 1
        self.heard()

    def _stop_keepalive(self) -> None:
        current = asyncio.current_task()
        for task in [self._keeper, *self._pings]:
            if task is not None and task is not current:
                task.cancel()

    def _go_down(self, cause: DownCause, reason: str) -> None:
        if self.down is not None:
            return
        self.down = LinkDown(cause, reason)
        self.outbound.fail()
        self.ws.transport.abort()
        self._stop_keepalive()
        if self._writer is not asyncio.current_task():
            self._writer.cancel()
        self._room.set()
        log.warning("%s: link down: %s", self.name, reason)
        if self._on_down is not None:
            try:
                self._on_down(self.down)
            except Exception:
                log.exception("%s: the link-down callback failed", self.name)


async def _write_frames(ws: Connection, frames: Sequence[Frame]) -> None:
    """Write ``frames`` as one socket write and wait until the buffer drains.

    Under the connection's own send context (it checks the state and waits on flow control),
    the frames are built by its sans-I/O protocol object and written in one go, instead of
    one ``send`` (one write, one wakeup) per frame.
    """
    async with ws.send_context():
        protocol = ws.protocol
        for frame in frames:
            if isinstance(frame, SendText):
                protocol.send_text(frame.data)
            else:
                protocol.send_binary(frame.data)
        ws.transport.write(b"".join(protocol.data_to_send()))
