"""``/healthz``, ``/readyz`` and ``/metrics`` on both servers' own ports, over real loopback sockets."""

from __future__ import annotations

import asyncio

import pytest

from voxwire.brisvox.agent import AgentServer
from voxwire.observe.endpoints import Endpoints
from voxwire.ovp.gateway import Gateway

SECRET = "s" * 32


async def http_get(port: int, path: str, **headers: str) -> tuple[int, bytes, dict[str, str]]:
    """One plain HTTP/1.1 GET, as a balancer's probe sends it: status, body, headers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    fields = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), body, fields


async def _probe(port: int, endpoints: Endpoints) -> None:
    status, body, _ = await http_get(port, "/healthz")
    assert (status, body) == (200, b"ok\n")
    status, _, _ = await http_get(port, "/readyz?verbose=1")
    assert status == 200
    endpoints.ready = False
    status, body, _ = await http_get(port, "/readyz")
    assert (status, body) == (503, b"draining\n")
    assert (await http_get(port, "/healthz"))[0] == 200
    assert (await http_get(port, "/metrics"))[0] == 200  # the server's own metrics
    endpoints.metrics = None
    assert (await http_get(port, "/metrics"))[0] == 404
    endpoints.metrics = lambda: (b"voxwire_up 1\n", "text/plain; version=0.0.4")
    status, body, fields = await http_get(port, "/metrics")
    assert (status, body) == (200, b"voxwire_up 1\n")
    assert fields["content-type"] == "text/plain; version=0.0.4"
    assert fields["content-length"] == str(len(body))


def test_the_gateway_answers_its_probes_on_its_own_port() -> None:
    async def main() -> None:
        async with Gateway(lambda session: asyncio.sleep(0), secret=SECRET) as gateway:
            await _probe(gateway.port, gateway.endpoints)
            # Any other path is still the gateway's to refuse.
            assert (await http_get(gateway.port, "/elsewhere"))[0] == 404

    asyncio.run(asyncio.wait_for(main(), 20))


@pytest.mark.parametrize("token", [None, "t0ken"])
def test_the_agent_server_answers_its_probes_without_a_token(token: str | None) -> None:
    """A probe carries no bearer token; the engine's upgrade still needs one."""

    async def main() -> None:
        async with AgentServer(lambda session: asyncio.sleep(0), token=token) as server:
            await _probe(server.port, server.endpoints)
            if token is not None:
                assert (await http_get(server.port, "/"))[0] == 401

    asyncio.run(asyncio.wait_for(main(), 20))
