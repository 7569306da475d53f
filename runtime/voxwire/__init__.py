"""voxwire: typed messages and transports for two real-time voice-agent protocols.

```python
from voxwire import brisvox, ovp

msg = brisvox.decode(data, sender="server")
event = ovp.decode(data, sender="client")
```

``import voxwire`` imports both protocol packages, ``voxwire.brisvox`` and ``voxwire.ovp``:
their messages are generated from ``spec/``, their transports are hand-written.
"""

from importlib import import_module
from pkgutil import extend_path
from types import ModuleType
from typing import TYPE_CHECKING

# The hand-written half (runtime/voxwire) and the generated half (generated/voxwire) are one
# folder in a wheel and two in an editable install: extend_path makes them one package. How
# type checkers and the docs see the two folders: docs/architecture.md.
__path__ = extend_path(__path__, __name__)

from voxwire._version import __version__
from voxwire.errors import ProtocolError

if TYPE_CHECKING:
    from voxwire import brisvox, ovp

__all__ = ["ProtocolError", "__version__", "brisvox", "ovp"]

_PROTOCOLS = frozenset({"brisvox", "ovp"})


def __getattr__(name: str) -> ModuleType:
    # The protocol packages load on first use: ``import voxwire.errors`` stays light, and code
    # that needs only the runtime's shared modules (codegen) runs while generated/ is stale.
    if name in _PROTOCOLS:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
