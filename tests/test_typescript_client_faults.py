"""The TypeScript client against the faults of issue 24, over real loopback sockets, in Node and in
headless Chromium (tests/typescript/faults.ts runs the client; this module makes the fault):

- a gateway restart under a resume, against the Python ``Gateway`` (which refuses the resume) and
  against a raw gateway written from the document that does not refuse it and starts the session
  anew: the loss is reported (``OVP_RESUME_EXPIRED``), nothing of the new session is delivered,
  and the client makes no second attempt;
- a black hole through the fault proxy: the link is declared down within the idle bound
  (``CLIENT_IDLE_TIMEOUT_MS``, decision client-idle-bound) and resumed, every tick delivered once;
- a stalled reader: ``bufferedAmount`` stays within ``CLIENT_SEND_BUFFER_MAX_BYTES`` and one
  frame, audio is dropped and counted, events queue up to ``CLIENT_SEND_QUEUE_MAX_EVENTS`` and
  one more is refused with ``SendQueueFull``.

Time is judged in real seconds with margins that hold on a loaded two-core machine: the client
runs in another process (node, or the browser), on its own clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from tests.browser import chromium_page, serve_folder
from tests.conftest import ROOT
from tests.node import consumer, node
from tests.test_ovp_support import AGENT, CALL, NO_STATS, SESSION, run, serving, token
from voxwire import ovp
from voxwire.errors import SessionStateError
from voxwire.ovp.gateway import GatewaySession
from voxwire.testing._faultproxy import FaultProxy

TESTS = ROOT / "tests" / "typescript"
RUNTIMES = ("node", "chromium")
IDLE_S = ovp.CLIENT_IDLE_TIMEOUT_MS / 1000
LOAD_MARGIN_S = 5.0
"""How late a timer of the client's process may fire on a loaded two-core machine."""
PAGE = """<!doctype html>
<html><head><meta charset="utf-8">
<script type="importmap">{"imports": {
  "voxwire/ovp": "/node_modules/voxwire/dist/ovp/index.js",
  "voxwire/ovp/client": "/node_modules/voxwire/dist/ovp/client.js"
}}</script></head>
<body><script type="module">
import { SCENARIOS } from "/out/faults.js";
const query = new URLSearchParams(location.search);
SCENARIOS[query.get("scenario")]({ url: query.get("url"), sessionId: query.get("session"), token: query.get("token") })
  .then((result) => { window.result = result; }, (error) => { window.result = { error: String(error) }; });
</script></body></html>
"""

Drive = Callable[[str], Awaitable[dict[str, Any]]]


@functools.cache
def compiled() -> Path:
    """The consumer project with the fault scenarios compiled (its ``out`` folder)."""
    project = consumer()
    out = project.compile(TESTS / "faults.ts", TESTS / "node_faults.ts")
    (project.root / "faults.html").write_text(PAGE)
    return out


def driver(runtime: str, scenario: str, seconds: float) -> Drive:
    """Runs ``scenario`` of faults.ts against a gateway URL in ``runtime``; its JSON result."""
    out = compiled()

    async def in_node(url: str) -> dict[str, Any]:
        child = await asyncio.create_subprocess_exec(
            node(),
            str(out / "node_faults.js"),
            scenario,
            url,
            SESSION,
            token(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(seconds):
                stdout, stderr = await child.communicate()
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        assert child.returncode == 0, stderr.decode()[-3000:]
        answer: dict[str, Any] = json.loads(stdout)
        return answer

    async def in_chromium(url: str) -> dict[str, Any]:
        query = urllib.parse.urlencode(
            {"scenario": scenario, "url": url, "session": SESSION, "token": token()}
        )
        with serve_folder(out.parent) as site:
            async with chromium_page() as page:
                await page.goto(f"{site}/faults.html?{query}")
                await page.wait_for_function("window.result !== undefined", timeout=seconds * 1000)
                answer: dict[str, Any] = await page.evaluate("window.result")
                assert "error" not in answer, (answer, page.console_lines)
                return answer

    return in_node if runtime == "node" else in_chromium


AUDIO = ovp.AudioFormat(
    sample_rate_hz=ovp.SAMPLE_RATE_HZ,
    sample_width_bits=ovp.SAMPLE_WIDTH_BITS,
    channels=ovp.CHANNELS,
    frame_ms=ovp.FRAME_MS,
)


def thinking_deltas(prefix: str, count: int) -> list[str]:
    return [f"{prefix} {i}" for i in range(1, count + 1)]


# -- a gateway restart ----------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_restart_against_the_python_gateway_reports_the_loss_once(runtime: str) -> None:
    """The restarted Gateway holds no session: it refuses the resume (or its new session.start
    comes first); either way the client fails the session with OVP_RESUME_EXPIRED at once."""
    drive = driver(runtime, "restart", 40)

    async def main() -> tuple[dict[str, Any], int]:
        async with serving(_fresh_session) as restarted, FaultProxy(0) as proxy:

            async def old(session: GatewaySession) -> None:
                session.start(CALL, AGENT)
                for delta in thinking_deltas("old", 10):
                    session.send_agent_thinking(turn_id="t1", delta=delta)
                async for item in session:
                    if isinstance(item, ovp.AgentInput) and item.text == "ten":
                        proxy.target_port = restarted.port  # the gateway restarts
                        proxy.reset()

            async with serving(old) as first:
                proxy.target_port = first.port
                result = await drive(proxy.url)
                await asyncio.sleep(0.5)  # a second attempt would come within its backoff
                return result, proxy.accepted

    result, connections = run(main(), timeout=60)
    _lost_once(result)
    assert connections == 2, "one reconnect: no storm into the refusal"


async def _fresh_session(session: GatewaySession) -> None:
    """A gateway that restarted: a session of the same id starts anew, talks and ends."""
    with contextlib.suppress(SessionStateError):  # the resume was refused before the start
        session.start(CALL, AGENT)
        for delta in thinking_deltas("new", 15):
            session.send_agent_thinking(turn_id="t2", delta=delta)
        session.end()


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_restart_against_a_gateway_that_does_not_refuse_reports_the_loss(runtime: str) -> None:
    """A raw gateway from the document: each connection is a new session (session.start seq 0,
    events 1..15, session.end), whatever session.resume says."""
    drive = driver(runtime, "restart", 40)
    connections: list[int] = []

    async def raw(ws: ServerConnection) -> None:
        connections.append(len(connections))
        start = {"protocol_version": ovp.PROTOCOL_VERSION, "call": CALL, "agent": AGENT}
        await ws.send(_server(ovp.SessionStart, 0, audio=AUDIO, **start))
        if len(connections) == 1:
            for seq, delta in enumerate(thinking_deltas("old", 10), start=1):
                await ws.send(_server(ovp.AgentThinking, seq, turn_id="t1", delta=delta))
            with contextlib.suppress(ConnectionClosed):
                async for data in ws:
                    if isinstance(data, str) and '"ten"' in data:
                        ws.transport.abort()  # the gateway dies; it comes back with nothing
            return
        for seq, delta in enumerate(thinking_deltas("new", 15), start=1):
            await ws.send(_server(ovp.AgentThinking, seq, turn_id="t2", delta=delta))
        await ws.send(_server(ovp.SessionEnd, 16, reason="caller_hangup", stats=NO_STATS))
        await ws.wait_closed()

    async def main() -> dict[str, Any]:
        subprotocols = [Subprotocol(ovp.SUBPROTOCOL_ALIAS)]
        async with serve(raw, "127.0.0.1", 0, subprotocols=subprotocols) as server:
            port = server.sockets[0].getsockname()[1]
            return await drive(f"ws://127.0.0.1:{port}")

    result = run(main(), timeout=60)
    _lost_once(result)
    assert len(connections) == 2


def _server(kind: Any, seq: int, **fields: Any) -> str:
    """A server event of this session, encoded (and so checked) by the Python binding."""
    message = kind(seq=seq, ts=datetime.now(UTC), session_id=SESSION, **fields)
    return ovp.encode(message).decode()


def _lost_once(result: dict[str, Any]) -> None:
    assert result["outcome"] is not None, f"no outcome within 20 s: {result}"
    assert result["outcome"]["code"] == "OVP_RESUME_EXPIRED", result
    assert result["deltas"] == thinking_deltas("old", 10), "nothing of the new session delivered"
    assert result["starts"] == 1, "the new session.start is not the application's"
    assert result["msFromDropToOutcome"] < 5000, result


# -- a black hole ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_black_hole_is_declared_down_within_the_idle_bound_and_resumed(runtime: str) -> None:
    """The gateway ticks every 100 ms; the proxy swallows everything from a moment on, with no
    close. The client must open a new connection once it heard nothing for the idle bound
    (never before it, late by no more than the load margin) and resume: every tick once."""
    drive = driver(runtime, "blackHole", 60)
    ready = asyncio.Event()
    sent_at: list[float] = []

    async def ticking(session: GatewaySession) -> None:
        session.start(CALL, AGENT)

        async def tick() -> None:
            with contextlib.suppress(SessionStateError):
                for n in range(100_000):
                    session.send_agent_thinking(turn_id="t1", delta=f"tick {n}")
                    sent_at.append(time.monotonic())
                    await asyncio.sleep(0.1)

        ticks = asyncio.create_task(tick())
        try:
            async for item in session:
                if isinstance(item, ovp.AgentInput) and item.text == "ready":
                    ready.set()
                elif isinstance(item, ovp.AgentInput) and item.text == "done":
                    session.end()
                    return
        finally:
            ticks.cancel()

    async def main() -> tuple[dict[str, Any], float, float]:
        # The gateway's own keepalive is longer than the client's bound: the gateway does not
        # notice the hole first and close the link through the proxy.
        patient = {"keepalive": 3 * IDLE_S, "write_timeout": 3 * IDLE_S}
        async with serving(ticking, **patient) as gateway, FaultProxy(gateway.port) as proxy:

            async def fault() -> tuple[float, float]:
                await ready.wait()
                await asyncio.sleep(0.5)
                proxy.blackhole()
                holed, last_sent = time.monotonic(), sent_at[-1]
                while proxy.accepted < 2:
                    await asyncio.sleep(0.005)
                resumed = time.monotonic()
                return resumed - last_sent, resumed - holed

            result, (since_last, since_hole) = await asyncio.gather(drive(proxy.url), fault())
            return result, since_last, since_hole

    result, since_last, since_hole = run(main(), timeout=90)
    # Never early: the client heard the last tick no sooner than it was sent. Late by no more
    # than the load margin: it heard nothing after the hole.
    assert since_last >= IDLE_S, (since_last, result)
    assert since_hole <= IDLE_S + LOAD_MARGIN_S, (since_hole, result)
    assert result["reconnects"] == 1
    seqs = result["seqs"]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "every tick once, in order"
    assert result["outcome"] == {"code": None, "detail": "agent_ended", "reason": "agent_ended"}


# -- a stalled reader -----------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_stalled_reader_holds_buffered_amount_and_the_send_queue_to_their_bounds(
    runtime: str,
) -> None:
    """The proxy stops reading: audio floods in until frames are dropped, then events queue until
    the queue's bound refuses one; bufferedAmount never passes its bound by more than a frame."""
    drive = driver(runtime, "stalledReader", 60)

    async def main() -> dict[str, Any]:
        proxy = FaultProxy(0)

        async def stalling(session: GatewaySession) -> None:
            session.start(CALL, AGENT)
            async for item in session:
                if isinstance(item, ovp.AgentInput) and item.text == "ready":
                    proxy.stall()

        async with serving(stalling) as gateway:
            proxy.target_port = gateway.port
            async with proxy:
                return await drive(proxy.url)

    result = run(main(), timeout=90)
    assert result["firstDropAt"] is not None and result["audioDropped"] >= 1, result
    assert result["maxBuffered"] <= ovp.CLIENT_SEND_BUFFER_MAX_BYTES + ovp.FRAME_BYTES, result
    assert result["queueFull"] and result["queued"] == ovp.CLIENT_SEND_QUEUE_MAX_EVENTS, result
    assert result["stateWhenFull"] == "live", "back-pressure is no drop of the link"
    assert result["failedWithTheSession"] == result["queued"], "queued events fail, never vanish"
