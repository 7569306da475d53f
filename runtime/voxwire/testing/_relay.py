"""The fakes' loopback relay: forwards TCP to a role, so a fake can cut a link as a network does.

A fake puts one between the code under test and the real role it drives: the code under test
connects to the relay (or the fake's role connects through it), and :meth:`Relay.cut` resets
every connection it carries, both ways, so both ends see a dropped link (no close handshake).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Relay"]

_CHUNK: Final = 65536
_RESET: Final = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


@dataclass(eq=False)
class _Pair:
    """One connection carried: the end that connected to the relay, and the relay's upstream."""

    near: asyncio.StreamWriter
    far: asyncio.StreamWriter
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.near, self.far):
            sock = writer.get_extra_info("socket")
            if sock is not None:  # a socket already closed has no descriptor to set
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
            writer.transport.abort()


class Relay:
    """Forwards ``127.0.0.1:port`` (a free port) to ``host:target_port``."""

    def __init__(self, host: str, target_port: int) -> None:
        self.host = host
        self.target_port = target_port
        """Where new connections go (a fake points it at a restarted role)."""
        self.port = 0
        """The port the relay listens on, once started."""
        self.refusing = False
        """Reset new connections at once (the role is unreachable) while set."""
        self.accepted = 0
        """Connections accepted so far."""
        self._pairs: set[_Pair] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        pumps = [pump for pair in self._pairs for pump in pair.pumps]
        self.cut()
        await asyncio.gather(*pumps, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def cut(self) -> int:
        """Reset every connection carried now, both ways; how many there were."""
        pairs = list(self._pairs)
        for pair in pairs:
            pair.reset()
        return len(pairs)

    @property
    def carried(self) -> int:
        """Connections carried now."""
        return len(self._pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            _Pair(writer, writer).reset()
            return
        try:
            far_reader, far_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            _Pair(writer, writer).reset()
            return
        pair = _Pair(writer, far_writer)
        self._pairs.add(pair)
        pair.pumps = [
            asyncio.ensure_future(_pump(pair, reader, far_writer)),
            asyncio.ensure_future(_pump(pair, far_reader, writer)),
        ]
        try:
            await asyncio.gather(*pair.pumps, return_exceptions=True)
        finally:
            self._pairs.discard(pair)


async def _pump(pair: _Pair, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():  # an orderly close goes on as a half-close
            writer.write_eof()
    except (ConnectionError, OSError):
        pair.reset()
