"""The gateway's WebSocket connection: :class:`GatewayConnection`, which hands each audio frame to
its session as ``websockets`` parses it. Not public: :mod:`voxwire.ovp.gateway_session` is (it
exports the class).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

__all__ = ["GatewayConnection"]

_BINARY: Final = Opcode.BINARY  # bound once: an Enum member look-up costs a call on 3.11
_DATA_OPCODES: Final = (Opcode.TEXT, _BINARY)
"""The first frame of a message (a continuation frame belongs to the message before it)."""


class GatewayConnection(ServerConnection):
    """A gateway connection that hands each audio frame to its session as ``websockets`` parses
    it (``on_binary``, called in ``data_received``), rather than through its message queue and a
    wakeup of the session's reader task: a frame costs no loop turn on its way in.

    Only a whole binary message takes that path, and only while no message is waiting in the
    queue (``queued``: what the reader has not read yet), so the order of arrival holds; text
    (UTF-8 checked by ``websockets``), fragmented messages and whatever arrives behind them go
    through the queue.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_binary: Callable[[bytes], None] | None = None
        self.queued = 0

    def process_event(self, event: Event) -> None:
        if type(event) is Frame and event.opcode in _DATA_OPCODES:
            on_binary = self.on_binary
            if on_binary is not None and event.fin and event.opcode is _BINARY and not self.queued:
                data = event.data
                on_binary(data if type(data) is bytes else bytes(data))
                return
            self.queued += 1
        super().process_event(event)

    def read_one(self) -> None:
        """The reader took one message from the queue."""
        self.queued -= 1
