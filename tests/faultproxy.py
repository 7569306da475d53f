"""A small fault-injecting TCP proxy for the link's fault tests: loopback only, bounded.

New connections are forwarded as they are; faults apply to the connections open now:
``delay`` (seconds added to every chunk), ``blackhole()`` (nothing forwarded, nothing closed: no
FIN), ``reset()`` (RST both ways), ``truncate(n)`` (the next chunk toward the client is cut to
``n`` bytes, then both sides are closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

MAX_CONNECTIONS = 64


class _Pipe:
    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream
        self.blackholed = False
        self.truncate_at: int | None = None
        self.tasks: list[asyncio.Task[None]] = []


class FaultProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target``."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.delay = 0.0
        self.connections = 0
        self._pipes: list[_Pipe] = []
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.reset()
        for pipe in self._pipes:
            for task in pipe.tasks:
                task.cancel()
        await asyncio.gather(*(t for p in self._pipes for t in p.tasks), return_exceptions=True)
        await self._server.wait_closed()

    def blackhole(self) -> None:
        """Stop forwarding on the open connections, without closing them."""
        for pipe in self._pipes:
            pipe.blackholed = True

    def reset(self) -> None:
        """Reset the open connections (RST, no FIN)."""
        for pipe in self._pipes:
            for writer in (pipe.client, pipe.upstream):
                _abort(writer)
        self._pipes.clear()

    def truncate(self, size: int) -> None:
        """Cut the next chunk toward the client after ``size`` bytes and close."""
        for pipe in self._pipes:
            pipe.truncate_at = size

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._pipes) >= MAX_CONNECTIONS:
            _abort(writer)
            return
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        pipe = _Pipe(writer, up_writer)
        self._pipes.append(pipe)
        pipe.tasks = [
            asyncio.ensure_future(self._pump(reader, up_writer, pipe, toward_client=False)),
            asyncio.ensure_future(self._pump(up_reader, writer, pipe, toward_client=True)),
        ]

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pipe: _Pipe,
        *,
        toward_client: bool,
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while chunk := await reader.read(65536):
                if self.delay:
                    await asyncio.sleep(self.delay)
                if pipe.blackholed:
                    continue
                if toward_client and pipe.truncate_at is not None:
                    writer.write(chunk[: pipe.truncate_at])
                    await writer.drain()
                    pipe.client.close()
                    pipe.upstream.close()
                    return
                writer.write(chunk)
                await writer.drain()
            if not pipe.blackholed:
                writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
