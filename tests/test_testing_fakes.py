"""The fakes of voxwire.testing, each against voxwire's real role and against a deliberately broken
peer: what they record, what they refuse (with the protocol's code), and their failure texts."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from tests.peers.raw import DEADLINE, RawEngine, aio, frame, start
from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession, Reject
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.errors import VoxwireError
from voxwire.hosts import check_url
from voxwire.ovp.client import OVPClient, SessionFailed
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token
from voxwire.testing.agent import FakeAgent
from voxwire.testing.client import FakeOVPClient, SessionRefused
from voxwire.testing.engine import AgentCall
from voxwire.testing.gateway import DEFAULT_AGENT, DEFAULT_CALL, FakeGateway
from voxwire.testing.watch import ExpectationFailed, NothingArrived

SESSION = "ovps_fake"
SECRET = "a-gateway-secret-of-at-least-32-bytes"
INJECT = ovp.InputSource.DEVELOPER_INJECT
ErrorCode = ovp.ErrorCode


def _codes(fake: FakeGateway | FakeOVPClient | FakeAgent | AgentCall) -> list[str]:
    return [refused.error.code for refused in fake.refused]


def _ts() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _client_event(type_: str, seq: int, session_id: str = SESSION, **body: Any) -> str:
    return json.dumps({"type": type_, "seq": seq, "ts": _ts(), "session_id": session_id, **body})


# -- the fake gateway ---------------------------------------------------------------------------


@aio
async def test_the_fake_gateway_plays_a_session_to_the_real_client() -> None:
    async with FakeGateway(wait=DEADLINE) as fake:
        client = OVPClient(fake.url, SESSION, fake.token(SESSION))
        start = await client.connect()
        session = await fake.connected()
        assert start.agent == DEFAULT_AGENT and session.session_id == SESSION
        await client.send_agent_input(source=INJECT, text="Hi")
        assert (await fake.expect(ovp.AgentInput)).text == "Hi"
        for _ in range(3):
            client.send_audio(bytes(ovp.PCM_BYTES_PER_FRAME))
        await fake.until(lambda: len(fake.frames) == 3, "not 3 frames from the client")

        await fake.drop()
        away = session.send_agent_output(turn_id="t1", text="said while away", final=True)
        resume = await fake.resumed()
        assert resume.last_server_seq == 0 and client.reconnects == 1
        session.end(ovp.SessionEndReason.AGENT_ENDED)
        received = [event async for event in client]
        await client.close()
        await fake.ended()
    assert [e.seq for e in received] == [0, away.seq, away.seq + 1]  # replayed once, in order
    assert received[1] == away and isinstance(received[2], ovp.SessionEnd)
    assert [m.type for m in fake.sent] == ["agent.input", "session.resume"]
    assert [f.frame_seq for f in fake.frames] == [0, 1, 2] and fake.refused == []
    assert "link lost" in fake.transcript() and "3 audio frames 0..2" in fake.transcript()


@aio
async def test_the_fake_gateway_fails_a_session_with_the_spec_code() -> None:
    async with FakeGateway(wait=DEADLINE) as fake:
        client = OVPClient(fake.url, SESSION, fake.token(SESSION))
        await client.connect()
        session = await fake.connected()
        session.fail(ErrorCode.OVP_LLM_UPSTREAM_FAILED, "the LLM is down")  # ends the session
        received = [event async for event in client]
        await client.close()
    errors = [e for e in received if isinstance(e, ovp.ErrorEvent)]
    assert [(e.code, e.recoverable) for e in errors] == [(ErrorCode.OVP_LLM_UPSTREAM_FAILED, False)]
    assert isinstance(received[-1], ovp.SessionEnd) and received[-1].reason == "error"


@aio
async def test_the_fake_gateway_refuses_a_bad_token_and_a_resume_after_a_restart() -> None:
    async with FakeGateway(wait=DEADLINE) as fake:
        refused = OVPClient(fake.url, SESSION, fake.token(SESSION, valid=False))
        with pytest.raises(SessionFailed) as failed:
            await refused.connect()
        assert failed.value.code == ErrorCode.OVP_AUTH_FAILED
        await refused.close()

        client = OVPClient(fake.url, SESSION, fake.token(SESSION))
        await client.connect()
        await fake.connected()
        await fake.restart()
        with pytest.raises(ExpectationFailed, match=r"refused the client's session.resume: "):
            await fake.resumed()
        with pytest.raises(SessionFailed) as expired:
            await client.run()
        await client.close()
    assert expired.value.code == ErrorCode.OVP_RESUME_EXPIRED
    [resume] = fake.refused
    assert resume.error.code == ErrorCode.OVP_RESUME_EXPIRED and '"session.resume"' in resume.data
    assert "does not hold session" in resume.error.detail


async def _raw_client(url: str, token: str) -> Any:
    """A client written by hand, offering the subprotocol's token form."""
    target = f"{url}/voice/ws/{SESSION}?token={token}"
    return await connect(
        target, subprotocols=[Subprotocol(ovp.SUBPROTOCOL_ALIAS)], compression=None
    )


@aio
async def test_the_fake_gateway_records_what_a_broken_client_sent_and_refused() -> None:
    async with FakeGateway(wait=DEADLINE) as fake:
        ws = await _raw_client(fake.url, fake.token(SESSION))
        assert ovp.decode(await ws.recv(), "server").type == "session.start"
        await ws.send(_client_event("agent.input", 0, source=INJECT, text="Hi"))
        await ws.send(_client_event("agent.input", 0, source=INJECT, text="again"))  # seq 0 again
        await ws.send(_client_event("agent.input", 1, source=INJECT))  # no text
        await ws.send(_client_event("agent.output", 2, turn_id="t", text="x", final=True))
        assert (await fake.expect(ovp.AgentInput)).text == "Hi"
        with pytest.raises(ExpectationFailed) as first:
            await fake.expect(ovp.AgentInput)
        await fake.until(lambda: len(fake.refused) == 3, "not three refusals")
        answers = [ovp.decode(await ws.recv(), "server") for _ in range(3)]
        await ws.close()
        for _ in range(2):  # the two refusals expect() has not reported yet, one a call
            with pytest.raises(ExpectationFailed):
                await fake.expect(ovp.DtmfSend, timeout=0.05)
        with pytest.raises(NothingArrived) as timed_out:
            await fake.expect(ovp.DtmfSend, timeout=0.05)
    codes = [
        ErrorCode.OVP_SEQ_REGRESSION,
        ErrorCode.OVP_EVENT_SCHEMA_INVALID,
        ErrorCode.OVP_EVENT_DIRECTION_VIOLATION,
    ]
    assert _codes(fake) == codes and [r.after for r in fake.refused] == [1, 1, 1]
    assert [getattr(a, "code", None) for a in answers] == codes  # answered on the wire too
    assert str(first.value).startswith(
        "expected agent.input from the client; the fake gateway refused what it sent first: "
        "OVP_SEQ_REGRESSION: seq 0 is not greater than 0 ("
    )
    assert isinstance(timed_out.value, VoxwireError) and isinstance(timed_out.value, TimeoutError)
    assert str(timed_out.value).startswith("no dtmf.send from the client within 0.05 s; ")
    assert "REFUSED OVP_EVENT_DIRECTION_VIOLATION" in fake.transcript()


# -- the fake OVP client ------------------------------------------------------------------------


async def echo(session: GatewaySession) -> None:
    session.start(DEFAULT_CALL, DEFAULT_AGENT)
    async for item in session:
        if isinstance(item, ovp.AgentInput):
            session.send_agent_output(turn_id=f"turn_{item.seq}", text=item.text, final=True)
        elif isinstance(item, ovp.AudioFrame):
            session.send_audio(item.pcm)
        elif isinstance(item, ovp.DtmfSend):
            session.end(ovp.SessionEndReason.AGENT_ENDED)


@aio
async def test_the_fake_client_plays_a_session_to_the_real_gateway() -> None:
    async with Gateway(echo, secret=SECRET) as gateway:
        token = mint_token(SECRET, session_id=SESSION, tenant_id="tenant_1")
        async with FakeOVPClient(gateway.url, SESSION, token, wait=DEADLINE) as fake:
            assert (await fake.expect(ovp.SessionStart)).agent == DEFAULT_AGENT
            await fake.client.send_agent_input(source=INJECT, text="Hi")
            assert (await fake.expect(ovp.AgentOutput)).text == "Hi"
            fake.client.send_audio(bytes(ovp.PCM_BYTES_PER_FRAME))
            await fake.until(lambda: fake.frames, "no audio echoed")
            await fake.drop()
            await fake.resumed()
            await fake.client.send_agent_input(source=INJECT, text="again")
            assert (await fake.expect(ovp.AgentOutput)).text == "again"
            await fake.client.send_dtmf(digits="#")
            end = await fake.ended()
        assert end.reason == "agent_ended" and end.stats.client_frames == 1
        assert fake.refused == [] and fake.client.reconnects == 1
        assert [m.type for m in fake.sent] == [
            "session.start",
            "agent.output",
            "agent.output",
            "session.end",
        ]

        with pytest.raises(SessionRefused) as refused:
            async with FakeOVPClient(gateway.url, SESSION, "not-a-token"):
                pass
        assert refused.value.code == ErrorCode.OVP_AUTH_FAILED
        assert isinstance(refused.value, AssertionError)


def _server_event(message: type[Any], seq: int, session_id: str = SESSION, **fields: Any) -> str:
    built = message(seq=seq, ts=datetime.now(UTC), session_id=session_id, **fields)
    return ovp.encode(built).decode()


START = _server_event(
    ovp.SessionStart,
    0,
    protocol_version=ovp.PROTOCOL_VERSION,
    call=DEFAULT_CALL,
    agent=DEFAULT_AGENT,
    audio=ovp.AudioFormat(
        sample_rate_hz=ovp.SAMPLE_RATE_HZ,
        sample_width_bits=ovp.SAMPLE_WIDTH_BITS,
        channels=1,
        frame_ms=ovp.FRAME_MS,
    ),
)


def _select(connection: ServerConnection, request: Request) -> None:
    del request.headers["Sec-WebSocket-Protocol"]  # websockets cannot parse the '/'


def _echo_subprotocol(connection: ServerConnection, request: Request, response: Response) -> None:
    response.headers["Sec-WebSocket-Protocol"] = ovp.SUBPROTOCOL


@aio
async def test_the_fake_client_records_what_a_broken_gateway_sent_and_refused() -> None:
    output = {"turn_id": "t1", "text": "x", "final": True}

    async def broken(ws: ServerConnection) -> None:
        await ws.send(START)
        await ws.send(_server_event(ovp.AgentOutput, 1, **output))
        await ws.send(_server_event(ovp.AgentOutput, 1, **output))  # seq 1 again
        await ws.send(_server_event(ovp.AgentOutput, 2, session_id="ovps_other", **output))
        await ws.send(json.dumps({"type": "agent.output", "seq": 3}))  # no envelope, no fields
        await ws.wait_closed()

    options: dict[str, Any] = {"process_request": _select, "process_response": _echo_subprotocol}
    async with serve(broken, "127.0.0.1", 0, compression=None, **options) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with FakeOVPClient(url, SESSION, "any", wait=DEADLINE) as fake:
            assert (await fake.expect(ovp.AgentOutput)).seq == 1
            with pytest.raises(ExpectationFailed) as first:
                await fake.expect(ovp.AgentOutput)
            await fake.until(lambda: len(fake.refused) == 3, "not three refusals")
    assert _codes(fake) == [ErrorCode.OVP_SEQ_REGRESSION] + [ErrorCode.OVP_EVENT_SCHEMA_INVALID] * 2
    assert "another session" in fake.refused[1].error.detail
    assert str(first.value).startswith(
        "expected agent.output from the gateway; the fake client refused what it sent first: "
        "OVP_SEQ_REGRESSION: "
    )
    assert [m.type for m in fake.sent] == ["session.start", "agent.output"]


# -- the fake agent -----------------------------------------------------------------------------


@aio
async def test_the_fake_agent_plays_a_call_to_the_real_engine() -> None:
    async with FakeAgent(answers={"opening_hours": "noon to ten"}, resume=True) as fake:
        link = EngineLink(AgentTarget(check_url(fake.url)), session_id="call-1", agent="luigi")
        spoken: list[str] = []
        link.on("say", lambda say: spoken.append(say.text))
        assert await link.start()
        session = await fake.connected()
        assert [t.name for t in session.accept.tools] == ["opening_hours"]
        link.send_user_text(epoch=1, text="hours?")
        assert (await fake.expect(brisvox.UserText)).text == "hours?"
        result = await session.send_say(text="We open at noon.")
        assert result.ok and spoken == ["We open at noon."]
        finished = await link.call_tool("opening_hours", {}, call_id="llm-1", epoch=1)
        assert finished.result == "noon to ten"
        assert (await fake.expect(brisvox.ToolCall)).name == "opening_hours"

        await fake.drop()
        await fake.resumed()
        await fake.until(lambda: link.up, "the engine did not take the call up again")
        link.send_user_text(epoch=2, text="still there?")
        assert (await fake.expect(brisvox.UserText)).text == "still there?"
        await link.end("hangup")
        await fake.ended()
    assert fake.refused == [] and session.resumes == 1
    assert [m.type for m in fake.sent if m.type != "events.lost"] == [
        "session.start",
        "user.text",
        "command.result",
        "tool.call",
        "session.start",
        "user.text",
        "session.end",
    ]


@aio
async def test_the_fake_agent_rejects_the_handshake_as_told() -> None:
    decision = Reject(brisvox.ErrorCode.UNAVAILABLE, "the fake is busy")
    async with FakeAgent(decision=decision, token="s3cret") as fake:
        link = EngineLink(AgentTarget(check_url(fake.url), "s3cret"), session_id="c", agent="a")
        assert not await link.start()
        await link.close()
        with pytest.raises(NothingArrived, match=r"^no call from the engine within 0\.05 s; "):
            await fake.connected(timeout=0.05)
    [started] = fake.starts
    assert started.session_id == "c" and fake.sessions == [] and fake.refused == []


@aio
async def test_the_fake_agent_records_what_a_broken_engine_sent_and_refused() -> None:
    async with FakeAgent(wait=DEADLINE) as fake:
        engine = await RawEngine.open(fake.url)
        assert (await engine.handshake(start(seq=1))).type == "session.accept"
        await engine.send(frame("user.text", 2, epoch=1, text="Hi"))
        await engine.send(frame("user.text", 2, epoch=1, text="again"))  # seq 2 again
        await engine.send(frame("user.text", 3, epoch=1))  # no text
        assert (await fake.expect(brisvox.UserText)).text == "Hi"
        with pytest.raises(ExpectationFailed) as first:
            await fake.expect(brisvox.UserText)
        await fake.until(lambda: len(fake.refused) == 2, "not two refusals")
        await engine.close()
    assert _codes(fake) == [brisvox.ErrorCode.BAD_MESSAGE] * 2
    assert "seq 2 after 2" in fake.refused[0].error.detail
    assert "$.text" in str(fake.refused[1].error)
    assert str(first.value).startswith(
        "expected user.text from the engine; the fake agent refused what it sent first: bad_message"
    )


# -- the fake engine ----------------------------------------------------------------------------


@aio
async def test_the_fake_engine_plays_a_call_to_the_real_agent_server() -> None:
    async def greet(session: AgentSession) -> None:
        await session.send_say(text="Hello.")
        async for _ in session:
            pass

    async with (
        AgentServer(greet, token=None) as server,
        AgentCall.open(server.url, wait=DEADLINE) as call,
    ):
        assert (await call.expect(brisvox.Say)).text == "Hello."
        with pytest.raises(NothingArrived) as timed_out:
            await call.expect(brisvox.End, timeout=0.05)
        await call.hang_up()
    assert call.refused == []
    assert str(timed_out.value) == (
        "no end from the agent within 0.05 s; nothing arrived (the last from the agent: say)"
    )


# -- the pytest plugin --------------------------------------------------------------------------

USER_TESTS = """
import asyncio

from voxwire import brisvox, ovp
from voxwire.brisvox.agent import AgentServer, AgentSession
from voxwire.brisvox.engine import AgentTarget, EngineLink
from voxwire.hosts import check_url
from voxwire.ovp.client import OVPClient
from voxwire.ovp.gateway import Gateway, GatewaySession, mint_token
from voxwire.testing.agent import FakeAgent
from voxwire.testing.gateway import DEFAULT_AGENT, DEFAULT_CALL, FakeGateway
from voxwire.testing.plugin import AgentCallMaker, FakeOVPClientMaker

SECRET = "a-gateway-secret-of-at-least-32-bytes"
INJECT = ovp.InputSource.DEVELOPER_INJECT


def test_a_client(fake_gateway: FakeGateway) -> None:
    async def scenario() -> None:
        async with fake_gateway:
            client = OVPClient(fake_gateway.url, "ovps_1", fake_gateway.token("ovps_1"))
            await client.connect()
            await client.send_agent_input(source=INJECT, text="Hi")
            assert (await fake_gateway.expect(ovp.AgentInput)).text == "Hi"
            await client.close()

    assert fake_gateway.wait == 2.5  # --voxwire-wait
    asyncio.run(scenario())


def test_an_engine(fake_agent: FakeAgent) -> None:
    async def scenario() -> None:
        async with fake_agent:
            link = EngineLink(AgentTarget(check_url(fake_agent.url)), session_id="c", agent="a")
            assert await link.start()
            link.send_user_text(epoch=1, text="Hi")
            assert (await fake_agent.expect(brisvox.UserText)).text == "Hi"
            await link.end("hangup")

    asyncio.run(scenario())


def test_a_gateway(fake_ovp_client: FakeOVPClientMaker) -> None:
    async def answer(session: GatewaySession) -> None:
        session.start(DEFAULT_CALL, DEFAULT_AGENT)
        async for item in session:
            if isinstance(item, ovp.AgentInput):
                session.end(ovp.SessionEndReason.AGENT_ENDED)

    async def scenario() -> None:
        async with Gateway(answer, secret=SECRET) as gateway:
            token = mint_token(SECRET, session_id="ovps_1", tenant_id="t")
            async with fake_ovp_client(gateway.url, "ovps_1", token) as client:
                await client.client.send_agent_input(source=INJECT, text="Bye")
                assert (await client.ended()).reason == "agent_ended"

    asyncio.run(scenario())


def test_an_agent(fake_engine: AgentCallMaker) -> None:
    async def greet(session: AgentSession) -> None:
        await session.send_say(text="Hello.")
        async for _ in session:
            pass

    async def scenario() -> None:
        async with AgentServer(greet, token="s3cret") as server:
            async with fake_engine(server.url, token="s3cret") as call:
                assert (await call.expect(brisvox.Say)).text == "Hello."
                await call.hang_up()

    asyncio.run(scenario())


def test_a_client_that_never_dials(fake_gateway: FakeGateway) -> None:
    async def scenario() -> None:
        async with fake_gateway:
            client = OVPClient(fake_gateway.url, "ovps_2", fake_gateway.token("ovps_2"))
            await client.connect()
            await client.send_agent_input(source=INJECT, text="Hi")
            await fake_gateway.expect(ovp.DtmfSend, timeout=0.2)

    asyncio.run(scenario())
"""


def test_the_plugin_gives_users_the_fakes_and_shows_what_they_saw(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--voxwire-wait=2.5",
         "test_user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = done.stdout
    assert re.search(r"^plugins: .*\bvoxwire-", out, re.M), out  # loaded by its entry point
    assert "1 failed, 4 passed" in out, out
    failure = out[out.index("_ test_a_client_that_never_dials _") :]
    assert (
        "NothingArrived: no dtmf.send from the client within 0.2 s; passed over agent.input seq 0;"
        " nothing arrived (the last from the client: agent.input seq 0)"
    ) in failure
    section = failure[failure.index("voxwire fake_gateway") :]
    assert "the fake: session.start seq 0" in section
    assert "the client: agent.input seq 0" in section


def test_the_plugin_and_the_fakes_load_only_what_they_use() -> None:
    probe = (
        "import sys, voxwire.testing.plugin\n"
        "assert not [m for m in sys.modules if m.startswith('voxwire.testing.') and"
        " m != 'voxwire.testing.plugin'], sorted(sys.modules)\n"
        "assert 'jwt' not in sys.modules\n"
        "for name in ('AgentCall', 'FakeAgent', 'FakeOVPClient'):\n"
        "    getattr(voxwire.testing, name)\n"
        "del sys.modules['pytest']\n"
        "import voxwire.testing.agent, voxwire.testing.client, voxwire.testing.engine\n"
        "assert 'pytest' not in sys.modules and 'jwt' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


@aio
async def test_the_fake_engine_records_what_a_broken_agent_sent_and_refused() -> None:
    blank = '{"type": "say", "id": "c1", "text": " "}'

    async def broken(ws: ServerConnection) -> None:  # an agent not written with voxwire
        await ws.recv()
        await ws.send('{"type": "session.accept", "version": 1, "tools": []}')
        await ws.send(blank)
        await ws.wait_closed()

    async with serve(broken, "127.0.0.1", 0, compression=None) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with AgentCall.open(url, wait=DEADLINE) as call:
            with pytest.raises(ExpectationFailed) as refused:
                await call.expect(brisvox.Say)
            with pytest.raises(NothingArrived) as timed_out:
                await call.expect(brisvox.Say, timeout=0.05)
    assert _codes(call) == [brisvox.ErrorCode.INVALID_ARGUMENT] and call.sent == []
    assert str(refused.value).startswith(
        "expected a say, the engine refused what the agent sent: invalid_argument: say $.text: "
    )
    assert str(timed_out.value).startswith("no say from the agent within 0.05 s; ")
    assert "the agent: say  REFUSED invalid_argument" in call.transcript()
