"""The engine side over real loopback sockets (driving our agent side), and its configuration."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET
from websockets.asyncio.server import ServerConnection, serve

from tests.peers.raw import DEADLINE, aio
from tests.timing import STEP, Lateness
from voxwire import brisvox
from voxwire.brisvox.agent import AgentServer, AgentSession, LinkDown, Resumed, Tool, ToolContext
from voxwire.brisvox.engine import (
    AgentTarget,
    CABundleError,
    ConfigError,
    EngineLink,
    caller_identity,
    load_ca_bundle,
    load_config,
    sip_user_part,
)
from voxwire.brisvox.engine_core import AgentAccepted, LinkSettings, ToolOutcome
from voxwire.brisvox.outputs import HandshakeFailed
from voxwire.brisvox.testing import AgentCall, AgentRefused
from voxwire.clock import ScaledClock
from voxwire.hosts import InsecureURLError, check_url

TOKEN = "engine-token"
TLS = Path(__file__).parent / "peers" / "tls"


def _declare(name: str, kind: str = "read_only", timeout_ms: int = 4000) -> brisvox.ToolDeclaration:
    return brisvox.ToolDeclaration(
        name=name,
        description=f"The {name} tool.",
        parameters={"type": "object", "properties": {"time": {"type": "string"}}},
        kind=brisvox.ToolKind(kind),
        timeout_ms=timeout_ms,
    )


class Luigi:
    """A small agent: answers hours, books tables, records what it saw."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.cancelled: list[str | None] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def on_session(self, session: AgentSession) -> None:
        async for event in session:
            self.events.append(event)
            if isinstance(event, brisvox.UserText) and "hours" in event.text:
                await session.send_say(text="We open at noon.", re=event.seq)
            elif isinstance(event, brisvox.UserText) and "bye" in event.text:
                await session.send_end(say="Goodbye!")

    async def hours(self, ctx: ToolContext) -> object:
        return {"open": "12:00", "asked": ctx.call.arguments}

    async def slow(self, ctx: ToolContext) -> object:
        self.started.set()
        try:
            await self.release.wait()
        finally:
            self.cancelled.append(ctx.cancel_reason)
        return "booked"

    def tools(self) -> list[Tool]:
        return [
            Tool(_declare("hours"), self.hours),
            Tool(_declare("wait"), self.slow),
            Tool(_declare("book", "side_effect", timeout_ms=200), self.slow),
        ]


async def _wait_until(predicate: Any) -> None:
    async with asyncio.timeout(DEADLINE):
        while not predicate():
            await asyncio.sleep(0.005)


# -- a call over loopback ------------------------------------------------------------------------


@aio
async def test_a_whole_call_through_the_harness() -> None:
    luigi = Luigi()
    async with AgentServer(luigi.on_session, tools=luigi.tools(), token=TOKEN) as server:
        async with AgentCall.open(server.url, token=TOKEN, session_id="c-1") as call:
            assert set(call.tools) == {"hours", "wait", "book"}
            call.user_says("What are your hours?")
            say = await call.expect(brisvox.Say)
            assert say.text == "We open at noon." and say.id == "c1" and say.re == 5
            finished = await call.tool("hours", time="today")
            assert finished.outcome is ToolOutcome.RESULT
            assert finished.result == {"open": "12:00", "asked": {"time": "today"}}
            call.bot_says("We open at noon.")
            pending = call.start_tool("wait")
            await _wait_until(luigi.started.is_set)
            call.barge_in()
            call.cancel(pending)
            assert (await pending).outcome is ToolOutcome.INTERRUPTED
            await _wait_until(lambda: luigi.cancelled == ["interrupted"])
            call.user_says("ok bye")
            end = await call.expect(brisvox.End)
            assert end.say == "Goodbye!"
            await call.hang_up("ended_by_agent")
        await _wait_until(lambda: luigi.events and isinstance(luigi.events[-1], brisvox.SessionEnd))
    kinds = [type(e).__name__ for e in luigi.events]
    assert kinds.count("UserText") == 2 and "TurnInterrupted" in kinds and "BotText" in kinds
    assert [type(c).__name__ for c in call.sent] == ["Say", "End"]


@aio
async def test_a_side_effect_result_after_its_timeout_arrives_late() -> None:
    luigi = Luigi()
    server = AgentServer(luigi.on_session, tools=luigi.tools(), token=TOKEN)
    async with server, AgentCall.open(server.url, token=TOKEN) as call:
        pending = call.start_tool("book", time="19:00")
        await asyncio.sleep(0.3)  # past its 200 ms timeout: overdue, still waited for
        luigi.release.set()
        finished = await pending
        assert finished.outcome is ToolOutcome.RESULT and finished.late
        assert finished.result == "booked"
        assert any(type(n).__name__ == "ToolOverdue" for n in call.notices)


@aio
async def test_a_refused_command_reaches_the_agent_as_command_failed() -> None:
    from voxwire.brisvox.agent import CommandFailed

    failures: list[CommandFailed] = []

    async def on_session(session: AgentSession) -> None:
        try:
            await session.send_transfer(destination="+15551230002")
        except CommandFailed as exc:
            failures.append(exc)

    async with AgentServer(on_session, token=TOKEN) as server:
        refuse = {"transfer": ("unsupported", "no call control on this call")}
        async with AgentCall.open(server.url, token=TOKEN, refuse=refuse) as call:
            transfer = await call.expect(brisvox.Transfer)
            assert transfer.destination == "+15551230002" and transfer.id == "c1"
            await _wait_until(lambda: failures)
    assert failures[0].code == "unsupported"


@aio
async def test_a_wrong_token_means_no_agent_for_the_call() -> None:
    async with AgentServer(Luigi().on_session, token=TOKEN) as server:
        with pytest.raises(AgentRefused, match="401"):
            async with AgentCall.open(server.url, token="wrong"):
                pass


@aio
async def test_an_unreachable_agent_fails_fast() -> None:
    async with AgentServer(Luigi().on_session, token=TOKEN) as server:
        url = server.url
    link = EngineLink(AgentTarget(check_url(url)), session_id="1", agent="a")
    async with Lateness() as late:
        began = time.monotonic()
        assert not await link.start()
        notice = await link.next_notice()
        ended = time.monotonic()
    assert isinstance(notice, HandshakeFailed) and "connect failed" in notice.reason
    assert ended - began < 2.0 + late.allowance(began, ended, hops=4) and link.gone
    await link.close()


@aio
async def test_an_agent_that_never_answers_fails_the_handshake_within_its_timeout() -> None:
    async def mute(ws: ServerConnection) -> None:
        await ws.wait_closed()

    clock = ScaledClock(20)
    handshake = LinkSettings().handshake_timeout  # 2 s pass in 0.1 s
    settings = LinkSettings(connect_timeout=clock.factor * DEADLINE)  # load never trips it
    async with serve(mute, "127.0.0.1", 0) as server, Lateness() as late:
        port = server.sockets[0].getsockname()[1]
        link = EngineLink(
            AgentTarget(check_url(f"ws://127.0.0.1:{port}")),
            session_id="1",
            agent="a",
            clock=clock,
            settings=settings,
        )
        began = time.monotonic()
        assert not await link.start()
        ended = time.monotonic()
        assert clock.real_seconds(handshake) <= ended - began
        assert ended - began < 1.0 + late.allowance(began, ended, hops=4)
        notice = await link.next_notice()
        assert isinstance(notice, HandshakeFailed) and "handshake timeout" in notice.reason
        await link.close()


@aio
async def test_pings_are_sent_every_interval_and_answered() -> None:
    clock = ScaledClock(100)  # a 10 s interval in 0.1 s
    interval = LinkSettings().ping_interval
    # The other bounds as long as the test may wait: load never trips them.
    unhurried = clock.factor * DEADLINE
    settings = LinkSettings(
        connect_timeout=unhurried,
        handshake_timeout=unhurried,
        write_timeout=unhurried,
        silence_timeout=unhurried,
    )
    server = AgentServer(Luigi().on_session, token=TOKEN)
    async with server, Lateness() as late:
        before = time.monotonic()
        async with AgentCall.open(server.url, token=TOKEN, clock=clock, settings=settings) as call:
            up, link = time.monotonic(), call.link
            while link.pings < 3:
                await asyncio.sleep(STEP)
            third = time.monotonic()
            # never early; late by no more than the loop was: three timers, the third ping's
            # task, this loop's poll
            assert clock.real_seconds(3 * interval) <= third - before
            assert third - up <= clock.real_seconds(3 * interval) + late.allowance(
                up, third, hops=5
            )
            while link.pongs < 3:
                await asyncio.sleep(STEP)
            assert link.up


@aio
async def test_a_lost_link_to_a_resumable_agent_is_taken_up_again() -> None:
    luigi = Luigi()
    async with AgentServer(luigi.on_session, token=TOKEN, resume=True) as server:
        async with AgentCall.open(server.url, token=TOKEN) as call:
            assert call.accept.resume
            call.user_says("hello")
            await _wait_until(lambda: any(isinstance(e, brisvox.UserText) for e in luigi.events))
            assert call.link._ws is not None
            call.link._ws.transport.abort()
            await _wait_until(
                lambda: any(isinstance(n, AgentAccepted) and n.resumed for n in call.notices)
            )
            call.user_says("what are your hours")
            say = await call.expect(brisvox.Say)
            assert say.text == "We open at noon." and call.link.reconnects == 1
        await _wait_until(lambda: any(isinstance(e, Resumed) for e in luigi.events))
    [resumed] = [e for e in luigi.events if isinstance(e, Resumed)]
    assert resumed.attempt == 1 and resumed.previous_seq >= resumed.seen_seq
    assert next(n for n in call.notices if isinstance(n, LinkDown)).reconnect_in is not None
    lost = [e for e in luigi.events if isinstance(e, brisvox.EventsLost)]
    assert lost and lost[0].count == 0


@aio
async def test_an_agent_without_resume_is_not_reconnected() -> None:
    luigi = Luigi()
    async with AgentServer(luigi.on_session, token=TOKEN) as server:
        async with AgentCall.open(server.url, token=TOKEN) as call:
            assert call.link._ws is not None
            call.link._ws.transport.abort()
            await _wait_until(lambda: call.link.gone)
            [down] = [n for n in call.notices if isinstance(n, LinkDown)]
            assert down.reconnect_in is None
        await _wait_until(lambda: luigi.events and isinstance(luigi.events[-1], LinkDown))


@aio
async def test_wss_with_a_private_ca(caplog: pytest.LogCaptureFixture) -> None:
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(TLS / "server.pem", TLS / "server.key")
    async with AgentServer(Luigi().on_session, token=TOKEN, ssl=server_tls) as server:
        assert server.url.startswith("wss://")
        link = EngineLink(
            AgentTarget(check_url(server.url), TOKEN),
            session_id="tls",
            agent="a",
            ssl=load_ca_bundle(TLS / "ca.pem"),
        )
        assert await link.start()
        await link.end()
        untrusted = EngineLink(AgentTarget(check_url(server.url), TOKEN), session_id="x", agent="a")
        assert not await untrusted.start()
        await untrusted.close()


@aio
async def test_the_url_is_logged_as_scheme_host_port_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with AgentServer(Luigi().on_session, token=TOKEN) as server:
        url = f"ws://user:pw@127.0.0.1:{server.port}/agent?token=leak"
        with pytest.raises(InsecureURLError):
            check_url(url)  # userinfo is refused outright
        target = AgentTarget(check_url(f"{server.url}/agent?key=leak"), TOKEN)
        link = EngineLink(target, session_id="1", agent="a")
        assert await link.start()
        link._ws.transport.abort()  # type: ignore[union-attr]
        await _wait_until(lambda: link.gone)
        await link.close()
        assert f"127.0.0.1:{server.port}" in caplog.text
    assert "leak" not in caplog.text and TOKEN not in caplog.text


# -- configuration -------------------------------------------------------------------------------

ENV = {"BRISVOX_AGENT_URL": "ws://agent.internal:8765/x", "BRISVOX_AGENT_TOKEN": "t0"}


def test_the_environment_gives_the_default_agent() -> None:
    config = load_config(
        environ={
            **ENV,
            "BRISVOX_AGENT_RECONNECT_ATTEMPTS": "0",
            "BRISVOX_AGENT_RECONNECT_WINDOW_MS": "5000",
            "BRISVOX_AGENT_CALLER_IDENTITY": "1",
        }
    )
    assert config.default is not None and config.default.url.redacted == "ws://agent.internal:8765"
    assert config.default.token == "t0" and config.default.caller_identity
    assert "t0" not in repr(config)
    assert config.settings.reconnect_attempts == 0 and config.settings.reconnect_window == 5.0
    assert load_config(environ={}).default is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"BRISVOX_AGENT_URL": "ws://example.com"}, "plaintext ws:// to a public host"),
        ({**ENV, "BRISVOX_AGENT_ALLOW_INSECURE": "maybe"}, "BRISVOX_AGENT_ALLOW_INSECURE"),
        ({**ENV, "BRISVOX_AGENT_RECONNECT_ATTEMPTS": "-1"}, "RECONNECT_ATTEMPTS"),
        ({**ENV, "BRISVOX_AGENT_RECONNECT_WINDOW_MS": "0"}, "RECONNECT_WINDOW_MS"),
        ({**ENV, "BRISVOX_AGENT_TLS_CA": "/nonexistent/ca.pem"}, "cannot be read"),
    ],
)
def test_bad_environment_fails_startup(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_config(environ=environ)


def test_allow_insecure_accepts_a_public_host_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = load_config(
        environ={"BRISVOX_AGENT_URL": "ws://203.0.113.9", "BRISVOX_AGENT_ALLOW_INSECURE": "1"}
    )
    assert config.default is not None and "allow_insecure" in caplog.text


def test_a_single_label_host_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    section = {
        "url": "ws://agent:8765",
        "routes": [{"name": "b", "url": "ws://agent:9000"}, {"name": "c", "url": "ws://other"}],
    }
    load_config(environ={}, toml={"agent_link": section})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # agent once, other once


def test_routes_have_their_own_settings_and_never_inherit(caplog: pytest.LogCaptureFixture) -> None:
    document = {
        "agent_link": {
            "url": "ws://luigi.internal",
            "token_env": "LUIGI_TOKEN",
            "caller_identity": False,
            "allow_insecure": True,
            "routes": [
                {"name": "billing", "url": "wss://billing.example.com", "token_env": "BILL_TOKEN"},
                {"name": "plain", "url": "ws://plain.local", "caller_identity": True},
            ],
        }
    }
    environ = {
        "LUIGI_TOKEN": "l",
        "BILL_TOKEN": "b",
        "BRISVOX_AGENT_TOKEN": "env",
        "BRISVOX_AGENT_URL": "ws://ignored.internal",
        "BRISVOX_AGENT_CALLER_IDENTITY": "1",
    }
    config = load_config(environ=environ, toml=document)
    default, billing, plain = config.default, config.routes["billing"], config.routes["plain"]
    assert default is not None and default.url.host == "luigi.internal"  # the file wins
    assert default.token == "l" and not default.caller_identity  # the file wins here too
    assert billing.token == "b" and not billing.caller_identity and billing.route == "billing"
    assert plain.token is None and plain.caller_identity  # no default token for a route
    assert config.target("billing") is billing and config.target(None) is default
    assert config.target("https://evil.example") is default
    assert "unknown agent route" in caplog.text
    with pytest.raises(InsecureURLError):
        load_config(toml={"agent_link": {"routes": [{"name": "p", "url": "ws://8.8.8.8"}]}})


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"url": "ws://a.internal", "tokn_env": "X"}, "unknown key"),
        ({"url": "ws://a.internal", "token_env": "MISSING"}, "MISSING is not set"),
        ({"url": 5}, "must be a string"),
        ({"url": "ws://a.internal", "allow_insecure": "yes"}, "true or false"),
        ({"routes": [{"url": "ws://a.internal"}]}, "needs a name and a url"),
        ({"routes": [{"name": "a", "url": "ws://a.local"}] * 2}, "defined twice"),
        ({"routes": {"name": "a"}}, "array of tables"),
    ],
)
def test_a_bad_agent_link_section_fails_startup(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(environ={}, toml={"agent_link": section})


def test_a_toml_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[agent_link]\nurl = "wss://agent.example.com"\n', encoding="utf-8")
    config = load_config(environ={}, toml=path)
    assert config.default is not None and config.default.url.scheme == "wss"
    path.write_text("[agent_link\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"agent\.toml"):
        load_config(environ={}, toml=path)


def _pem_blocks(count: int) -> bytes:
    return (TLS / "ca.pem").read_bytes() * count


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "holds no certificate"),
        (b"just text\n", "holds no certificate"),
        (_pem_blocks(17), "17 certificates, at most 16"),
        (b"x" * (256 * 1024 + 1), "larger than 262144"),
        (_pem_blocks(1)[:-30], "not closed"),
        (b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "not base64"),
        (b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "no certificate"),
        (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "not a certificate"),
        ("caf\u00e9".encode(), "non-ASCII"),
    ],
)
def test_a_bad_ca_bundle_fails_startup(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "ca.pem"
    path.write_bytes(data)
    with pytest.raises(CABundleError, match=message):
        load_ca_bundle(path)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "missing"])
def test_a_ca_bundle_that_is_no_regular_file_fails_startup_at_once(
    tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "ca.pem"
    if kind == "fifo":
        os.mkfifo(path)  # open() for reading would wait for a writer forever
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/zero")  # reads would never end
    message = "cannot be read" if kind == "missing" else "not a regular file"
    with pytest.raises(CABundleError, match=message):
        load_ca_bundle(path)
    with pytest.raises(CABundleError, match=message):
        load_config(
            environ={"BRISVOX_AGENT_URL": "wss://a.example", "BRISVOX_AGENT_TLS_CA": str(path)}
        )


def test_no_repr_or_str_of_the_configuration_shows_a_token_or_a_query() -> None:
    environ = {
        "BRISVOX_AGENT_URL": "wss://agent.example/path?token=QUERY-SECRET",
        "BRISVOX_AGENT_TOKEN": "TOKEN-SECRET",
        "ROUTE_TOKEN": "ROUTE-SECRET",
    }
    route = {
        "name": "billing",
        "url": "wss://b.example/x?k=ROUTE-QUERY",
        "token_env": "ROUTE_TOKEN",
    }
    config = load_config(environ=environ, toml={"agent_link": {"routes": [route]}})
    shown = " ".join(
        f(x) for f in (repr, str) for x in (config, config.default, config.routes["billing"])
    )
    for secret in ("QUERY-SECRET", "TOKEN-SECRET", "ROUTE-SECRET", "ROUTE-QUERY", "?"):
        assert secret not in shown
    assert config.default is not None and config.default.token == "TOKEN-SECRET"


def test_a_ca_bundle_of_16_certificates_is_accepted() -> None:
    context = load_ca_bundle(TLS / "ca.pem")
    assert any("voxwire test CA" in str(c.get("subject")) for c in context.get_ca_certs())


@pytest.mark.parametrize(
    ("value", "user"),
    [
        ('"Ann" <sip:+15551230001@trunk.example>', "+15551230001"),
        ("sip:ann@trunk.example", "ann"),
        ("tel:+15551230001;phone-context=example", "+15551230001"),
        ("sip:trunk.example", None),
        ("sip:ann smith@trunk.example", None),
        ("sip:<script>@x", None),
        (f"sip:{'1' * 65}@x", None),
        (f"sip:{'1' * 64}@x", "1" * 64),
        ("sip:+1%20555@x", None),
        ("mailto:ann@example.com", None),
    ],
)
def test_the_sip_user_part_filter(value: str, user: str | None) -> None:
    assert sip_user_part(value) == user


def test_caller_identity_filters_sip_numbers_and_redacts() -> None:
    sip = caller_identity("sip", "call-1", from_="+15551230001", to="ann smith")
    assert sip == brisvox.CallIdentity(
        carrier="sip", carrier_call_id="call-1", from_="+15551230001"
    )
    twilio = caller_identity("twilio", "CA1", from_="client:alice", to="+15551230002")
    assert twilio is not None and twilio.from_ == "client:alice"
    redacted = caller_identity("telnyx", "v3:1", from_="+1555", to="+1666", redact=True)
    assert redacted == brisvox.CallIdentity(
        carrier="telnyx", carrier_call_id="v3:1", pii_redacted=True
    )
    assert caller_identity("twilio", None, from_="+1555") is None


@aio
async def test_the_caller_identity_is_sent_only_when_opted_in() -> None:
    starts: list[brisvox.SessionStart] = []

    async def on_session(session: AgentSession) -> None:
        starts.append(session.start)

    identity = caller_identity("sip", "call-1", from_="+15551230001")
    async with AgentServer(on_session, token=TOKEN) as server:
        for opted_in in (True, False):
            target = AgentTarget(check_url(server.url), TOKEN, caller_identity=opted_in)
            link = EngineLink(target, session_id=str(opted_in), agent="a", call=identity)
            assert await link.start()
            await link.end()
        await _wait_until(lambda: len(starts) == 2)
    assert starts[0].call == identity and starts[1].call is UNSET


@aio
async def test_the_harness_records_what_the_engine_refused_and_expect_names_it() -> None:
    blank = '{"type": "say", "id": "c2", "text": ""}'

    async def blank_say(ws: ServerConnection) -> None:  # an agent not written with voxwire
        await ws.recv()
        await ws.send('{"type": "session.accept", "version": 1, "tools": []}')
        for message in ('{"type": "say", "id": "c1", "text": "Hi."}', blank):
            await ws.send(message)
        await ws.send('{"type": "say", "id": "c3", "text": "Bye."}')
        await ws.wait_closed()

    async with serve(blank_say, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with AgentCall.open(f"ws://127.0.0.1:{port}") as call:
            assert (await call.expect(brisvox.Say)).text == "Hi."
            with pytest.raises(AssertionError, match=r"refused .*invalid_argument: say \$\.text"):
                await call.expect(brisvox.Say, timeout=DEADLINE)
            assert (await call.expect(brisvox.Say)).text == "Bye."
            [refused] = call.refused
            assert refused.error.code == brisvox.ErrorCode.INVALID_ARGUMENT
            assert refused.data == blank and refused.after == 1
            assert [say.text for say in call.sent if isinstance(say, brisvox.Say)] == [
                "Hi.",
                "Bye.",
            ]
            with pytest.raises(TimeoutError, match=r"no say from the agent within 0\.05 s"):
                await call.expect(brisvox.Say, timeout=0.05)
