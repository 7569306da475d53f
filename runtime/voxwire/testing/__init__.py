"""Fakes of every role for tests, on real loopback sockets, and a pytest plugin.

Each fake plays one side of a protocol with voxwire's own role, driven through its public API,
against the code under test, and records what that code sent: taken, or refused with the
protocol's error code (:mod:`voxwire.testing.watch`).

- :class:`voxwire.testing.engine.AgentCall` plays the Brisvox engine side, for who builds an
  agent;
- :class:`voxwire.testing.agent.FakeAgent` plays a Brisvox agent, for who builds an engine;
- :class:`voxwire.testing.gateway.FakeGateway` plays an OVP gateway (it needs
  ``voxwire[gateway]``), for who builds an OVP client;
- :class:`voxwire.testing.client.FakeOVPClient` plays an OVP client, for who builds an OVP
  gateway.

``pip install voxwire`` registers the pytest plugin (:mod:`voxwire.testing.plugin`): its
fixtures ``fake_engine``, ``fake_agent``, ``fake_gateway`` and ``fake_ovp_client`` hand a test
these fakes, and a failing test shows what each fake saw.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from voxwire.testing.agent import FakeAgent
    from voxwire.testing.client import FakeOVPClient
    from voxwire.testing.engine import AgentCall
    from voxwire.testing.gateway import FakeGateway
    from voxwire.testing.watch import ExpectationFailed, NothingArrived, Refused

__all__ = [
    "AgentCall",
    "ExpectationFailed",
    "FakeAgent",
    "FakeGateway",
    "FakeOVPClient",
    "NothingArrived",
    "Refused",
]

_HOMES = {
    "AgentCall": "engine",
    "ExpectationFailed": "watch",
    "FakeAgent": "agent",
    "FakeGateway": "gateway",
    "FakeOVPClient": "client",
    "NothingArrived": "watch",
    "Refused": "watch",
}


def __getattr__(name: str) -> Any:
    # Each fake loads on first use: the gateway's needs PyJWT (voxwire[gateway]), and the
    # plugin, which pytest loads in every run, imports none of them until a test asks.
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)
