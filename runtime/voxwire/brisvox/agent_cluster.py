"""The agent server among several processes (:mod:`voxwire.cluster`): :class:`AgentCluster`.

An :class:`~voxwire.brisvox.agent.AgentServer` given a directory records each call it holds as
its own (a lease its heartbeat renews, from the accept to the call's end), and relays a
resumption of a call another live process holds there, ``session.start`` first: the owner takes
the call up, also over a half-open link it still has. With a store, each call's resume state
(:class:`~voxwire.brisvox.agent_session.CallState`) is saved as it changes, so a process that
receives the resumption of a call whose owner drained or died takes the call over through the
application's ``on_takeover`` hook; without the hook the resumption is rejected
(``unknown_session``), never started. Every wait on Redis in a resumption fits in what is left of
the handshake's budget. Everything the server asks of the directory and the store goes through
here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

import msgspec

from voxwire.brisvox._agent_transport import refuse
from voxwire.brisvox.agent_session import AgentLink, AgentSession, CallHost, CallState
from voxwire.brisvox.constants import MAX_MESSAGE_BYTES, CloseCode
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import SessionAccept, SessionStart
from voxwire.clock import Clock
from voxwire.cluster import Directory, ReplayStore, StoreUnavailable, other_owner
from voxwire.cluster.directory import LOOKUP_BUDGET_S
from voxwire.cluster.relay import RelayFailed, carry, open_relay
from voxwire.errors import SessionClosed
from voxwire.observe.metrics import Metrics

__all__ = ["CLUSTER_KEY", "AgentCluster"]

log = logging.getLogger("voxwire.brisvox.agent")

CLUSTER_KEY: Final = "brisvox"
"""The protocol's name in the owner directory (voxwire.cluster), beside OVP's."""
_ANSWER_S: Final = 0.2
"""Real seconds of the handshake budget kept for writing the answer after a lookup."""
_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder(CallState)


class AgentCluster:
    """One agent server's side of the shared directory and store.

    Args:
        directory: The owner directory the processes share.
        store: Where each call's resume state is kept for another process (or None).
        clock: The server's clock (the relay's keepalive runs on it).
        bearer: Whether the server checks a bearer token (the relay then passes the
            engine's ``Authorization`` on to the owner, which checks it again).
        takes_over: The server has an ``on_takeover`` hook.
        metrics: The server's metrics (relays are counted there).
    """

    def __init__(
        self,
        directory: Directory,
        store: ReplayStore | None,
        *,
        clock: Clock,
        bearer: bool,
        takes_over: bool,
        metrics: Metrics,
    ) -> None:
        self.directory = directory
        self.store = store
        self._clock = clock
        self._bearer = bearer
        self._metrics = metrics
        self._takes_over = takes_over and store is not None
        self._dirty: dict[str, AgentSession] = {}
        self._wake = asyncio.Event()
        self._saving = asyncio.Lock()
        self._saver: asyncio.Task[None] | None = None

    async def close(self) -> None:
        """Stop saving (the server closes)."""
        saver, self._saver = self._saver, None
        if saver is not None:
            saver.cancel()
            await asyncio.gather(saver, return_exceptions=True)

    async def own(self, session_id: str, owned: bool) -> None:
        """Record this process as the call's owner from now on (or forget it)."""
        try:
            if owned:
                await self.directory.claim(CLUSTER_KEY, session_id)
            else:
                await self.directory.release(CLUSTER_KEY, session_id)
        except StoreUnavailable as exc:
            # Not recorded: a resumption landing elsewhere is refused (unknown_session), as
            # with one process; one landing here still finds the call.
            log.warning("session %s: the owner directory was not updated: %s", session_id, exc)

    # -- saving ---------------------------------------------------------------------------------

    def changed(self, session: AgentSession) -> None:
        """``session``'s resume state changed: save it soon (with a store)."""
        if self.store is None:
            return
        self._dirty[session.id] = session
        self._wake.set()
        if self._saver is None:
            self._saver = asyncio.create_task(self._save_dirty(), name="brisvox-saver")

    async def _save_dirty(self) -> None:
        assert self.store is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._dirty:
                session_id = next(iter(self._dirty))
                session = self._dirty.pop(session_id)
                try:
                    await self._save(session)
                except StoreUnavailable as exc:
                    log.warning("session %s: not saved: %s", session_id, exc)

    async def _save(self, session: AgentSession) -> None:
        """Save ``session``'s state as it is now; one save at a time, so the last taken is the
        last written."""
        assert self.store is not None
        async with self._saving:
            await self.store.save_state(session.id, _ENCODER.encode(session.state()))

    async def hand_over_all(self, sessions: list[AgentSession]) -> list[AgentSession]:
        """:meth:`hand_over` each of ``sessions`` at once; the ones that were."""
        if self.store is None:
            return []
        moved = await asyncio.gather(*(self.hand_over(session) for session in sessions))
        return [session for session, done in zip(sessions, moved, strict=True) if done]

    async def hand_over(self, session: AgentSession) -> bool:
        """Move ``session`` to the store for another process to take over: its state saved,
        the ownership released, then its link closed with 1012 (the engine reconnects, and
        lands elsewhere). False, with the call left here, without a store or when the store
        fails within the lookup budget."""
        if self.store is None or session.ended:
            return False
        self._dirty.pop(session.id, None)
        try:
            async with asyncio.timeout(LOOKUP_BUDGET_S):
                await self._save(session)
                await self.directory.release(CLUSTER_KEY, session.id)
        except (StoreUnavailable, TimeoutError) as exc:
            log.warning("session %s: not handed over: %s", session.id, exc)
            return False
        session.hand_over(CloseCode.SERVICE_RESTART, "handed over: resume elsewhere")
        log.info("session %s: handed over", session.id)
        return True

    # -- a resumption of a call this process does not hold -------------------------------------

    async def resume_elsewhere(
        self,
        link: AgentLink,
        start: SessionStart,
        version: int,
        raw: str | bytes,
        *,
        host: CallHost | None,
    ) -> AgentSession | None:
        """A resumption of a call this process does not hold: relayed to the process that
        holds it, taken over from the store (returned, accepted on ``link``: ``host`` is what it
        needs of the server; None: take nothing over), or rejected ``unknown_session``; every
        wait on Redis within the handshake's budget."""
        core, session_id = link.core, start.session_id

        def within() -> float | None:
            deadline = core.next_deadline()
            if deadline is None:
                return None
            return self._clock.real_seconds(max(0.0, deadline - self._clock.now()))

        if await self.relayed(link, session_id, raw, within=within()):
            return None
        state = None if host is None else await self.take_over(session_id, within=within())
        if state is None or host is None:
            log.warning("session %s: resumption of a call no live agent holds", session_id)
            await refuse(link, self._metrics, ErrorCode.UNKNOWN_SESSION, "no such call")
            return None
        accept = SessionAccept(version=version, tools=[], events=state.accept.events, resume=True)
        try:
            await link.perform(core.accept(accept, self._clock.now()))
        except SessionClosed as exc:
            log.warning("session %s: the takeover's accept was not written: %s", session_id, exc)
            await self.own(session_id, False)
            return None
        return AgentSession.taken_over(host, state, link, start, version, accept)

    async def relayed(
        self, link: AgentLink, session_id: str, raw: str | bytes, *, within: float | None
    ) -> bool:
        """Relay a resumption of a call another live process holds; False if there is none, it
        cannot be reached, or the directory does not answer in time: ``within`` real seconds,
        the handshake's budget left (the answer must still meet it), the lookup budget at
        most."""
        owner = await other_owner(self.directory, CLUSTER_KEY, session_id, budget=_budget(within))
        if owner is None:
            return False
        request = link.ws.request
        assert request is not None
        headers = {"Authorization": request.headers["Authorization"]} if self._bearer else {}
        try:
            upstream = await open_relay(
                owner, request.path, headers=headers, max_size=MAX_MESSAGE_BYTES
            )
        except RelayFailed as exc:
            log.warning(
                "session %s: held by %s, which cannot be reached: %s",
                session_id,
                owner.process_id,
                exc,
            )
            return False
        log.info("session %s: held by %s; relaying the resumption", session_id, owner.process_id)
        await link.out.stop()  # the owner's link speaks on this connection now
        keep = link.out.keepalive  # the link's own policy, for both sides of the relay
        with self._metrics.relaying(session_id):
            await carry(link.ws, upstream, owner, first=[raw], keepalive=keep, clock=self._clock)
        return True

    async def take_over(self, session_id: str, *, within: float | None) -> CallState | None:
        """The state of a call no live process holds, claimed by this process, within
        ``within`` real seconds (the lookup budget at most); None when this server takes no
        call over, the store holds no state of it, or the store does not answer in time."""
        if not self._takes_over or self.store is None:
            return None
        try:
            async with asyncio.timeout(_budget(within)):
                data = await self.store.load_state(session_id)
                if data is None:
                    return None
                state = _DECODER.decode(data)
                await self.directory.claim(CLUSTER_KEY, session_id)
        except (StoreUnavailable, TimeoutError, msgspec.ValidationError) as exc:
            log.warning("session %s: cannot be taken over: %s", session_id, exc)
            return None
        log.info("session %s: taken over", session_id)
        return state


def _budget(within: float | None) -> float:
    """Real seconds a wait on Redis may take, out of ``within`` left for the answer."""
    return max(0.0, LOOKUP_BUDGET_S if within is None else min(LOOKUP_BUDGET_S, within - _ANSWER_S))
