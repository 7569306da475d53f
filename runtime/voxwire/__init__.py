"""voxwire: typed messages and transports for two real-time voice-agent protocols.

```python
from voxwire import brisvox, ovp

msg = brisvox.decode(data, sender="server")
event = ovp.decode(data, sender="client")
```

The message modules (``voxwire.brisvox``, ``voxwire.ovp``) are generated from ``spec/``; this
package joins them with the hand-written runtime.
"""

from pkgutil import extend_path

# The generated part (generated/voxwire) and the hand-written part (runtime/voxwire) are two
# folders in an editable install and one in a wheel: extend_path makes both one package.
__path__ = extend_path(__path__, __name__)

from voxwire._version import __version__
from voxwire.errors import ProtocolError

__all__ = ["ProtocolError", "__version__", "brisvox", "ovp"]
