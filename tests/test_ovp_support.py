"""Shared helpers of the OVP tests (loopback gateways, tokens, raw peers) and their own checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect

from voxwire import ovp
from voxwire.clock import SYSTEM_CLOCK, Clock, ScaledClock
from voxwire.ovp._upgrade import OfferingConnection
from voxwire.ovp.client import OVPClient, TokenSource
from voxwire.ovp.gateway import Gateway, GatewaySession, SessionHandler, mint_token

T = TypeVar("T")

SECRET = "test-secret-that-is-long-enough-for-hs256"
SESSION = "ovps_test_1"
TENANT = "tenant_1"
CALL = ovp.CallInfo(
    call_id="call_1",
    from_="+14155551234",
    to="+18005550100",
    direction=ovp.CallDirection.INBOUND,
    secure=True,
)
AGENT = ovp.AgentConfig(
    agent_id="agt_1",
    name="Front desk",
    instructions="Be brief.",
    model="model-1",
    voice_id="voice-1",
    language="en-US",
    tools=[],
)
TS = "2026-05-14T12:34:56.000Z"
MOMENT = datetime.fromisoformat(TS)
"""TS as the envelope's field holds it: a timezone-aware datetime."""
PCM = bytes(range(256)) * 2 + bytes(128)  # 640 bytes, not all zero
NO_STATS = ovp.FinalStats(
    duration_ms=1,
    turns=0,
    tool_calls=0,
    barge_ins=0,
    client_frames=0,
    server_frames=0,
    total_cost_usd_micros=0,
    cost_breakdown=ovp.CostBreakdown(
        llm_usd_micros=0, stt_usd_micros=0, tts_usd_micros=0, voice_termination_usd_micros=0
    ),
)
"""The final stats of a session that did nothing, for a session.end built in a test."""


def run(coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
    """Run ``coro`` on a fresh loop, bounded by ``timeout`` real seconds."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coro

    return asyncio.run(bounded())


def token(session_id: str = SESSION, tenant_id: str = TENANT, **kwargs: Any) -> str:
    return mint_token(SECRET, session_id=session_id, tenant_id=tenant_id, **kwargs)


def fast_clock() -> Clock:
    """Time 50 times faster: the 30 s window passes in 0.6 s."""
    return ScaledClock(50)


def patient(clock: Clock) -> dict[str, float]:
    """Socket timeouts of 5 real seconds on ``clock``: a loaded 2-core box can be slow."""
    seconds = 5 / clock.real_seconds(1.0)
    return {"write_timeout": seconds, "keepalive": seconds}


@asynccontextmanager
async def serving(handler: SessionHandler, **kwargs: Any) -> AsyncIterator[Gateway]:
    clock = kwargs.get("clock", SYSTEM_CLOCK)
    async with Gateway(handler, secret=SECRET, **{**patient(clock), **kwargs}) as gateway:
        yield gateway


def ovp_client(
    url: str,
    clock: Clock = SYSTEM_CLOCK,
    tok: TokenSource | None = None,
    session_id: str = SESSION,
    **kwargs: Any,
) -> OVPClient:
    """An OVPClient for a test session with patient socket timeouts on ``clock``."""
    timeouts = {**patient(clock), "open_timeout": patient(clock)["keepalive"]}
    return OVPClient(
        url, session_id, tok or token(session_id), clock=clock, **{**timeouts, **kwargs}
    )


async def start_and_collect(
    session: GatewaySession, into: list[ovp.ClientMessage | ovp.AudioFrame]
) -> None:
    """A handler body: start the session and keep everything the client sends."""
    session.start(CALL, AGENT)
    async for item in session:
        into.append(item)


def collecting(
    into: list[ovp.ClientMessage | ovp.AudioFrame],
) -> Callable[[GatewaySession], Awaitable[None]]:
    async def handler(session: GatewaySession) -> None:
        await start_and_collect(session, into)

    return handler


def endpoint(gateway: Gateway, session_id: str = SESSION, tok: str | None = None) -> str:
    return f"{gateway.url}/voice/ws/{session_id}?token={tok or token(session_id)}"


async def raw_connect(url: str) -> ClientConnection:
    """A bare connection that offers orbit-voice/1.0, for sending what OVPClient never would."""
    return await connect(
        url, create_connection=OfferingConnection, compression=None, open_timeout=5
    )


async def next_event(ws: ClientConnection) -> dict[str, Any]:
    """The next text message, as JSON (binary frames are skipped)."""
    while True:
        data = await ws.recv()
        if isinstance(data, str):
            event: dict[str, Any] = json.loads(data)
            return event


def event(type_: str, seq: int, session_id: str = SESSION, **fields: Any) -> str:
    """A client event as JSON text, with any fields (valid or not)."""
    return json.dumps({"type": type_, "seq": seq, "ts": TS, "session_id": session_id, **fields})


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.005)


def test_run_bounds_a_coroutine() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    try:
        run(forever(), timeout=0.05)
    except TimeoutError:
        return
    raise AssertionError("run() did not time out")


def test_tokens_verify_for_their_session() -> None:
    from voxwire.ovp.gateway import verify_token

    claims = verify_token(token(), SECRET, SESSION)
    assert claims.session_id == SESSION and claims.tenant_id == TENANT
    assert claims.expires_at - claims.issued_at == ovp.MAX_TOKEN_LIFETIME_S
