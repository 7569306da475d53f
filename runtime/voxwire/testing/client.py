"""A fake OVP client for people who build an OVP gateway: :class:`FakeOVPClient`.

It is voxwire's own client (:class:`voxwire.ovp.client.OVPClient`) connected to the gateway
under test through a loopback relay the fake can cut. The test sends with the real client's
typed API (``await fake.client.send_agent_input(...)``, ``fake.client.send_audio(pcm)``); the
fake reads everything the gateway sends, keeps what the client took and what it refused (with
the OVP code, as the client's core judged it), and can drop the link so the client resumes.

```text
async with FakeOVPClient(gateway.url, "ovps_1", token) as fake:    # connected, session.start in
    await fake.client.send_agent_input(source=ovp.InputSource.DEVELOPER_INJECT, text="Hi")
    reply = await fake.expect(ovp.AgentOutput)     # the gateway's next event, of this type
    await fake.drop()                              # the link is reset; the client resumes
    await fake.resumed()
    end = await fake.ended()                       # the gateway's session.end
assert fake.refused == []
```

A gateway that refuses the session (the upgrade, the token) or sends no ``session.start`` fails
the ``async with`` with :class:`SessionRefused`, which carries the OVP code.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from voxwire import ovp
from voxwire.capture import Recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import HandshakeError
from voxwire.hosts import check_url
from voxwire.ovp.client import HandshakeError as UpgradeRefused
from voxwire.ovp.client import OVPClient, SessionFailed, TokenSource
from voxwire.testing._faultproxy import FaultProxy
from voxwire.testing.watch import ExpectationFailed, Watch, Watching

__all__ = ["FakeOVPClient", "SessionRefused"]

_RESUME = str(ovp.SessionResume.__struct_config__.tag)
"""The wire type of session.resume, as the watch logs it."""

T = TypeVar("T")


class SessionRefused(HandshakeError, AssertionError):
    """The gateway did not start the session: it refused the upgrade or the token, or sent no
    ``session.start`` in time.

    Attributes:
        code: The OVP error code it gave (``OVP_AUTH_FAILED``, ``OVP_SUBPROTOCOL_MISMATCH``...),
            or ``None``.
        status: The HTTP status of a refused upgrade, or ``None``.
    """

    def __init__(self, message: str, *, code: str | None, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class FakeOVPClient(Watching):
    """An OVP client for tests of a gateway: one session, on loopback, everything recorded.

    Args:
        url: The gateway under test's base URL (``ws://127.0.0.1:PORT``); the endpoint path
            and the token are the client's to add.
        session_id: The session, as the token names it.
        token: The token, or a coroutine function returning one per connection.
        clock: The client's clock (resume window, pacing, backoff).
        ssl: An ``ssl.SSLContext`` for a ``wss://`` gateway on loopback.
        wait: Real seconds :meth:`expect` and the other waits last by default
            (``voxwire.testing.watch.WAIT``).
        record: A recorder every message and link change is passed on to.
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        token: TokenSource,
        *,
        clock: Clock = SYSTEM_CLOCK,
        ssl: Any = None,
        wait: float | None = None,
        record: Recorder | None = None,
    ) -> None:
        self.target = check_url(url)
        self.session_id = session_id
        self.token = token
        self.clock = clock
        self.ssl = ssl
        self.wait = wait
        self.watch = Watch(
            "ovp", "client", fake="the fake client", peer="the gateway", then=record, clock=clock
        )
        self.failure: SessionFailed | None = None
        """How the session failed, once it did without ``session.end``."""
        self._client: OVPClient | None = None
        self._relay = FaultProxy(self.target.port, host=self.target.host)
        self._readers: list[asyncio.Task[None]] = []

    def __repr__(self) -> str:
        return f"FakeOVPClient({self.target.redacted}, session_id={self.session_id!r})"

    # -- the client -----------------------------------------------------------------------------

    @property
    def client(self) -> OVPClient:
        """The real client: its typed sends, ``send_audio``, ``stream_audio``, ``on``..."""
        if self._client is None:
            raise ExpectationFailed("the fake client is not connected: use `async with`")
        return self._client

    @property
    def start(self) -> ovp.SessionStart:
        """The gateway's ``session.start``."""
        start = self.client.session_start
        assert start is not None  # connected
        return start

    # -- what the gateway sent ------------------------------------------------------------------

    @property
    def frames(self) -> list[ovp.AudioFrame]:
        """Every audio frame of the gateway the client took, in order."""
        return self.watch.frames

    # -- the script -----------------------------------------------------------------------------

    async def expect(self, kind: type[T], *, timeout: float | None = None) -> T:
        """The gateway's next ``kind`` after the events already expected (``session.start``
        included); the events of other types on the way are passed over. See
        :meth:`voxwire.testing.watch.Watch.expect`."""
        return await self.watch.expect(kind, timeout=self._wait(timeout))

    async def drop(self, *, timeout: float | None = None) -> None:
        """Reset the link, both ways, as a network failure does, and wait until the client
        noticed (it reconnects and resumes by itself: :meth:`resumed`)."""
        since = len(self.watch.log)
        if self._relay.reset() == 0:
            raise ExpectationFailed("the fake client has no link to drop")

        def noticed() -> bool:
            return any(e.what == "link lost" for e in self.watch.log[since:])

        await self.watch.until(
            noticed, "the client did not see the drop", timeout=self._wait(timeout)
        )

    async def resumed(self, *, timeout: float | None = None) -> None:
        """Wait until the client is connected again and sent its ``session.resume``; raises
        :class:`ExpectationFailed` when the session ended instead (the gateway refused the
        resume)."""
        client, since = self.client, len(self.watch.log)

        def back() -> bool:
            if client.over is not None:
                raise ExpectationFailed(
                    f"the session ended instead of resuming: {client.over.code}: "
                    f"{client.over.detail}"
                )
            return client.connected and any(
                e.what.startswith(_RESUME) for e in self.watch.log[since:]
            )

        await self.watch.until(back, "the client did not resume", timeout=self._wait(timeout))

    async def ended(self, *, timeout: float | None = None) -> ovp.SessionEnd:
        """The gateway's ``session.end``, once the session is over; raises
        :class:`ExpectationFailed` when it ended without one (``failure`` says how)."""
        client = self.client
        await self.watch.until(
            lambda: client.over is not None, "no session.end", timeout=self._wait(timeout)
        )
        end = client.session_end
        if end is None:
            assert client.over is not None
            raise ExpectationFailed(
                f"the session ended without session.end: {client.over.code}: {client.over.detail}"
            )
        return end

    # -- life -----------------------------------------------------------------------------------

    async def connect(self) -> ovp.SessionStart:
        """Connect through the relay and wait for ``session.start``; raises
        :class:`SessionRefused` when the gateway does not start the session."""
        await self._relay.start()
        url = f"{self.target.scheme}://127.0.0.1:{self._relay.port}"
        self._client = client = OVPClient(
            url, self.session_id, self.token, clock=self.clock, ssl=self.ssl, record=self.watch
        )
        try:
            start = await client.connect()
        except UpgradeRefused as exc:
            raise SessionRefused(
                f"the gateway refused the upgrade: {exc}", code=exc.code, status=exc.status
            ) from None
        except SessionFailed as exc:
            raise SessionRefused(
                f"the gateway did not start the session: {exc}", code=exc.code
            ) from None
        self._readers = [
            asyncio.ensure_future(self._read_events(client)),
            asyncio.ensure_future(self._read_audio(client)),
        ]
        return start

    async def close(self) -> None:
        """Hang up (close 1000) and stop."""
        if self._client is not None:
            await self._client.close()
        for reader in self._readers:
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        await self._relay.close()

    async def __aenter__(self) -> FakeOVPClient:
        try:
            await self.connect()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _read_events(self, client: OVPClient) -> None:
        """Consume the client's events (its handlers ran as they arrived); the watch keeps them."""
        try:
            async for _ in client:
                pass
        except SessionFailed as exc:
            self.failure = exc
        self.watch.notify()

    async def _read_audio(self, client: OVPClient) -> None:
        async for _ in client.audio():
            pass
