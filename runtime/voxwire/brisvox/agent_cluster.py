"""The agent server among several processes (:mod:`voxwire.cluster`): :class:`AgentCluster`.

An :class:`~voxwire.brisvox.agent.AgentServer` given a directory records the calls it parks as
its own, and relays a resumption of a call parked on another live process there,
``session.start`` first. Everything the server asks of the directory goes through here.
"""

from __future__ import annotations

import logging
from typing import Final

from voxwire.brisvox.agent_session import AgentLink
from voxwire.brisvox.constants import MAX_MESSAGE_BYTES
from voxwire.clock import Clock
from voxwire.cluster import Directory, StoreUnavailable, other_owner
from voxwire.cluster.directory import LOOKUP_BUDGET_S
from voxwire.cluster.relay import RelayFailed, carry, open_relay
from voxwire.observe.metrics import Metrics

__all__ = ["CLUSTER_KEY", "AgentCluster"]

log = logging.getLogger("voxwire.brisvox.agent")

CLUSTER_KEY: Final = "brisvox"
"""The protocol's name in the owner directory (voxwire.cluster), beside OVP's."""
_ANSWER_S: Final = 0.2
"""Real seconds of the handshake budget kept for writing the answer after a lookup."""


class AgentCluster:
    """One agent server's side of the shared directory.

    Args:
        directory: The owner directory the processes share.
        clock: The server's clock (the relay's keepalive runs on it).
        bearer: Whether the server checks a bearer token (the relay then passes the
            engine's ``Authorization`` on to the owner, which checks it again).
        metrics: The server's metrics (relays are counted there).
    """

    def __init__(
        self, directory: Directory, *, clock: Clock, bearer: bool, metrics: Metrics
    ) -> None:
        self.directory = directory
        self._clock = clock
        self._bearer = bearer
        self._metrics = metrics

    async def own(self, session_id: str, window: float | None) -> None:
        """Record this process as the call's owner for ``window`` seconds (None: forget)."""
        try:
            if window is None:
                await self.directory.release(CLUSTER_KEY, session_id)
            else:
                await self.directory.claim(CLUSTER_KEY, session_id, window)
        except StoreUnavailable as exc:
            # Not recorded: a resumption landing elsewhere is refused (unknown_session), as
            # with one process; one landing here still finds the call.
            log.warning("session %s: the owner directory was not updated: %s", session_id, exc)

    async def relayed(
        self, link: AgentLink, session_id: str, raw: str | bytes, *, within: float | None
    ) -> bool:
        """Relay a resumption of a call parked on another live process; False if there is none,
        or if the directory does not answer in time: ``within`` real seconds, the handshake's
        budget left (the answer must still meet it), :data:`LOOKUP_BUDGET_S` at most."""
        budget = LOOKUP_BUDGET_S if within is None else min(LOOKUP_BUDGET_S, within - _ANSWER_S)
        owner = await other_owner(self.directory, CLUSTER_KEY, session_id, budget=max(0, budget))
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
                "session %s: parked on %s, which cannot be reached: %s",
                session_id,
                owner.process_id,
                exc,
            )
            return False
        log.info("session %s: parked on %s; relaying the resumption", session_id, owner.process_id)
        await link.out.stop()  # the owner's link speaks on this connection now
        keep = link.out.keepalive  # the link's own policy, for both sides of the relay
        with self._metrics.relaying(session_id):
            await carry(link.ws, upstream, owner, first=[raw], keepalive=keep, clock=self._clock)
        return True
