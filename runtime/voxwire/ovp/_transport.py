"""What the OVP client and gateway share on ``websockets``: limits, the link writer, redaction.

Not public: :mod:`voxwire.ovp.client` and :mod:`voxwire.ovp.gateway` are.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Callable
from typing import Final, Generic, TypeVar

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed

from voxwire.clock import Clock
from voxwire.ovp import MAX_MESSAGE_BYTES
from voxwire.sansio import Action, Close, SendText

__all__ = [
    "MAX_FRAME_SIZE",
    "WRITE_QUEUE",
    "Inbox",
    "LinkWriter",
    "TokenRedactingFilter",
    "install_token_redaction",
    "redact_tokens",
]

MAX_FRAME_SIZE: Final = 4 * MAX_MESSAGE_BYTES
"""The ``max_size`` of both ends. A text message up to this size is read so the codec can answer
one over ``max_message_bytes`` as the spec says (dropped, ``OVP_EVENT_SCHEMA_INVALID``); a larger
one closes the connection with 1009."""

WRITE_QUEUE: Final = 1024
"""Messages a link may have waiting to be written; past that the peer is too slow and the link
is dropped (a resume can still replay the events)."""

T = TypeVar("T")

_TOKEN_PARAMETER: Final = re.compile(r"(?i)(token=)[^&\s'\"#]+")
_JWT: Final = re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_REDACTED: Final = "[redacted]"
_WEBSOCKETS_LOGGERS: Final = ("websockets", "websockets.client", "websockets.server")


def redact_tokens(text: str) -> str:
    """``text`` with every ``token=`` query value and every JWT replaced by ``[redacted]``."""
    return _JWT.sub(_REDACTED, _TOKEN_PARAMETER.sub(rf"\1{_REDACTED}", text))


class TokenRedactingFilter(logging.Filter):
    """Rewrites a record's message and traceback so that no token survives in them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_tokens(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_tokens(logging.Formatter().formatException(record.exc_info))
        return True


def install_token_redaction() -> None:
    """Put one :class:`TokenRedactingFilter` on each ``websockets`` logger; idempotent.

    ``websockets`` logs the request path, query included, at DEBUG.
    """
    for name in _WEBSOCKETS_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TokenRedactingFilter) for f in logger.filters):
            logger.addFilter(TokenRedactingFilter())


class LinkWriter:
    """Writes one connection's actions in the order they were posted, from one task.

    :meth:`post` never waits: the core's actions go into a bounded queue, so what a core
    returned first is written first, whatever task posts next. What is queued when the writer
    wakes must be written within ``write_timeout`` (clock seconds), all of it: a slower drain,
    or a queue that overflows, aborts the connection, and its reader then sees it drop.
    ``record`` is called with each message as it is written, ``written`` after each drain with
    the number of text messages it wrote.
    """

    def __init__(
        self,
        ws: Connection,
        clock: Clock,
        *,
        write_timeout: float,
        record: Callable[[str | bytes], None] | None = None,
        written: Callable[[int], None] | None = None,
    ) -> None:
        self.ws = ws
        self._record = record
        self._written = written
        self._timeout = clock.real_seconds(write_timeout)
        self._pending: deque[Action] = deque()
        self._ready = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def post(self, action: Action) -> None:
        """Queue ``action``; a full queue aborts the link."""
        if len(self._pending) >= WRITE_QUEUE:
            self.abort()
            return
        self._pending.append(action)
        self._ready.set()

    def abort(self) -> None:
        """Drop the TCP connection at once (no closing handshake)."""
        self.ws.transport.abort()

    async def stop(self) -> None:
        """Stop writing; what is still queued is dropped."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def wait_done(self) -> None:
        """Wait until a posted :class:`~voxwire.sansio.Close` was performed or the link died."""
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        ws, pending, ready = self.ws, self._pending, self._ready
        try:
            while True:
                await ready.wait()
                ready.clear()
                # Everything queued by now is written within one write_timeout.
                texts = 0
                async with asyncio.timeout(self._timeout):
                    while pending:
                        action = pending.popleft()
                        if isinstance(action, Close):
                            await ws.close(action.code, action.reason)
                            return
                        data = action.data.decode() if isinstance(action, SendText) else action.data
                        if self._record is not None:
                            self._record(data)
                        await ws.send(data)
                        texts += isinstance(data, str)
                if texts and self._written is not None:
                    self._written(texts)
        except TimeoutError:
            self.abort()
        except ConnectionClosed:
            return


class Inbox(Generic[T]):
    """A bounded queue from the reader to the application that never makes the reader wait.

    An item that finds it full is dropped and counted (``lost``); :meth:`close` ends it once what
    it holds is taken.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.lost = 0
        self.closed = False
        self._items: deque[T] = deque()
        self._ready = asyncio.Event()

    def put(self, item: T) -> bool:
        """Add ``item``; ``False`` (and counted in ``lost``) when the inbox is full or closed."""
        if self.closed or len(self._items) >= self.maxsize:
            self.lost += 1
            return False
        self._items.append(item)
        self._ready.set()
        return True

    def close(self) -> None:
        """No more items: :meth:`get` raises ``StopAsyncIteration`` once the inbox is empty."""
        self.closed = True
        self._ready.set()

    async def get(self) -> T:
        """The oldest item; ``StopAsyncIteration`` once closed and empty."""
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            self._ready.clear()
            await self._ready.wait()
        return self._items.popleft()
