"""What the links log and hand the resolver: no query in any log line or repr, the IPv6 zone
decoded for getaddrinfo. Over real sockets on loopback with websockets at DEBUG."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from tests.peers.raw import aio
from voxwire import hosts
from voxwire.brisvox import agent
from voxwire.brisvox.agent import AgentServer, AgentSession
from voxwire.brisvox.engine import AgentLinkConfig, AgentTarget, EngineLink
from voxwire.ovp import gateway
from voxwire.ovp.gateway import Gateway, GatewaySession
from voxwire.redaction import install_redaction, redact, redacting_logger

SECRET = "s3cr3t-t0ken"


def test_a_zone_reaches_getaddrinfo_decoded() -> None:
    checked = hosts.check_url(f"ws://[fe80::1%25lo]:8765/agent?token={SECRET}")
    overrides = checked.connect_overrides()
    assert overrides == {"host": "fe80::1%lo", "port": 8765}
    with pytest.raises(socket.gaierror):  # the URL's text, as websockets would pass it
        socket.getaddrinfo("fe80::1%25lo", 8765, flags=socket.AI_NUMERICHOST)
    host, port = overrides["host"], overrides["port"]
    assert isinstance(host, str) and isinstance(port, int)
    [(_, _, _, _, address)] = socket.getaddrinfo(
        host, port, socket.AF_INET6, socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
    )
    assert len(address) == 4  # an IPv6 address: host, port, flow info, scope id
    assert address[0] == "fe80::1" and address[-1] == socket.if_nametoindex("lo")


def test_the_engine_hands_the_decoded_zone_to_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []

    async def refuse(
        self: object, factory: object, host: object = None, *a: object, **k: object
    ) -> object:
        asked.append(host)
        raise ConnectionRefusedError("refused by the test, nothing was sent")

    monkeypatch.setattr(asyncio.BaseEventLoop, "create_connection", refuse)

    async def main() -> None:
        target = AgentTarget(hosts.check_url("ws://[fe80::1%25lo]:8765/agent"))
        link = EngineLink(target, session_id="zone", agent="a")
        assert not await link.start()
        await link.close()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert asked == ["fe80::1%lo"]


def test_no_overrides_without_a_zone() -> None:
    assert hosts.check_url("ws://[::1]:8765").connect_overrides() == {}
    assert hosts.check_url("ws://127.0.0.1:8765").connect_overrides() == {}


@pytest.mark.parametrize(
    "url",
    [
        f"ws://127.0.0.1:8765/agent?token={SECRET}",
        f"wss://agent.example/agent?tok%65n={SECRET}",
        f"ws://[fe80::1%25eth0]:8765/?a=1&token={SECRET}",
    ],
)
def test_no_repr_in_hosts_shows_the_query(url: str) -> None:
    checked = hosts.check_url(url)
    assert SECRET not in repr(checked) and SECRET not in str(checked)
    assert SECRET not in repr(hosts._parse(url))
    assert checked.url == url  # still there for the connector


def test_no_repr_of_an_agent_target_or_config_shows_the_query() -> None:
    target = AgentTarget(hosts.check_url(f"ws://127.0.0.1:8765/agent?token={SECRET}"), SECRET)
    config = AgentLinkConfig(target, {"billing": target})
    assert SECRET not in repr(target) and SECRET not in repr(config)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"< GET /voice/ws/s1?tok%65n={SECRET} HTTP/1.1", "< GET /voice/ws/s1?[redacted] HTTP/1.1"),
        (f"> GET /agent?x=1&{SECRET} HTTP/1.1", "> GET /agent?[redacted] HTTP/1.1"),
        (f"> Authorization: Bearer {SECRET}", "> Authorization: [redacted]"),
        (f"< cookie: sid={SECRET}", "< cookie: [redacted]"),
        ("what? nothing", "what? nothing"),
    ],
)
def test_redact_drops_every_query_and_credential_header(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_neither_server_nor_client_debug_log_holds_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_redaction()
    client_logger = redacting_logger("voxwire.test.websockets.client")

    async def handler(ws: ServerConnection) -> None:
        await ws.send("hi")

    async def main() -> None:
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            url = f"ws://127.0.0.1:{port}/voice/ws/s1?tok%65n={SECRET}"
            async with connect(
                url,
                additional_headers={"Authorization": f"Bearer {SECRET}"},
                logger=client_logger,
                compression=None,
            ) as ws:
                assert await ws.recv() == "hi"

    with caplog.at_level(logging.DEBUG):
        asyncio.run(asyncio.wait_for(main(), 10))
    server_lines = [r.getMessage() for r in caplog.records if r.name == "websockets.server"]
    client_lines = [r.getMessage() for r in caplog.records if r.name == client_logger.name]
    assert any("GET /voice/ws/s1?[redacted] HTTP/1.1" in line for line in server_lines)
    assert any("GET /voice/ws/s1?[redacted] HTTP/1.1" in line for line in client_lines)
    assert SECRET not in caplog.text


# Loopback: one rule (hosts.is_loopback, tests/test_hosts.py has its table), both servers.


def test_both_servers_judge_loopback_with_the_one_rule() -> None:
    assert agent.is_loopback is gateway.is_loopback is hosts.is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])  # bindable here
@aio
async def test_both_servers_listening_on_a_loopback_host_say_so(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "voxwire")

    async def call(session: AgentSession) -> None:
        pass

    async def ovp(session: GatewaySession) -> None:
        pass

    async with (
        AgentServer(call, token=None, host=host) as server,
        Gateway(ovp, secret="s" * 32, host=host) as ovp_gateway,
    ):
        urls = [server.url, ovp_gateway.url]
    said = [r.getMessage() for r in caplog.records]
    assert [line for line in said if "only)" in line or "beyond this machine" in line] == [
        f"brisvox agent listening on {urls[0]} (loopback only)",
        f"OVP gateway listening on {urls[1]} (loopback only)",
    ]
