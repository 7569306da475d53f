"""The one handler registry of every role: what ``on(message_type, handler)`` does, in both
protocols (the semantics are stated once, in :mod:`voxwire.session`).

```python
import logging

from voxwire.session import Handlers

handlers = Handlers("call-1", logging.getLogger("example"))
seen: list[str] = []
handlers.add("user.text", seen.append)
assert handlers.dispatch("user.text", "hello") and seen == ["hello"]
assert not handlers.dispatch("user.transcript", "unheard")  # no handler: the caller keeps it
```

A role's reader calls :meth:`Handlers.dispatch` with each message it read; a message with no
handler costs one dictionary look-up (``message.type in handlers.types``), which the adapters
make inline before they call anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Handler", "HandlerFailure", "Handlers", "watch_handler_failures"]

Handler = Callable[[Any], object]
"""Called with each message of its type; may return an awaitable, run as a task."""


@dataclass(frozen=True, slots=True)
class HandlerFailure:
    """A handler raised: which session, which message type, what."""

    session_id: str
    message_type: str
    error: BaseException

    def __str__(self) -> str:
        return (
            f"session {self.session_id}: a {self.message_type} handler raised "
            f"{type(self.error).__name__}: {self.error}"
        )


_watchers: list[Callable[[HandlerFailure], None]] = []


@contextlib.contextmanager
def watch_handler_failures(on_failure: Callable[[HandlerFailure], None]) -> Iterator[None]:
    """Call ``on_failure`` with every handler failure of any session of this process while the
    block runs: how a test harness (:mod:`voxwire.brisvox.testing`) fails with the handler's
    exception rather than waiting for a message that will never come."""
    _watchers.append(on_failure)
    try:
        yield
    finally:
        _watchers.remove(on_failure)


class Handlers:
    """One session's handlers, by message type.

    Args:
        session_id: The session the logs and failures name.
        log: The role's logger (the failures are logged there, at ERROR, with the traceback).
        refusal: An exception class a handler raises on purpose to refuse what it was given (the
            engine side's ``CommandFailed``): handed to ``done``, neither logged nor counted.
        tasks: Where the tasks of async handlers are tracked (the role's own set, cancelled or
            awaited as it closes); a set of the registry's own by default.
    """

    __slots__ = ("errors", "log", "refusal", "session_id", "tasks", "types")

    def __init__(
        self,
        session_id: str,
        log: logging.Logger,
        *,
        refusal: type[Exception] | None = None,
        tasks: set[asyncio.Task[Any]] | None = None,
    ) -> None:
        self.session_id = session_id
        self.log = log
        self.refusal = refusal
        self.types: dict[str, list[Handler]] = {}
        """The handlers of each message type that has one."""
        self.errors = 0
        """How many times a handler raised (sync or async; a refusal does not count)."""
        self.tasks: set[asyncio.Task[Any]] = set() if tasks is None else tasks

    def add(self, message_type: str, handler: Handler) -> None:
        """Register ``handler`` for ``message_type`` (the typed ``on()`` checked the type)."""
        self.types.setdefault(message_type, []).append(handler)

    def dispatch(
        self,
        message_type: str,
        message: object,
        done: Callable[[BaseException | None], None] | None = None,
    ) -> bool:
        """Run the handlers of ``message_type`` with ``message``, in the order they were added:
        a plain one now, an async one as a task started now. Whether it has any.

        ``done``, when given, is called once every handler finished, with the first exception
        one raised (None when none did); not when a handler's task was cancelled.
        """
        handlers = self.types.get(message_type)
        if handlers is None:
            return False
        error: BaseException | None = None
        running: list[asyncio.Task[Any]] = []
        for handler in handlers:
            try:
                result = handler(message)
            except Exception as exc:
                self._failed(message_type, exc)
                error = error or exc
                continue
            if result is not None and inspect.isawaitable(result):
                running.append(self._start(result, message_type))
        if done is not None:
            if running:
                self._track(self._then(running, error, done), f"{message_type} handlers' answer")
            else:
                done(error)
        return True

    def cancel(self) -> None:
        """Cancel the handlers' tasks still running (the session is over)."""
        for task in list(self.tasks):
            task.cancel()

    def _start(self, awaitable: Awaitable[object], message_type: str) -> asyncio.Task[Any]:
        task = self._track(_awaited(awaitable), f"{message_type} handler")

        def finished(task: asyncio.Task[Any]) -> None:
            if not task.cancelled() and (exc := task.exception()) is not None:
                self._failed(message_type, exc)

        task.add_done_callback(finished)
        return task

    def _track(self, coro: Awaitable[Any], what: str) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(f"session {self.session_id}: {what}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _then(
        self,
        running: list[asyncio.Task[Any]],
        error: BaseException | None,
        done: Callable[[BaseException | None], None],
    ) -> None:
        for task in running:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    return  # the session closed under the handler: nothing to answer
                raise
            except Exception as exc:
                error = error or exc
        try:
            done(error)
        except Exception:
            self.log.exception("session %s: answering after its handlers failed", self.session_id)

    def _failed(self, message_type: str, error: BaseException) -> None:
        if self.refusal is not None and isinstance(error, self.refusal):
            return
        self.errors += 1
        self.log.error(
            "session %s: a %s handler raised", self.session_id, message_type, exc_info=error
        )
        failure = HandlerFailure(self.session_id, message_type, error)
        for watcher in list(_watchers):
            watcher(failure)


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable
