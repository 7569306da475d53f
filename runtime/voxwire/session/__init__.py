"""The session layer under the four roles: handlers, the inbox, the timer.

Each asyncio adapter (:mod:`voxwire.brisvox.agent`, :mod:`voxwire.brisvox.engine`,
:mod:`voxwire.ovp.client`, :mod:`voxwire.ovp.gateway`) keeps a session of this layer between
its core and its application; the layer never touches a socket.

``on(message_type, handler)``, the same in both protocols:

- A handler runs in the session's reader, in arrival order, as its message is read (before the
  next one is): a plain function is called there and then; one that returns an awaitable (an
  ``async def``) has it run as a task the session starts there and tracks (cancelled when the
  session closes).
- A message that has a handler is handled: it is not also put in the session's inbox, so the
  iteration (``async for``) yields only what has none. The message that ends the session
  (``session.end``) reaches both: its handlers run, and the iteration yields it and ends. What the
  session acts on itself (a Brisvox tool call, a command's result, a resumption's
  ``session.start``) is never iterated, and a handler of it is called all the same.
- A handler that raises, plain or async, is logged at ERROR on the role's logger with the session
  id, the message type and the traceback, counted in the role's ``handler_errors``, and reported
  to :func:`watch_handler_failures` (how ``voxwire.brisvox.testing`` fails with its text); the
  session goes on. On the engine side a command's handlers answer it: ok once they all
  returned, the failure one raised as ``CommandFailed``, else ``unavailable``.

The inbox (:class:`Inbox`) is bounded and never makes the reader wait: what finds it full is
dropped and counted (``events_lost``). Every role shows the two counts one way
(:class:`SessionCounts`). The timer (:class:`DeadlineTimer`) is one loop timer at the
core's next deadline, on the injectable clock.
"""

from voxwire.session.counts import HandlerCount, SessionCounts
from voxwire.session.handlers import Handler, HandlerFailure, Handlers, watch_handler_failures
from voxwire.session.inbox import Inbox
from voxwire.session.timer import DeadlineTimer

__all__ = [
    "DeadlineTimer",
    "Handler",
    "HandlerCount",
    "HandlerFailure",
    "Handlers",
    "Inbox",
    "SessionCounts",
    "watch_handler_failures",
]
