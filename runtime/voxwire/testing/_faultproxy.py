"""A loopback TCP proxy that breaks a link as a network does: the fakes' relay, and the fault
tests' proxy.

Between a client and a server it forwards bytes both ways and, on demand, resets every
connection it carries, both ways, so both ends see a dropped link with no close handshake
(:meth:`FaultProxy.reset`); resets new connections at once while ``refuse`` is set; delays what
it forwards (``delay``); swallows it (:meth:`FaultProxy.blackhole`); stops reading, so that TCP
backpressure reaches the sender (:meth:`FaultProxy.stall`); or cuts the next chunk from the
server short and resets (:meth:`FaultProxy.truncate`). A fake puts one between the code under
test and the real role it drives, and points it at a restarted role (``target_port``).

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
from typing import Final

from voxwire.clock import SYSTEM_CLOCK, Clock

__all__ = ["FaultProxy"]

_CHUNK: Final = 65536
_STALLED_BUFFER: Final = 4096
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


@dataclass(eq=False)
class _Pair:
    """One connection carried: the end that connected to the proxy, and the proxy's upstream."""

    near: asyncio.StreamWriter
    far: asyncio.StreamWriter
    blackholed: bool = False
    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.near, self.far):
            sock = writer.get_extra_info("socket")
            if sock is not None:  # a socket already closed has no descriptor to set
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            writer.transport.abort()
        self.flowing.set()  # a stalled pump wakes to find its connection gone


class FaultProxy:
    """Forwards ``127.0.0.1:port`` (a free port) to ``host:target_port``, with faults; a
    ``delay`` is waited on ``clock``."""

    def __init__(
        self, target_port: int, *, host: str = "127.0.0.1", clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.host = host
        self.clock = clock
        self.target_port = target_port
        """Where new connections go (a fake points it at a restarted role)."""
        self.port = 0
        """The port the proxy listens on, once started."""
        self.delay = 0.0
        """Seconds each chunk waits before it is forwarded (order is kept)."""
        self.refuse = False
        """Reset new connections at once (the target is unreachable) while set."""
        self.accepted = 0
        """Connections accepted so far."""
        self._truncate: int | None = None
        self._pairs: set[_Pair] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        """``ws://`` and the proxy's address."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """Connections carried now."""
        return len(self._pairs)

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
        pumps = [pump for pair in self._pairs for pump in pair.pumps]
        self.reset()
        await asyncio.gather(*pumps, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def reset(self) -> int:
        """Send an RST both ways on every open connection; how many there were."""
        pairs = list(self._pairs)
        for pair in pairs:
            pair.reset()
        return len(pairs)

    def blackhole(self) -> None:
        """Swallow everything the open connections carry from now on (new ones pass)."""
        for pair in self._pairs:
            pair.blackholed = True

    def stall(self) -> None:
        """Stop reading from the open connections (new ones pass): a peer that stops reading."""
        for pair in self._pairs:
            pair.flowing.clear()
            for writer in (pair.near, pair.far):
                sock = writer.get_extra_info("socket")
                if sock is not None:  # the kernel stops taking more than a little
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _STALLED_BUFFER)

    def truncate(self, keep: int) -> None:
        """Forward only ``keep`` bytes of the next server chunk, then reset its connection."""
        self._truncate = keep

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refuse:
            _Pair(writer, writer).reset()
            return
        try:
            far_reader, far_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            _Pair(writer, writer).reset()
            return
        pair = _Pair(writer, far_writer)
        pair.flowing.set()
        self._pairs.add(pair)
        pair.pumps = [
            asyncio.ensure_future(self._pump(pair, reader, far_writer, downstream=False)),
            asyncio.ensure_future(self._pump(pair, far_reader, writer, downstream=True)),
        ]
        try:
            await asyncio.gather(*pair.pumps, return_exceptions=True)
        finally:
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
                    await self.clock.sleep(self.delay)
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
