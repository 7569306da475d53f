"""A fake OVP gateway for people who build an OVP client: :class:`FakeGateway`.

It is voxwire's own gateway (:class:`voxwire.ovp.gateway.Gateway`) on a loopback port, behind a
relay the fake can cut, playing one session at a time as the test scripts it: the client under
test connects with a token the fake mints, the fake sends ``session.start`` and hands the test
the real :class:`~voxwire.ovp.gateway.GatewaySession`, whose typed sends, ``fail`` (an ``error``
with the spec's code) and ``end`` (``session.end``) the test calls. The fake records everything
the client sends, taken or refused (with the OVP code), and can drop the link, wait for the
client's ``session.resume``, or restart so the resume is refused.

```text
async with FakeGateway() as gateway:
    client = asyncio.create_task(my_client(gateway.url, "ovps_1", gateway.token("ovps_1")))
    session = await gateway.connected()          # session.start sent
    session.send_transcript_final(utterance_id="u1", speaker=ovp.Speaker.CALLER, ...)
    said = await gateway.expect(ovp.AgentInput)  # the client's next event, of this type
    await gateway.drop()                         # the client's link is reset
    await gateway.resumed()                      # it came back with session.resume
    session.end(ovp.SessionEndReason.AGENT_ENDED)
    await client
assert gateway.refused == []
```

Events sent while the client is away are replayed when it resumes, as the real gateway does;
audio is not. :meth:`FakeGateway.token` with ``valid=False`` gets ``OVP_AUTH_FAILED``;
:meth:`FakeGateway.restart` makes the next resume fail with ``OVP_RESUME_EXPIRED``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from voxwire import ovp
from voxwire.capture import Recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token
from voxwire.testing._faultproxy import FaultProxy
from voxwire.testing.watch import ExpectationFailed, Watch, Watching

__all__ = ["DEFAULT_AGENT", "DEFAULT_CALL", "FakeGateway"]

T = TypeVar("T")

DEFAULT_CALL = ovp.CallInfo(
    call_id="call_test",
    from_="+14155550100",
    to="+18005550100",
    direction=ovp.CallDirection.INBOUND,
    secure=True,
)
"""The call a fake gateway's ``session.start`` carries unless told another."""

DEFAULT_AGENT = ovp.AgentConfig(
    agent_id="agt_test",
    name="Fake",
    instructions="The agent of a fake gateway.",
    model="fake",
    voice_id="fake",
    language="en-US",
    tools=[],
)
"""The agent a fake gateway's ``session.start`` carries unless told another."""


def _expectable(message: Any) -> bool:
    return not isinstance(message, ovp.SessionResume)  # resumed() waits for those


class FakeGateway(Watching):
    """An OVP gateway for tests of a client, one session at a time, on loopback.

    Args:
        call: The call ``session.start`` carries.
        agent: The agent ``session.start`` carries.
        start: Send ``session.start`` as soon as a session begins (``False``: the test calls
            ``session.start(call, agent)`` itself, or never).
        accept_patch: Judges each ``session.update`` patch, as ``Gateway``'s option (a string
            refuses it with ``OVP_SESSION_UPDATE_REJECTED``).
        secret: The HS256 secret tokens are signed with (a fresh random one by default).
        tenant_id: The tenant of the tokens :meth:`token` mints.
        clock: The clock of the gateway's timers (resume window, 5 s events).
        wait: Real seconds :meth:`expect`, :meth:`connected` and the other waits last by
            default (``voxwire.testing.watch.WAIT``).
        record: A recorder every message and link change is passed on to (a
            ``voxwire.capture.CaptureWriter``).
    """

    def __init__(
        self,
        *,
        call: ovp.CallInfo = DEFAULT_CALL,
        agent: ovp.AgentConfig = DEFAULT_AGENT,
        start: bool = True,
        accept_patch: Callable[[ovp.SessionPatch], str | None] | None = None,
        secret: str | None = None,
        tenant_id: str = "tenant_test",
        clock: Clock = SYSTEM_CLOCK,
        wait: float | None = None,
        record: Recorder | None = None,
    ) -> None:
        self.call = call
        self.agent = agent
        self.starts = start
        self.accept_patch = accept_patch
        self.secret = secret or secrets.token_urlsafe(32)
        self.tenant_id = tenant_id
        self.clock = clock
        self.wait = wait
        self.watch = Watch(
            "ovp",
            "gateway",
            fake="the fake gateway",
            peer="the client",
            expectable=_expectable,
            then=record,
            clock=clock,
        )
        self.sessions: list[GatewaySession] = []
        """Every session the client began, in order (the last one is :attr:`session`)."""
        self._handed = 0  # sessions connected() returned
        self._resumes = 0  # taken session.resume messages resumed() returned
        self._served: set[str] = set()
        self._gateway: Gateway | None = None
        self._relay: FaultProxy | None = None

    def __repr__(self) -> str:
        return f"FakeGateway({self.url if self._relay else 'not started'})"

    # -- where, and with what token -------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL the client under test connects to (``ws://127.0.0.1:PORT``)."""
        return f"ws://127.0.0.1:{self._started().port}"

    def token(self, session_id: str, *, valid: bool = True, **claims: Any) -> str:
        """A session token for ``session_id`` (``claims`` added to it); ``valid=False`` mints
        one signed with another secret, which the gateway refuses with ``OVP_AUTH_FAILED``."""
        secret = self.secret if valid else secrets.token_urlsafe(32)
        return mint_token(secret, session_id=session_id, tenant_id=self.tenant_id, **claims)

    # -- what the client sent -------------------------------------------------------------------

    @property
    def session(self) -> GatewaySession | None:
        """The session now (the last one the client began), or ``None`` before the first."""
        return self.sessions[-1] if self.sessions else None

    @property
    def frames(self) -> list[ovp.AudioFrame]:
        """Every audio frame of the client the gateway took, in order."""
        return self.watch.frames

    # -- the script -----------------------------------------------------------------------------

    async def connected(self, *, timeout: float | None = None) -> GatewaySession:
        """The next session the client begins (its ``session.start`` sent unless ``start`` is
        off), once it connected."""

        def begun() -> GatewaySession | None:
            return self.sessions[self._handed] if len(self.sessions) > self._handed else None

        session = await self.watch.until(
            begun, "the client did not connect", timeout=self._wait(timeout)
        )
        self._handed += 1
        return session

    async def expect(self, kind: type[T], *, timeout: float | None = None) -> T:
        """The client's next ``kind`` after the events already expected; the events of other
        types on the way are passed over (``session.resume`` is :meth:`resumed`'s). See
        :meth:`voxwire.testing.watch.Watch.expect`."""
        return await self.watch.expect(kind, timeout=self._wait(timeout))

    async def drop(self, *, timeout: float | None = None) -> None:
        """Reset the client's link, both ways, as a network failure does, and wait until the
        gateway noticed: what the session sends from now on waits for the client's resume."""
        relay, since = self._started(), len(self.watch.log)
        if relay.reset() == 0:
            raise ExpectationFailed("the fake gateway has no link to drop: the client is away")

        def noticed() -> bool:
            return any(e.what in ("link lost", "link closed") for e in self.watch.log[since:])

        await self.watch.until(
            noticed, "the gateway did not see the drop", timeout=self._wait(timeout)
        )

    async def resumed(self, *, timeout: float | None = None) -> ovp.SessionResume:
        """The client's next ``session.resume`` that the gateway took (what it missed is then
        replayed); raises :class:`ExpectationFailed` when the gateway refused it."""
        taken_before, since = self._resumes, len(self.watch.log)

        def resume() -> ovp.SessionResume | None:
            for entry in self.watch.log[since:]:
                if entry.refused is not None and entry.what.startswith(ovp.SessionResume.type):
                    raise ExpectationFailed(
                        "the fake gateway refused the client's session.resume: "
                        f"{entry.refused.error}"
                    )
            taken = [m for m in self.sent if isinstance(m, ovp.SessionResume)]
            return taken[taken_before] if len(taken) > taken_before else None

        message = await self.watch.until(
            resume, "no session.resume from the client", timeout=self._wait(timeout)
        )
        self._resumes += 1
        return message

    async def ended(self, *, timeout: float | None = None) -> None:
        """Wait until the session is over (``session.end`` sent, the resume window passed, a
        failure); ``session.over`` says how."""

        def over() -> bool:
            return self.session is not None and self.session.over is not None

        await self.watch.until(over, "the session did not end", timeout=self._wait(timeout))

    async def restart(self) -> None:
        """Restart the gateway: every link is reset and every session forgotten, so the
        client's resume is refused (``OVP_RESUME_EXPIRED``) at the same URL."""
        relay = self._started()
        relay.refuse = True  # nobody reaches the old gateway while it stops
        relay.reset()
        if self._gateway is not None:
            await self._gateway.close()
        self.watch.forget()
        self._gateway = await self._listen()
        relay.target_port = self._gateway.port
        relay.refuse = False

    # -- life -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on loopback (:attr:`url`)."""
        self._gateway = await self._listen()
        self._relay = FaultProxy(self._gateway.port)
        await self._relay.start()

    async def close(self) -> None:
        """Stop: the client's links are closed and every session ends."""
        if self._gateway is not None:
            await self._gateway.close()
        if self._relay is not None:
            await self._relay.close()

    async def __aenter__(self) -> FakeGateway:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _listen(self) -> Gateway:
        gateway = Gateway(
            self._serve,
            secret=self.secret,
            clock=self.clock,
            accept_patch=self.accept_patch,
            record=self.watch,
        )
        await gateway.start()
        return gateway

    async def _serve(self, session: GatewaySession) -> None:
        """One session: started as told, its inbox read to the end (the watch keeps it)."""
        if session.session_id in self._served:  # a resume after restart(): refused, not begun
            async for _ in session:
                pass
            return
        self._served.add(session.session_id)
        self.sessions.append(session)
        self.watch.notify()
        if self.starts:
            session.start(self.call, self.agent)
        async for _ in session:  # the handlers of session.on() run here
            pass

    def _started(self) -> FaultProxy:
        if self._relay is None:
            raise ExpectationFailed("the fake gateway is not started: use `async with`")
        return self._relay
