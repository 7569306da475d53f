"""The Brisvox agent protocol v1: typed messages, their codec and constants, and the transports.

Every generated name (the messages, ``decode``, ``encode``, the constants and error codes) is
importable from here; the roles are submodules: ``voxwire.brisvox.agent`` (the engine connects
to you), ``voxwire.brisvox.engine`` (you connect to an agent), ``voxwire.brisvox.agent_core`` and
``voxwire.brisvox.engine_core`` (their sans-I/O state machines); ``voxwire.testing`` has the
fakes of both sides for tests.

```python
from voxwire import brisvox

message = brisvox.decode(b'{"type":"say","text":"Hello."}', sender="agent")
data = brisvox.encode(message)
```
"""

from pkgutil import extend_path

# One folder in a wheel; two in an editable install: runtime/voxwire/brisvox (this file and the
# transports) and generated/voxwire/brisvox (the generated modules; _api holds their public
# names). extend_path joins them.
__path__ = extend_path(__path__, __name__)

from voxwire.brisvox import _api
from voxwire.brisvox._api import *  # noqa: F403

__all__: list[str] = []
__all__ += _api.__all__
