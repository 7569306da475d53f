"""The counters every role shows of its session layer, written once: how many times a handler
raised (:class:`HandlerCount`), and, for a role with an inbox, how many messages its
application did not keep up with (:class:`SessionCounts`).

A role inherits the one it has: it holds its :class:`~voxwire.session.Handlers` as
``_handlers`` and its :class:`~voxwire.session.Inbox` as ``_inbox``. The Brisvox engine side
has no inbox (its notices are its own), and says what its ``events_lost`` counts itself.
"""

from __future__ import annotations

from typing import Any

from voxwire.session.handlers import Handlers
from voxwire.session.inbox import Inbox

__all__ = ["HandlerCount", "SessionCounts"]


class HandlerCount:
    """``handler_errors``, read from the role's handlers (``_handlers``)."""

    __slots__ = ()

    _handlers: Handlers

    @property
    def handler_errors(self) -> int:
        """How many times a handler registered with ``on()`` raised (a refusal aside)."""
        return self._handlers.errors


class SessionCounts(HandlerCount):
    """``handler_errors``, and ``events_lost`` read from the role's inbox (``_inbox``)."""

    __slots__ = ()

    _inbox: Inbox[Any]

    @property
    def events_lost(self) -> int:
        """What the peer sent that was dropped because the application did not keep up (the
        session's inbox was full): never a stall of the reader."""
        return self._inbox.lost
