"""voxwire: typed messages and transports for two real-time voice-agent protocols.

```python
from voxwire import brisvox, ovp

msg = brisvox.decode(data, sender="server")
event = ovp.decode(data, sender="client")
```

The message modules (``voxwire.brisvox``, ``voxwire.ovp``) are generated from ``spec/``; this
package joins them with the hand-written runtime.
"""

# The generated part (generated/voxwire) and the hand-written part (runtime/voxwire) are two
# folders in an editable install and one in a wheel: extend_path makes both one package.
# (Spelled this way, documentation tools follow the join too.)
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from voxwire._version import __version__
from voxwire.errors import ProtocolError

__all__ = ["ProtocolError", "__version__", "brisvox", "ovp"]
