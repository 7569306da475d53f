"""What the OVP client and gateway share on ``websockets``: the link each connection writes
through (the inbox to the application is the session layer's, :mod:`voxwire.session`).

Not public: :mod:`voxwire.ovp.client` and :mod:`voxwire.ovp.gateway` are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, assert_never

from websockets.asyncio.connection import Connection
from websockets.protocol import State

from voxwire.clock import Clock
from voxwire.link import Keepalive, Link, LinkDown, Outbound, Overflow, Put
from voxwire.observe.stats import SessionStats, wire_size
from voxwire.ovp import PING_INTERVAL_MS, SILENCE_TIMEOUT_MS, STREAM_WINDOW_EVENTS
from voxwire.ovp._session import AudioIn
from voxwire.ovp.client_core import ServerEvent
from voxwire.ovp.gateway_core import ClientEvent, Resumed
from voxwire.sansio import Action, Close, SendBinary, SendText

__all__ = ["count_read", "open_link", "perform", "refuse"]


def open_link(
    ws: Connection,
    clock: Clock,
    *,
    write_timeout: float,
    keepalive: float,
    name: str,
    record: Callable[[str | bytes], None] | None = None,
    on_drained: Callable[[int], None] | None = None,
    on_down: Callable[[LinkDown], None] | None = None,
    eager: bool = True,
) -> Link:
    """The link of one OVP connection: everything in the order it was queued (seq is stamped when
    a message is queued), written at once when it comes alone in its loop turn (``eager``: an
    audio frame waits for no turn's end; a role that flushes its link itself when its producer is
    done may pass False), events bounded with producer back-pressure, a drain
    bounded by ``write_timeout``, and down ``keepalive`` clock seconds after the last sign of
    life (pinged every ``keepalive * PING_INTERVAL_MS / SILENCE_TIMEOUT_MS``: decision
    keepalive-one-interval).
    """
    outbound = Outbound(
        event_bound=STREAM_WINDOW_EVENTS, overflow=Overflow.WAIT, control_first=False
    )
    return Link(
        ws,
        outbound,
        clock=clock,
        drain_timeout=write_timeout,
        close_timeout=write_timeout,
        keepalive=Keepalive(
            ping_interval=keepalive * PING_INTERVAL_MS / SILENCE_TIMEOUT_MS,
            silence_timeout=keepalive,
            now=clock.now(),
        ),
        on_drained=on_drained,
        on_down=on_down,
        record=record,
        name=name,
        eager=eager,
    )


def perform(link: Link, action: Action, *, event: bool = False) -> Put:
    """Hand one of a core's actions to ``link``: a close, an event (bounded: :data:`Put.FULL`
    when its queue has no room), or control (everything else, never dropped).

    A close the peer has already begun needs none of ours (``websockets`` answers it).
    """
    match action:
        case SendBinary() | SendText():  # audio first: a frame every 20 ms
            return link.event(action) if event else link.control(action)
        case Close(code=code, reason=reason):
            if link.ws.protocol.state is State.OPEN:
                link.close(code, reason)
            return Put.QUEUED
        case _:
            assert_never(action)


def count_read(
    stats: SessionStats, sender: str, out: Sequence[object], now: float, data: str | bytes
) -> None:
    """Count what a core read of one message of ``sender``'s: the frame, event or resume it
    accepted (the first output that carries one), or nothing read (refused or dropped)."""
    for item in out:
        field = _READ.get(type(item))
        if field is None:
            continue
        read = getattr(item, field)
        if field == "frame":
            stats.on_frame(sender, read, now)
            return
        if read is not None:
            stats.on_message(sender, read, now, size=wire_size(data))
            return
    stats.on_unreadable(sender, now, size=wire_size(data))


_READ: Final[dict[type, str]] = {
    AudioIn: "frame",
    ServerEvent: "message",
    ClientEvent: "message",
    Resumed: "message",
}
"""The outputs that carry what they were read from, and its field."""


async def refuse(
    ws: Connection,
    clock: Clock,
    actions: Sequence[Action],
    *,
    write_timeout: float,
    keepalive: float,
    name: str,
) -> None:
    """Answer a connection with a refusal (``actions``: an error, then a close) and wait until it
    is closed (the write timeout bounds it)."""
    link = open_link(ws, clock, write_timeout=write_timeout, keepalive=keepalive, name=name)
    for action in actions:
        perform(link, action)
    await link.wait_closed()
    await link.stop()
