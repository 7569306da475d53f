"""The sans-I/O keepalive of one connection: when to ping, when the link is down.

One policy for both protocols, from their spec constants: a ping every ``ping_interval``, and
the link is down ``silence_timeout`` after the last sign of life (any frame received, any
pong), whatever the write timeout. ``now`` is passed in; the adapter sleeps until
:meth:`Keepalive.next_deadline` and calls :meth:`Keepalive.tick`.

```python
from voxwire.link import Keepalive, KeepaliveAction

keepalive = Keepalive(ping_interval=10.0, silence_timeout=30.0, now=0.0)
assert keepalive.tick(10.0) is KeepaliveAction.PING
keepalive.heard(10.1)                                  # the pong
assert keepalive.next_deadline() == 20.0
assert keepalive.tick(40.0) is KeepaliveAction.DOWN   # 30 s after 10.1, whatever the pings
```
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Keepalive", "KeepaliveAction"]


class KeepaliveAction(Enum):
    """What :meth:`Keepalive.tick` asks of the adapter."""

    NOTHING = "nothing"
    PING = "ping"
    DOWN = "down"
    """Nothing was heard for ``silence_timeout``: take the link down."""


class Keepalive:
    """Pings every ``ping_interval``; down ``silence_timeout`` after the last sign of life."""

    def __init__(self, *, ping_interval: float, silence_timeout: float, now: float) -> None:
        if not ping_interval > 0 or not silence_timeout > 0:
            raise ValueError(
                f"keepalive intervals must be positive, not {ping_interval} and {silence_timeout}"
            )
        if ping_interval >= silence_timeout:
            raise ValueError(
                f"the ping interval ({ping_interval:g} s) must be shorter than the silence "
                f"timeout ({silence_timeout:g} s), or a healthy link would be taken down"
            )
        self.ping_interval = ping_interval
        self.silence_timeout = silence_timeout
        self.last_heard = now
        """When the last sign of life arrived."""
        self.down = False
        self._next_ping = now + ping_interval

    def heard(self, now: float) -> None:
        """A frame or a pong arrived."""
        if now > self.last_heard:
            self.last_heard = now

    def next_deadline(self) -> float:
        """When :meth:`tick` must run next."""
        return min(self._next_ping, self.last_heard + self.silence_timeout)

    def tick(self, now: float) -> KeepaliveAction:
        """What is due at ``now``: the link down (once), a ping, or nothing."""
        if self.down:
            return KeepaliveAction.NOTHING
        if now >= self.last_heard + self.silence_timeout:
            self.down = True
            return KeepaliveAction.DOWN
        if now >= self._next_ping:
            self._next_ping = now + self.ping_interval
            return KeepaliveAction.PING
        return KeepaliveAction.NOTHING
