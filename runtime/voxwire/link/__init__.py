"""One outbound link for every role of both protocols.

The sans-I/O part (:class:`Outbound`: the queue, its two classes and bounds, the close order;
:class:`Keepalive`: ping and silence deadlines) holds no asyncio and no socket; the asyncio
adapter (:class:`Link`) owns the writer task, the timers and the drain timeout, and no rule of
either protocol. See docs/architecture.md, "Asyncio adapters".
"""

from voxwire.link.adapter import DownCause, Link, LinkDown
from voxwire.link.keepalive import Keepalive, KeepaliveAction
from voxwire.link.outbound import (
    TRANSITIONS,
    Batch,
    Frame,
    Outbound,
    OutboundEvent,
    OutboundState,
    Overflow,
    Put,
)

__all__ = [
    "TRANSITIONS",
    "Batch",
    "DownCause",
    "Frame",
    "Keepalive",
    "KeepaliveAction",
    "Link",
    "LinkDown",
    "Outbound",
    "OutboundEvent",
    "OutboundState",
    "Overflow",
    "Put",
]
