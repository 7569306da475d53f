"""The Orbit Voice Protocol 1.0 (OVP): typed messages, codecs, constants and the transports.

Every generated name (the messages, ``decode``, ``encode``, the frame codec, the constants and
error codes) is importable from here; the roles are submodules: ``voxwire.ovp.client`` (you
connect to a gateway), ``voxwire.ovp.gateway`` (clients connect to you), and their sans-I/O
state machines ``voxwire.ovp.client_core`` and ``voxwire.ovp.gateway_core``.

```python
from voxwire import ovp

event = ovp.decode(
    b'{"type":"agent.cancel","seq":3,"ts":"2026-05-14T12:34:57Z","session_id":"ovps_1"}',
    sender="client",
)
data = ovp.encode(event)
```
"""

from pkgutil import extend_path

# One folder in a wheel; two in an editable install: runtime/voxwire/ovp (this file and the
# transports) and generated/voxwire/ovp (the generated modules; _api holds their public
# names). extend_path joins them.
__path__ = extend_path(__path__, __name__)

from voxwire.ovp import _api
from voxwire.ovp._api import *  # noqa: F403

__all__: list[str] = []
__all__ += _api.__all__
