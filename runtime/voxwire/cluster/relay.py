"""The relay: a link that reached the wrong process, carried to the process that owns it.

A resume can land on any process behind a load balancer. The process it reached looks the
session's owner up (:mod:`voxwire.cluster.directory`) and, when that is another live process,
:func:`relay` opens a WebSocket to the owner on the same path, query and subprotocol (so the owner
checks the same token), sends what was already read from the link (Brisvox: its
``session.start``), and then copies every message both ways, text as text and binary as
binary, in order, until one side closes. The owner sees an ordinary resume.

- A close from either side is passed on with its code and reason.
- A side that drops without a close (a crash, a reset) is dropped on the other side too: the
  client sees its link drop, as it would have at the owner, and may resume again.
- An owner that cannot be reached within ``open_timeout`` raises :class:`RelayFailed` before
  anything was sent to the client: the caller refuses the resume as if no owner existed.
- Pings do not cross a relay (each hop answers its own), so the relay pings both sides itself,
  each side under its own copy of the link's keepalive policy (:class:`voxwire.link.Keepalive`:
  the protocol's ping interval and silence timeout, on the role's clock): a side whose pongs
  stopped for the silence timeout is dropped, and the other with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import assert_never

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.frames import CloseCode
from websockets.protocol import State

from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster.directory import Owner
from voxwire.errors import VoxwireError
from voxwire.hosts import redact_url
from voxwire.link.keepalive import Keepalive, KeepaliveAction

__all__ = ["RelayFailed", "RelayResult", "carry", "open_relay", "relay"]

_log = logging.getLogger(__name__)


class RelayFailed(VoxwireError, ConnectionError):
    """The owner could not be reached, or refused the upgrade; nothing was relayed."""


@dataclass(frozen=True)
class RelayResult:
    """How a relayed link ended: messages carried each way, and who closed first."""

    to_owner: int
    from_owner: int
    closed_by: str
    """``"client"``, ``"owner"``, or ``"drop"`` when a side went away without a close."""


async def relay(
    link: Connection,
    owner: Owner,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    first: Iterable[str | bytes] = (),
    open_timeout: float = 2.0,
    max_size: int | None = None,
    keepalive: Keepalive | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RelayResult:
    """Carry ``link`` (already accepted here) to ``owner``, which serves the same ``path``
    (path and query of the original request); return when the relayed link ends.

    ``headers`` are sent on the upgrade to the owner (the Brisvox ``Authorization``); the
    subprotocol is the one ``link`` negotiated. Raises :class:`RelayFailed` when the owner cannot
    be reached or refuses: :func:`open_relay`, then :func:`carry`.
    """
    upstream = await open_relay(
        owner,
        path,
        subprotocol=link.subprotocol,
        headers=headers,
        open_timeout=open_timeout,
        max_size=max_size,
    )
    return await carry(link, upstream, owner, first=first, keepalive=keepalive, clock=clock)


async def open_relay(
    owner: Owner,
    path: str,
    *,
    subprotocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    open_timeout: float = 2.0,
    max_size: int | None = None,
) -> ClientConnection:
    """The owner's side of a relay: a WebSocket to ``owner`` on ``path``, or
    :class:`RelayFailed` within ``open_timeout``. Nothing has been carried yet, so a caller
    that gets RelayFailed can still answer the link itself (refuse the resume).

    ``max_size``: the largest message the owner may send, the protocol's own bound (the one
    the role's server reads with); ``None`` for no bound.
    """
    url = f"ws://{_host(owner.host)}:{owner.port}{path}"
    try:
        return await connect(
            url,
            subprotocols=[subprotocol] if subprotocol else None,  # type: ignore[list-item]
            additional_headers=dict(headers or {}),
            open_timeout=open_timeout,
            compression=None,
            max_size=max_size,
            ping_interval=None,
            proxy=None,  # a relay on a private network never goes through a proxy
        )
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        why = f"HTTP {exc.response.status_code}" if isinstance(exc, InvalidStatus) else str(exc)
        raise RelayFailed(f"the owner {owner.process_id} at {redact_url(url)}: {why}") from exc


async def carry(
    link: Connection,
    upstream: ClientConnection,
    owner: Owner,
    *,
    first: Iterable[str | bytes] = (),
    keepalive: Keepalive | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> RelayResult:
    """Send ``first`` to the owner, then copy both ways until one side ends (see the module).

    Neither end pings through a relay (each hop answers pings by itself), so a relay without
    ``keepalive`` would never notice a side that went silent: give it the protocol's policy
    (each side runs a copy of it, from its ping interval and silence timeout, on ``clock``).
    """
    async with upstream:
        for message in first:
            await upstream.send(message)
        return await _pump(link, upstream, owner, keepalive, clock)


async def _pump(
    link: Connection,
    upstream: ClientConnection,
    owner: Owner,
    keepalive: Keepalive | None,
    clock: Clock,
) -> RelayResult:
    counts = {"to_owner": 0, "from_owner": 0}

    async def copy(source: Connection, target: Connection, count: str) -> None:
        async for message in source:
            await target.send(message)
            counts[count] += 1

    async def watch(side: Connection) -> None:
        assert keepalive is not None
        policy = Keepalive(
            ping_interval=keepalive.ping_interval,
            silence_timeout=keepalive.silence_timeout,
            now=clock.now(),
        )

        def pong(waiter: asyncio.Future[float]) -> None:
            if not waiter.cancelled() and waiter.exception() is None:
                policy.heard(clock.now())

        while True:
            await clock.sleep(policy.next_deadline() - clock.now())
            match policy.tick(clock.now()):
                case KeepaliveAction.PING:
                    asyncio.ensure_future(await side.ping()).add_done_callback(pong)
                case KeepaliveAction.DOWN:
                    _log.info(
                        "relay to %s: no pong in %g s; dropping",
                        owner.process_id,
                        policy.silence_timeout,
                    )
                    return
                case KeepaliveAction.NOTHING:
                    pass
                case action:
                    assert_never(action)

    to_owner = asyncio.create_task(copy(link, upstream, "to_owner"))
    from_owner = asyncio.create_task(copy(upstream, link, "from_owner"))
    tasks = {to_owner, from_owner}
    if keepalive is not None:
        tasks |= {asyncio.create_task(watch(link)), asyncio.create_task(watch(upstream))}
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        # A copy that wrote to a side that had gone ends with ConnectionClosed: an ordinary
        # drop, retrieved here (never asyncio's "Task exception was never retrieved" at ERROR).
        error = task.exception()
        if error is not None and not isinstance(error, ConnectionClosed):
            raise error
        if error is not None:
            _log.debug("relay to %s: %s", owner.process_id, error)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
            await task
    if to_owner not in done and from_owner not in done:  # a side went silent
        link.transport.abort()
        upstream.transport.abort()
        closed_by = "drop"
    else:
        # The side that went away: a copy ends when its source closes, or when a write to its
        # target finds the target gone, so the copy's name alone does not say which.
        client_gone = link.protocol.state is not State.OPEN
        closed_by = "client" if client_gone or upstream.protocol.state is State.OPEN else "owner"
        source, target = (link, upstream) if closed_by == "client" else (upstream, link)
        # The close that ended the source: the one it sent, else the one this relay sent it
        # (a message over max_size is a 1009 the other side must hear, not a drop).
        received = source.protocol.close_rcvd or source.protocol.close_sent
        if received is None:
            # The side went away without a close frame: drop the other side too, so the client
            # sees its link drop (and may resume) instead of a close that would end the session.
            target.transport.abort()
            closed_by = "drop"
        else:
            with contextlib.suppress(ConnectionClosed):
                await target.close(received.code or CloseCode.NORMAL_CLOSURE, received.reason)
    _log.info(
        "relay to %s ended (%s): %d messages to it, %d from it",
        owner.process_id,
        closed_by,
        counts["to_owner"],
        counts["from_owner"],
    )
    return RelayResult(counts["to_owner"], counts["from_owner"], closed_by)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
