"""The OVP gateway among several processes (:mod:`voxwire.cluster`): :class:`GatewayCluster`.

A :class:`~voxwire.ovp.gateway.Gateway` given a directory records each session it holds as its
own, and hears of every session started on any process (:meth:`Directory.watch`). A connection
for a session it does not hold is a new session, started at once with no round trip to Redis,
unless the directory has seen that session start: then it can only be a resume, told by the
client's first message, and only then is the directory asked who holds it. The owner gets the
connection relayed, ``session.resume`` first; with no live owner the resume is refused
(``OVP_RESUME_EXPIRED``). A resume that cannot be relayed starts nothing here: no handler, no
claim, no ``session.start``. Every wait on Redis in a resume is bounded by
:data:`~voxwire.cluster.directory.LOOKUP_BUDGET_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voxwire.clock import Clock
from voxwire.cluster import Directory, StoreUnavailable, other_owner
from voxwire.cluster.relay import RelayFailed, carry, open_relay
from voxwire.link import Keepalive
from voxwire.observe.metrics import Metrics
from voxwire.ovp import (
    MAX_RECEIVE_BYTES,
    MAX_SEQ,
    PING_INTERVAL_MS,
    SILENCE_TIMEOUT_MS,
    SUBPROTOCOL_ALIAS,
    CloseCode,
    ErrorCode,
    ErrorEvent,
    ProtocolError,
    SessionResume,
    decode,
    encode,
)
from voxwire.ovp._session import timestamp
from voxwire.ovp._transport import refuse
from voxwire.sansio import Action, Close, SendText

__all__ = ["CLUSTER_KEY", "GatewayCluster", "refuse_resume"]

log = logging.getLogger("voxwire.ovp.gateway")

CLUSTER_KEY: Final = "ovp"
"""The protocol's name in the owner directory (voxwire.cluster), beside Brisvox's."""
_OWNERSHIP_S: Final = 24 * 3600.0
"""How long an owner entry lives unrefreshed. Liveness is the owner process's heartbeat, so a
dead process's entries are no owner at once; this only bounds what a crash leaves in Redis."""


def refuse_resume(
    session_id: str, last_seq: int | None, detail: str, *, epoch: float, now: float
) -> list[Action]:
    """What a resume no process can serve gets (sans-I/O): ``error`` ``OVP_RESUME_EXPIRED``
    (outside the stream: decision refusal-outside-the-stream), then close 1008."""
    error = ErrorEvent(
        seq=min(MAX_SEQ, (-1 if last_seq is None else last_seq) + 1),
        ts=timestamp(epoch + now),
        session_id=session_id,
        code=ErrorCode.OVP_RESUME_EXPIRED,
        message=f"resume refused: {detail}",
        recoverable=False,
    )
    return [SendText(encode(error)), Close(CloseCode.POLICY, "resume refused")]


class GatewayCluster:
    """One gateway's side of the shared directory (the gateway's settings it needs)."""

    def __init__(
        self,
        directory: Directory,
        *,
        clock: Clock,
        keepalive: float,
        write_timeout: float,
        metrics: Metrics,
    ) -> None:
        self.directory = directory
        self._metrics = metrics
        self._clock = clock
        self._keepalive = keepalive
        self._write_timeout = write_timeout
        self._owning: set[asyncio.Task[None]] = set()
        directory.watch(CLUSTER_KEY)

    def own(self, session_id: str, *, owned: bool) -> None:
        """Record (or forget) this gateway as the owner of ``session_id``, in a task."""
        directory = self.directory

        async def update() -> None:
            try:
                if owned:
                    await directory.claim(CLUSTER_KEY, session_id, _OWNERSHIP_S)
                else:
                    await directory.release(CLUSTER_KEY, session_id)
            except StoreUnavailable as exc:
                # Not recorded: a resume landing on another process is refused there
                # (OVP_RESUME_EXPIRED), as with one process; one landing here still works.
                log.warning("session %s: the owner directory was not updated: %s", session_id, exc)

        task = asyncio.create_task(update(), name=f"ovp-own-{session_id}")
        self._owning.add(task)
        task.add_done_callback(self._owning.discard)

    def started_elsewhere(self, session_id: str) -> bool:
        """Whether a connection for ``session_id``, which this gateway does not hold, can only
        be a resume (the session started on some process): no round trip."""
        return self.directory.seen(CLUSTER_KEY, session_id)

    async def resume_elsewhere(self, ws: ServerConnection, session_id: str) -> None:
        """Serve a connection for a session started on another process: read the client's
        ``session.resume``, then relay the connection to the session's live owner, or refuse."""
        clock = self._clock
        try:
            async with asyncio.timeout(clock.real_seconds(self._keepalive)):
                raw = await ws.recv()
        except (TimeoutError, ConnectionClosed):
            return
        read_one = getattr(ws, "read_one", None)
        if read_one is not None:
            read_one()  # the message the GatewayConnection counted in its queue is taken
        resume = _resume_of(raw, session_id)
        if resume is None:
            await self._refuse(ws, session_id, None, "expected session.resume: it started earlier")
            return
        owner = await other_owner(self.directory, CLUSTER_KEY, session_id)
        if owner is None:
            detail = "no live gateway holds the session"
            await self._refuse(ws, session_id, resume.last_server_seq, detail)
            return
        assert ws.request is not None
        try:
            # The token form: the relay is a voxwire client, and the owner answers it alike.
            upstream = await open_relay(
                owner, ws.request.path, subprotocol=SUBPROTOCOL_ALIAS, max_size=MAX_RECEIVE_BYTES
            )
        except RelayFailed as exc:
            log.warning(
                "session %s: held by %s, which cannot be reached: %s",
                session_id,
                owner.process_id,
                exc,
            )
            detail = f"the gateway that holds the session cannot be reached ({owner.process_id})"
            await self._refuse(ws, session_id, resume.last_server_seq, detail)
            return
        log.info("session %s: held by %s; relaying the connection", session_id, owner.process_id)
        # The gateway's own rule (voxwire.ovp._transport.open_link): silent for `keepalive`
        # seconds is dropped, pinged as the spec's interval is to its silence timeout.
        keepalive = Keepalive(
            ping_interval=self._keepalive * PING_INTERVAL_MS / SILENCE_TIMEOUT_MS,
            silence_timeout=self._keepalive,
            now=clock.now(),
        )
        with self._metrics.relaying(session_id):
            await carry(ws, upstream, owner, first=[raw], keepalive=keepalive, clock=clock)

    async def _refuse(
        self, ws: ServerConnection, session_id: str, last_seq: int | None, detail: str
    ) -> None:
        log.info("session %s: resume refused: %s", session_id, detail)
        self._metrics.refused(ErrorCode.OVP_RESUME_EXPIRED)
        now = self._clock.now()
        actions = refuse_resume(session_id, last_seq, detail, epoch=time.time() - now, now=now)
        await refuse(
            ws,
            self._clock,
            actions,
            write_timeout=self._write_timeout,
            keepalive=self._keepalive,
            name=f"OVP session {session_id} refusal",
        )


def _resume_of(raw: str | bytes, session_id: str) -> SessionResume | None:
    """``raw`` as the ``session.resume`` of ``session_id``, or None."""
    if isinstance(raw, bytes):
        return None
    try:
        message = decode(raw, sender="client")
    except ProtocolError:
        return None
    if isinstance(message, SessionResume) and message.session_id == session_id:
        return message
    return None
