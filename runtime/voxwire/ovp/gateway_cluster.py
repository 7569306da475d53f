"""The OVP gateway among several processes (:mod:`voxwire.cluster`): :class:`GatewayCluster`.

A :class:`~voxwire.ovp.gateway.Gateway` given a directory records each session it holds as its
own, and hears of every session started on any process (:meth:`Directory.watch`). A connection
for a session it does not hold is a new session, started at once with no round trip to Redis,
unless the directory has seen that session start: then it can only be a resume, told by the
client's first message, and only then is the directory asked who holds it. The owner gets the
connection relayed, ``session.resume`` first. With no live owner (it drained, or died), a
gateway given a store and an ``on_takeover`` hook takes the session over from the store: its
resume state and the events the resume needs; without them the resume is refused
(``OVP_RESUME_EXPIRED``). A resume that can be neither relayed nor taken over starts nothing
here: no handler, no claim, no ``session.start``. Every wait on Redis in a resume is bounded by
:data:`~voxwire.cluster.directory.LOOKUP_BUDGET_S`.

With a store, every event a session sends is saved as it goes, batched per session (one call
per batch, the resume state with it), so a session survives its process dying with at most what
was sent since the last batch; a drain saves each session exactly (:meth:`GatewayCluster.hand_over`)
and closes its link with 1012, so the client resumes at once, elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

import msgspec
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voxwire.clock import Clock
from voxwire.cluster import Directory, ReplayStore, StoreUnavailable, other_owner
from voxwire.cluster.directory import LOOKUP_BUDGET_S
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
from voxwire.ovp.gateway_core import refuse_token
from voxwire.ovp.gateway_session import GatewaySession
from voxwire.ovp.gateway_state import TakenOver, decode_state, encode_state, movable, snapshot
from voxwire.ovp.gateway_tokens import TokenClaims
from voxwire.sansio import Action, Close, SendText

__all__ = ["CLUSTER_KEY", "GatewayCluster", "TakenOver", "refuse_resume"]

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
    """One gateway's side of the shared directory and store (the gateway's settings it needs).

    ``takes_over``: the gateway has an ``on_takeover`` hook (without one, a session whose
    owner is gone is refused, never started here).
    """

    def __init__(
        self,
        directory: Directory,
        store: ReplayStore | None,
        *,
        clock: Clock,
        keepalive: float,
        write_timeout: float,
        takes_over: bool,
        metrics: Metrics,
    ) -> None:
        self.directory = directory
        self.store = store
        self._metrics = metrics
        self._clock = clock
        self._keepalive = keepalive
        self._write_timeout = write_timeout
        self._takes_over = takes_over and store is not None
        self._owning: set[asyncio.Task[None]] = set()
        self._dirty: dict[str, GatewaySession] = {}
        self._wake = asyncio.Event()
        self._saving = asyncio.Lock()
        self._saver: asyncio.Task[None] | None = None
        directory.watch(CLUSTER_KEY)

    async def close(self) -> None:
        """Stop saving (the gateway closes)."""
        saver, self._saver = self._saver, None
        if saver is not None:
            saver.cancel()
            await asyncio.gather(saver, return_exceptions=True)

    # -- saving ---------------------------------------------------------------------------------

    def persist(self, session: GatewaySession) -> None:
        """``session`` sent events the store does not hold yet: save them soon, in a batch."""
        self._dirty[session.session_id] = session
        self._wake.set()
        if self._saver is None:
            self._saver = asyncio.create_task(self._save_dirty(), name="ovp-saver")

    async def _save_dirty(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                session_id = next(iter(self._dirty))
                session = self._dirty.pop(session_id)
                try:
                    await self.save(session)
                except (StoreUnavailable, ValueError) as exc:
                    log.warning("session %s: not saved: %s", session_id, exc)

    async def save(self, session: GatewaySession, *, final: bool = False) -> None:
        """Save what ``session`` sent since its last save, and its resume state, in one call.
        Raises ``StoreUnavailable``."""
        assert self.store is not None
        async with self._saving:  # one save at a time: the seqs reach the store in order
            core, after = session.core, session.saved_seq
            events = core._stream.replay.take(after + 1, core.last_seq - after)
            state = None
            if movable(core):
                taken = snapshot(
                    core, session.claims, now=self._clock.now(), wall=time.time(), final=final
                )
                state = encode_state(taken)
            saved = [(after + 1 + i, data) for i, data in enumerate(events)]
            await self.store.extend(session.session_id, saved, state=state)
            session.saved_seq = after + len(events)

    # -- drain ----------------------------------------------------------------------------------

    async def hand_over(self, session: GatewaySession) -> bool:
        """Move ``session`` to the store for another process to take over: the application
        lets it go, its last events and exact state are saved, the ownership released, and
        its link closed with 1012 (the client resumes at once, and lands elsewhere). False,
        with the session left here, when there is no store, nothing to move, or the store
        fails within the lookup budget."""
        if self.store is None or not movable(session.core):
            return False
        await session.stop_application()
        self._dirty.pop(session.session_id, None)
        try:
            async with asyncio.timeout(LOOKUP_BUDGET_S):
                await self.save(session, final=True)
                await self.directory.release(CLUSTER_KEY, session.session_id)
        except (StoreUnavailable, TimeoutError, ValueError) as exc:
            log.warning("session %s: not handed over: %s", session.session_id, exc)
            return False
        session.hand_over(CloseCode.SERVICE_RESTART, "handed over: resume elsewhere")
        log.info(
            "session %s: handed over (saved through seq %d)", session.session_id, session.saved_seq
        )
        return True

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

    async def resume_elsewhere(
        self,
        ws: ServerConnection,
        claims: TokenClaims,
    ) -> TakenOver | None:
        """Serve a connection for a session started on another process: read the client's
        ``session.resume``, then relay the connection to the session's live owner, take the
        session over (returned: the gateway serves it), or refuse."""
        clock, session_id = self._clock, claims.session_id
        try:
            async with asyncio.timeout(clock.real_seconds(self._keepalive)):
                raw = await ws.recv()
        except (TimeoutError, ConnectionClosed):
            return None
        read_one = getattr(ws, "read_one", None)
        if read_one is not None:
            read_one()  # the message the GatewayConnection counted in its queue is taken
        resume = _resume_of(raw, session_id)
        if resume is None:
            await self._refuse(ws, session_id, None, "expected session.resume: it started earlier")
            return None
        assert isinstance(raw, str)
        owner = await other_owner(self.directory, CLUSTER_KEY, session_id)
        if owner is not None:
            assert ws.request is not None
            try:
                # The token form: the relay is a voxwire client, and the owner answers it alike.
                upstream = await open_relay(
                    owner,
                    ws.request.path,
                    subprotocol=SUBPROTOCOL_ALIAS,
                    max_size=MAX_RECEIVE_BYTES,
                )
            except RelayFailed as exc:
                log.warning(
                    "session %s: held by %s, which cannot be reached: %s",
                    session_id,
                    owner.process_id,
                    exc,
                )
            else:
                log.info(
                    "session %s: held by %s; relaying the connection", session_id, owner.process_id
                )
                with self._metrics.relaying(session_id):
                    keepalive = self._relay_keepalive()
                    await carry(ws, upstream, owner, first=[raw], keepalive=keepalive, clock=clock)
                return None
        return await self._take_over(ws, claims, resume, raw, unreachable=owner is not None)

    def _relay_keepalive(self) -> Keepalive:
        """The gateway's own rule (voxwire.ovp._transport.open_link): silent for `keepalive`
        seconds is dropped, pinged as the spec's interval is to its silence timeout."""
        return Keepalive(
            ping_interval=self._keepalive * PING_INTERVAL_MS / SILENCE_TIMEOUT_MS,
            silence_timeout=self._keepalive,
            now=self._clock.now(),
        )

    async def _take_over(
        self,
        ws: ServerConnection,
        claims: TokenClaims,
        resume: SessionResume,
        raw: str,
        *,
        unreachable: bool,
    ) -> TakenOver | None:
        """The session's state and the events its resume needs, from the store, and the
        ownership, within the lookup budget; else the resume is refused."""
        session_id, last = claims.session_id, resume.last_server_seq
        nobody = (
            "the gateway that holds the session cannot be reached"
            if unreachable
            else "no live gateway holds the session"
        )
        if not self._takes_over or self.store is None:
            await self._refuse(ws, session_id, last, nobody)
            return None
        store = self.store
        try:
            async with asyncio.timeout(LOOKUP_BUDGET_S):
                data = await store.load_state(session_id)
                state = None if data is None else decode_state(data)
                replay = None if state is None else await store.read_after(session_id, last)
                if state is not None and replay is not None and state.tenant_id == claims.tenant_id:
                    await self.directory.claim(CLUSTER_KEY, session_id, _OWNERSHIP_S)
        except (StoreUnavailable, TimeoutError, msgspec.ValidationError) as exc:
            log.warning("session %s: cannot be taken over: %s", session_id, exc)
            await self._refuse(ws, session_id, last, f"{nobody}, and the store did not answer")
            return None
        if state is None:
            await self._refuse(ws, session_id, last, nobody)
            return None
        if state.tenant_id != claims.tenant_id:
            now = self._clock.now()
            actions = refuse_token(
                session_id, "token is for another tenant", epoch=time.time() - now, now=now
            )
            await self._answer(ws, session_id, actions)
            return None
        if replay is None:
            await self._refuse(
                ws, session_id, last, f"the events after seq {last} are no longer all held"
            )
            return None
        log.info(
            "session %s: taken over (%d events to replay, state %s)",
            session_id,
            len(replay.events),
            "exact" if state.final else f"{time.time() - state.saved_at:.3f} s old",
        )
        return TakenOver(state, replay.events, last, raw)

    async def _refuse(
        self, ws: ServerConnection, session_id: str, last_seq: int | None, detail: str
    ) -> None:
        log.info("session %s: resume refused: %s", session_id, detail)
        self._metrics.refused(ErrorCode.OVP_RESUME_EXPIRED)
        now = self._clock.now()
        actions = refuse_resume(session_id, last_seq, detail, epoch=time.time() - now, now=now)
        await self._answer(ws, session_id, actions)

    async def _answer(self, ws: ServerConnection, session_id: str, actions: list[Action]) -> None:
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
