"""A fault-injecting TCP proxy for the fault tests of both protocols, on loopback only.

Between a client and a server it forwards bytes both ways and, on demand, delays them, swallows
them (blackhole), stops reading them so that TCP backpressure reaches the sender (stall),
resets every connection (RST), cuts the next server chunk short and resets (truncate), or resets
new connections at once (refuse).

```text
async with FaultProxy(server.port) as proxy:   # clients connect to proxy.url
    proxy.reset()                              # every open connection gets an RST
```
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field

__all__ = ["FaultProxy"]

_CHUNK = 65536
_STALLED_BUFFER = 4096
_LINGER_RESET = struct.pack("ii", 1, 0)  # close() then sends an RST


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    blackholed: bool = False
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.client, self.server):
            sock = writer.get_extra_info("socket")
            if sock is not None:
                # A socket a fault already closed has no descriptor left to set.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            writer.transport.abort()


class FaultProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port`` with injected faults."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.delay = 0.0
        """Seconds each chunk waits before it is forwarded (order is kept)."""
        self.refuse = False
        """Reset new connections at once."""
        self.accepted = 0
        """Connections accepted so far."""
        self._truncate: int | None = None
        self._pairs: set[_Pair] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.reset()
        if self._server is not None:
            await self._server.wait_closed()

    def reset(self) -> None:
        """Send an RST both ways on every open connection."""
        for pair in list(self._pairs):
            pair.reset()

    def blackhole(self) -> None:
        """Swallow everything the open connections carry from now on (new ones pass)."""
        for pair in self._pairs:
            pair.blackholed = True

    def stall(self) -> None:
        """Stop reading from the open connections (new ones pass): a peer that stops reading."""
        for pair in self._pairs:
            pair.flowing.clear()
            for writer in (pair.client, pair.server):
                sock = writer.get_extra_info("socket")
                if sock is not None:  # the kernel stops taking more than a little
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _STALLED_BUFFER)

    def truncate(self, keep: int) -> None:
        """Forward only ``keep`` bytes of the next server chunk, then reset its connection."""
        self._truncate = keep

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refuse:
            _Pair(writer, writer).reset()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            _Pair(writer, writer).reset()
            return
        pair = _Pair(writer, up_writer)
        pair.flowing.set()
        self._pairs.add(pair)
        pair.tasks = [
            asyncio.create_task(self._pump(pair, reader, up_writer, downstream=False)),
            asyncio.create_task(self._pump(pair, up_reader, writer, downstream=True)),
        ]
        await asyncio.gather(*pair.tasks, return_exceptions=True)
        self._pairs.discard(pair)

    async def _pump(
        self,
        pair: _Pair,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        downstream: bool,
    ) -> None:
        try:
            while (await pair.flowing.wait()) and (chunk := await reader.read(_CHUNK)):
                if pair.blackholed:
                    continue
                if self.delay:
                    await asyncio.sleep(self.delay)
                if downstream and self._truncate is not None:
                    keep, self._truncate = self._truncate, None
                    writer.write(chunk[:keep])
                    await writer.drain()
                    pair.reset()
                    return
                writer.write(chunk)
                await writer.drain()
            if writer.can_write_eof():  # an orderly close goes on as a half-close
                writer.write_eof()
        except (ConnectionError, OSError):
            pair.reset()
