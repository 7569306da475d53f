"""Taking a server out of service without dropping its calls: the drain both servers share.

:meth:`voxwire.ovp.gateway.Gateway.drain` and :meth:`voxwire.brisvox.agent.AgentServer.drain`
do the same four things: ``/readyz`` answers 503 at once (the balancer stops sending new
sessions), new sessions are refused (HTTP 503 before the upgrade, which a balancer retries on
another process), every live session is handed over through the protocol's own resume where a
shared store lets another process take it (:mod:`voxwire.cluster`), and the drain returns when
no session is left or its deadline passed, the rest ended explicitly. Each returns what it did
as a :class:`Drained`.

:func:`drain_on_signal` is the process's side: it waits for SIGTERM (or SIGINT), then drains.

```python
async with Gateway(handler, secret=secret, port=8765) as gateway:
    await drain_on_signal(gateway, deadline=30.0)  # SIGTERM: drain, then close on exit
```
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from voxwire.clock import Clock

__all__ = ["DRAIN_SIGNALS", "Drainable", "Drained", "drain_on_signal", "wait_until"]

log = logging.getLogger(__name__)

DRAIN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
"""What :func:`drain_on_signal` drains on: an orchestrator's stop, and Ctrl-C."""


@dataclass(frozen=True, slots=True)
class Drained:
    """What a drain did with the sessions it found live (each counted once)."""

    handed_over: int
    """Handed to another process through the protocol's resume (the state is in the store)."""
    finished: int
    """Ended by themselves while the drain waited."""
    ended: int
    """Still live at the deadline, and ended then (OVP ``session.end``; Brisvox: the link
    closed, the call going on without the agent)."""


class Drainable(Protocol):
    """A server that can be drained: :class:`~voxwire.ovp.gateway.Gateway`,
    :class:`~voxwire.brisvox.agent.AgentServer`."""

    async def drain(self, deadline: float) -> Drained:
        """Take the server out of service within ``deadline`` seconds of its clock."""
        ...


async def drain_on_signal(
    server: Drainable, *, deadline: float = 30.0, signals: Iterable[signal.Signals] = DRAIN_SIGNALS
) -> Drained:
    """Wait for one of ``signals``, then drain ``server`` within ``deadline`` seconds; return
    what the drain did. The signals' handlers are this function's while it runs (a second signal
    during the drain changes nothing; the drain's deadline bounds it)."""
    loop = asyncio.get_running_loop()
    caught = asyncio.Event()
    installed = list(signals)
    for number in installed:
        loop.add_signal_handler(number, caught.set)
    try:
        await caught.wait()
        log.info("drain: signalled; draining within %g s", deadline)
        drained = await server.drain(deadline)
    finally:
        for number in installed:
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(number)
    log.info(
        "drain: done: %d handed over, %d finished, %d ended at the deadline",
        drained.handed_over,
        drained.finished,
        drained.ended,
    )
    return drained


async def wait_until(
    done: Callable[[], bool], changed: asyncio.Event, clock: Clock, seconds: float
) -> None:
    """Wait until ``done()``, asked again whenever ``changed`` is set, ``seconds`` of ``clock``
    at most (a drain waiting for its sessions to end)."""
    until = clock.now() + seconds
    while not done() and (left := until - clock.now()) > 0:
        changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(clock.real_seconds(left)):
                await changed.wait()
