"""The fake engine's home until 0.x: :mod:`voxwire.testing.engine` holds it now, beside the
fakes of the other roles; these names stay importable from here."""

from voxwire.testing.engine import AgentCall, AgentRefused
from voxwire.testing.watch import Refused

__all__ = ["AgentCall", "AgentRefused", "Refused"]
