"""Every outcome of the OVP upgrade, over real loopback sockets: subprotocol, path and token."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import warnings
from collections.abc import Callable
from typing import Any

import jwt
import pytest
import websockets
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tests.test_ovp_support import (
    SECRET,
    SESSION,
    TENANT,
    collecting,
    endpoint,
    next_event,
    raw_connect,
    run,
    serving,
    token,
)
from voxwire import ovp
from voxwire.hosts import InsecureURLError
from voxwire.ovp.client import VERIFIED_WEBSOCKETS, HandshakeError, OVPClient, SessionFailed
from voxwire.ovp.gateway import Gateway, GatewayConfigError, GatewaySession, mint_token

KEY = "dGhlIHNhbXBsZSBub25jZQ=="


async def raw_upgrade(
    port: int, path: str, protocols: str | None
) -> tuple[int, dict[str, str], bytes]:
    """Send an upgrade request by hand; the status, headers and body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {KEY}",
        "Sec-WebSocket-Version: 13",
    ]
    if protocols is not None:
        lines.append(f"Sec-WebSocket-Protocol: {protocols}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    status_line, *header_lines = head.strip().split("\r\n")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        assert name.lower() not in headers, f"repeated header {name}"
        headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    writer.close()
    return int(status_line.split()[1]), headers, body


async def nothing(session: GatewaySession) -> None:
    raise AssertionError("no session may start")


# ----------------------------------------------------------------------------- the subprotocol


def test_the_workaround_is_pinned_to_the_verified_websockets_versions() -> None:
    installed = tuple(int(part) for part in websockets.version.version.split(".")[:2])
    low, high = VERIFIED_WEBSOCKETS
    assert low <= installed < high, (
        f"websockets {websockets.version.version} is outside {low}..{high}: check the "
        "subprotocol workaround of voxwire.ovp.client against it, then widen the range"
    )
    # Why the workaround exists: websockets refuses the '/' both ways.
    from websockets.headers import parse_subprotocol, validate_subprotocols

    with pytest.raises(ValueError, match="invalid subprotocol"):
        validate_subprotocols([ovp.SUBPROTOCOL])  # type: ignore[list-item]
    with pytest.raises(websockets.exceptions.InvalidHeaderFormat):
        parse_subprotocol(ovp.SUBPROTOCOL)


def test_the_client_puts_exactly_orbit_voice_1_0_on_the_wire() -> None:
    requests: list[bytes] = []

    async def capture(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(capture, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = OVPClient(f"ws://127.0.0.1:{port}", SESSION, token())
            with pytest.raises(HandshakeError) as refused:
                await client.connect()
            assert refused.value.status == 403 and refused.value.code is None

    run(main())
    lines = requests[0].decode().split("\r\n")
    assert [line for line in lines if line.lower().startswith("sec-websocket-protocol")] == [
        "Sec-WebSocket-Protocol: orbit-voice/1.0"
    ]
    assert lines[0].startswith(f"GET /voice/ws/{SESSION}?token=")


@pytest.mark.parametrize(
    "offered", ["orbit-voice/1.0", "chat, orbit-voice/1.0", "orbit-voice/1.0 , superchat"]
)
def test_the_gateway_selects_orbit_voice_1_0_exactly(offered: str) -> None:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serving(collecting([])) as gateway:
            path = f"/voice/ws/{SESSION}?token={token()}"
            return await raw_upgrade(gateway.port, path, offered)

    status, headers, _ = run(main())
    assert status == 101 and headers["sec-websocket-protocol"] == "orbit-voice/1.0"


@pytest.mark.parametrize(
    "offered", [None, "", "orbit-voice", "orbit-voice/2.0", "Orbit-Voice/1.0", "chat"]
)
def test_a_missing_or_wrong_subprotocol_gets_http_400_before_the_token(offered: str | None) -> None:
    async def main() -> tuple[int, dict[str, str], bytes]:
        async with serving(nothing) as gateway:
            path = f"/voice/ws/{SESSION}?token=not-even-a-jwt"
            return await raw_upgrade(gateway.port, path, offered)

    status, headers, body = run(main())
    assert status == 400 and headers["content-type"] == "application/json"
    answer = json.loads(body)
    assert answer["code"] == "OVP_SUBPROTOCOL_MISMATCH" and "orbit-voice/1.0" in answer["message"]


@pytest.mark.parametrize(
    "path",
    ["/voice/ws/", "/voice/ws/a%2Fb", "/voice/ws/a/b", "/other/ovps_1", "/voice/ws/" + "x" * 129],
)
def test_a_path_that_is_no_session_endpoint_gets_404(path: str) -> None:
    async def main() -> int:
        async with serving(nothing) as gateway:
            return (await raw_upgrade(gateway.port, f"{path}?token=x", "orbit-voice/1.0"))[0]

    assert run(main()) == 404


def test_the_client_reports_the_gateways_400() -> None:
    async def main() -> None:
        async with serving(nothing) as gateway:
            # A gateway that does not see orbit-voice/1.0 answers 400; emulate it by a proxy-less
            # request from websockets itself, which offers nothing.
            from websockets.asyncio.client import connect

            with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
                await connect(endpoint(gateway), open_timeout=5)
            body = json.loads(refused.value.response.body)
            assert body["code"] == "OVP_SUBPROTOCOL_MISMATCH"

    run(main())


def echoing(selected: str | None) -> Callable[[ServerConnection, Request, Response], None]:
    def process_response(
        connection: ServerConnection, request: Request, response: Response
    ) -> None:
        if selected is not None:
            response.headers["Sec-WebSocket-Protocol"] = selected

    return process_response


def accept_any(connection: ServerConnection, request: Request) -> None:
    del request.headers["Sec-WebSocket-Protocol"]  # websockets cannot parse the '/'


@pytest.mark.parametrize("selected", [None, "orbit-voice/2.0", "orbit-voice/1.0, chat"])
def test_the_client_aborts_when_the_server_does_not_echo_the_subprotocol(
    selected: str | None,
) -> None:
    async def main() -> None:
        async def handler(ws: ServerConnection) -> None:
            await ws.send("{}")

        async with serve(
            handler, "127.0.0.1", 0, process_request=accept_any, process_response=echoing(selected)
        ) as server:
            port = server.sockets[0].getsockname()[1]
            client = OVPClient(f"ws://127.0.0.1:{port}", SESSION, token())
            with pytest.raises(HandshakeError) as refused:
                await client.connect()
            assert refused.value.code == "OVP_SUBPROTOCOL_MISMATCH"
            assert refused.value.status == 101

    run(main())


# ----------------------------------------------------------------------------- the token


def unsigned(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {"tenant_id": TENANT, "session_id": SESSION, "iat": now, "exp": now + 60}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def hs512(payload: dict[str, Any]) -> str:
    with warnings.catch_warnings():  # the test secret is short for HS512; no matter here
        warnings.simplefilter("ignore")
        return jwt.encode(payload, SECRET, algorithm="HS512")


BAD_TOKENS: dict[str, tuple[str, Callable[[], str]]] = {
    "bad signature": (
        "signature does not verify",
        lambda: mint_token(
            "another-secret-that-is-long-enough!!", session_id=SESSION, tenant_id=TENANT
        ),
    ),
    "expired": ("token expired", lambda: token(now=time.time() - 400)),
    "too long-lived": ("at most 300 s", lambda: token(lifetime_s=301)),
    "issued in the future": ("issued in the future", lambda: token(now=time.time() + 120)),
    "alg none": ("not HS256", lambda: unsigned(claims())),
    "other algorithm": ("not HS256", lambda: hs512(claims())),
    "wrong session": ("another session", lambda: token(session_id="ovps_other")),
    "missing tenant_id": (
        "lacks the tenant_id claim",
        lambda: jwt.encode(claims(tenant_id=None), SECRET, algorithm="HS256"),
    ),
    "missing session_id": (
        "lacks the session_id claim",
        lambda: jwt.encode(claims(session_id=None), SECRET, algorithm="HS256"),
    ),
    "missing exp": (
        "lacks the exp claim",
        lambda: jwt.encode(claims(exp=None), SECRET, algorithm="HS256"),
    ),
    "missing iat": (
        "lacks the iat claim",
        lambda: jwt.encode(claims(iat=None), SECRET, algorithm="HS256"),
    ),
    "empty tenant_id": (
        "tenant_id is not a non-empty string",
        lambda: jwt.encode(claims(tenant_id=""), SECRET, algorithm="HS256"),
    ),
    "malformed": ("malformed token", lambda: "abc.def"),
    "missing": ("token missing", lambda: ""),
}


@pytest.mark.parametrize("case", sorted(BAD_TOKENS))
def test_a_bad_token_gets_the_handshake_then_auth_failed_and_1008(case: str) -> None:
    reason, make = BAD_TOKENS[case]
    bad = make()

    async def main() -> tuple[dict[str, Any], int | None]:
        async with serving(nothing) as gateway:
            url = endpoint(gateway, tok=bad) if bad else f"{gateway.url}/voice/ws/{SESSION}"
            ws = await raw_connect(url)  # the handshake completes
            assert ws.subprotocol == "orbit-voice/1.0"
            error = await next_event(ws)
            with pytest.raises(ConnectionClosed):
                await next_event(ws)  # nothing else: no session.start, no session.end
            assert gateway.sessions == {}
            return error, ws.close_code

    error, close_code = run(main())
    assert close_code == 1008
    assert error["type"] == "error" and error["code"] == "OVP_AUTH_FAILED"
    assert error["seq"] == 0 and error["session_id"] == SESSION and error["recoverable"] is False
    assert reason in error["message"]


def test_a_token_of_another_tenant_cannot_join_a_session() -> None:
    async def main() -> str:
        async with serving(collecting([])) as gateway:
            first = OVPClient(gateway.url, SESSION, token())
            await first.connect()
            ws = await raw_connect(endpoint(gateway, tok=token(tenant_id="tenant_2")))
            error = await next_event(ws)
            await first.close()
            return str(error["code"])

    assert run(main()) == "OVP_AUTH_FAILED"


def test_the_client_reports_auth_failed() -> None:
    async def main() -> None:
        async with serving(nothing) as gateway:
            client = OVPClient(gateway.url, SESSION, token(lifetime_s=600))
            with pytest.raises(SessionFailed) as failed:
                await client.connect()
            assert failed.value.code == "OVP_AUTH_FAILED" and "300" in failed.value.detail
            assert client.over is not None and client.session_start is None

    run(main())


def test_a_good_token_starts_the_session() -> None:
    async def main() -> None:
        async with serving(collecting([])) as gateway:
            client = OVPClient(gateway.url, SESSION, token())
            start = await client.connect()
            assert start.seq == 0 and start.session_id == SESSION
            session = gateway.sessions[SESSION]
            assert session.claims.tenant_id == TENANT and "tenant_id" in session.claims.claims
            await client.close()

    run(main())


def test_a_short_secret_refuses_to_start() -> None:
    with pytest.raises(GatewayConfigError, match="31 bytes"):
        Gateway(nothing, secret="x" * 31)
    with pytest.raises(GatewayConfigError):
        mint_token(b"short", session_id=SESSION, tenant_id=TENANT)
    Gateway(nothing, secret=b"\0" * 32)


# ----------------------------------------------------------------------------- the client's URL


def test_the_client_refuses_plaintext_to_a_public_host() -> None:
    with pytest.raises(InsecureURLError, match="plaintext"):
        OVPClient("ws://voice.example.com", SESSION, "t0k3n")
    OVPClient("ws://voice.example.com", SESSION, "t0k3n", allow_insecure=True)
    OVPClient("wss://voice.example.com", SESSION, "t0k3n")
    OVPClient("ws://10.1.2.3:8080", SESSION, "t0k3n")
    OVPClient("ws://localhost:8080/", SESSION, "t0k3n")


def test_the_client_refuses_a_bad_base_url_or_session_id() -> None:
    with pytest.raises(ValueError, match="no query"):
        OVPClient("wss://voice.example.com/?token=x", SESSION, "t0k3n")
    with pytest.raises(ValueError, match="not an OVP session id"):
        OVPClient("wss://voice.example.com", "a/b", "t0k3n")


def test_no_token_in_reprs_or_handshake_errors() -> None:
    secret_token = token()

    async def main() -> None:
        async def handler(ws: ServerConnection) -> None:
            await ws.send("{}")

        async with serve(handler, "127.0.0.1", 0, process_request=accept_any) as server:
            port = server.sockets[0].getsockname()[1]
            client = OVPClient(f"ws://127.0.0.1:{port}", SESSION, secret_token)
            assert secret_token not in repr(client)
            with pytest.raises(HandshakeError) as refused:
                await client.connect()
            assert secret_token not in str(refused.value) + repr(refused.value)
            assert refused.value.__context__ is None and refused.value.__cause__ is None
        closed = OVPClient(f"ws://127.0.0.1:{port}", SESSION, secret_token)
        with pytest.raises(ConnectionError) as unreachable:
            await closed.connect()
        assert secret_token not in str(unreachable.value)

    run(main())
