"""Raw JSON frames for driving an agent without the engine side (and an engine without the agent
side), and the async test runner."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Coroutine
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve

from voxwire import brisvox

DEADLINE = 5.0
"""Real seconds any single wait in a test may take."""

TEST_DEADLINE = 30.0
"""Real seconds a whole async test may take."""


def aio(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop, bounded by ``TEST_DEADLINE``."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async def bounded() -> None:
            async with asyncio.timeout(TEST_DEADLINE):
                await test(*args, **kwargs)

        asyncio.run(bounded())

    return run


def start(seq: int = 1, session_id: str = "42", **extra: Any) -> str:
    """A session.start as JSON text (extra fields merged in, ``None`` removes one)."""
    frame: dict[str, Any] = {
        "seq": seq,
        "t_ms": 0,
        "type": "session.start",
        "protocol": "brisvox.agent",
        "versions": [1],
        "session_id": session_id,
        "agent": "luigi",
        "capabilities": {"transfer": False, "tools": True},
    }
    frame.update(extra)
    return json.dumps({k: v for k, v in frame.items() if v is not None})


def frame(type_: str, seq: int, **body: Any) -> str:
    """Any server message as JSON text."""
    return json.dumps({"seq": seq, "t_ms": seq * 10, "type": type_, **body})


def tool_call(
    seq: int, request_id: int, name: str, kind: str = "read_only", **arguments: Any
) -> str:
    """A tool.call as JSON text."""
    return frame(
        "tool.call",
        seq,
        id=request_id,
        call_id=f"llm-{request_id}",
        name=name,
        arguments=arguments,
        kind=kind,
        epoch=1,
        idempotency_key="0123456789abcdef",
        timeout_ms=4000,
    )


class RawEngine:
    """A WebSocket client that speaks raw frames to an agent."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, url: str, token: str | None = None, **kwargs: Any) -> RawEngine:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ws = await connect(
            url,
            additional_headers=headers,
            compression=None,
            proxy=None,
            open_timeout=DEADLINE,
            **kwargs,
        )
        return cls(ws)

    async def send(self, text: str) -> None:
        await self.ws.send(text)

    async def recv(self) -> brisvox.AgentMessage:
        """The next agent message, decoded (bounded wait)."""
        async with asyncio.timeout(DEADLINE):
            data = await self.ws.recv()
        assert isinstance(data, str), f"the agent sent a binary frame: {data!r}"
        return brisvox.decode(data, "agent")

    async def handshake(self, text: str | None = None) -> brisvox.AgentMessage:
        await self.send(text or start())
        return await self.recv()

    async def closed(self) -> tuple[int | None, str | None]:
        """Wait for the agent to close; return the close code and reason."""
        async with asyncio.timeout(DEADLINE):
            await self.ws.wait_closed()
        received = self.ws.protocol.close_rcvd
        return (received.code, received.reason) if received else (None, None)

    async def close(self) -> None:
        async with asyncio.timeout(DEADLINE):
            await self.ws.close()


class RawAgent:
    """An agent written from the document, speaking raw frames: it accepts the first call with
    ``accept`` and records every message the engine sends (decoded as the server's)."""

    def __init__(self, accept: dict[str, Any] | None = None) -> None:
        self.accept = accept or {"type": "session.accept", "version": 1, "tools": []}
        self.received: asyncio.Queue[brisvox.ServerMessage] = asyncio.Queue()
        self.ws: ServerConnection | None = None
        self._server: Server | None = None
        self._connected = asyncio.Event()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> RawAgent:
        self._server = await serve(self._handle, "127.0.0.1", 0, compression=None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, ws: ServerConnection) -> None:
        self.ws = ws
        self._connected.set()
        first = await ws.recv()
        await self.received.put(_server_message(first))
        await ws.send(json.dumps(self.accept))
        async for data in ws:
            await self.received.put(_server_message(data))

    async def send(self, text: str) -> None:
        """Send one raw frame on the current connection."""
        async with asyncio.timeout(DEADLINE):
            await self._connected.wait()
        assert self.ws is not None
        await self.ws.send(text)

    async def next(self, *types: str) -> brisvox.ServerMessage:
        """The next message of one of ``types`` (others are skipped; bounded wait)."""
        async with asyncio.timeout(DEADLINE):
            while True:
                message = await self.received.get()
                if not types or message.type in types:
                    return message


def _server_message(data: str | bytes) -> brisvox.ServerMessage:
    message = brisvox.decode(data, "server")
    assert not isinstance(message, brisvox.UnknownMessage), message
    return message
