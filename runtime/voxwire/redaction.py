"""Secrets out of every log line: one filter for both protocols' servers and clients.

At DEBUG ``websockets`` logs the upgrade request: the request line with its query (OVP's token,
perhaps percent-encoded as ``?tok%65n=``) and every header (Brisvox's bearer token). Matching
parameter names cannot be trusted, so the filter drops the **whole query** of anything that has
one, the value of every ``Authorization`` and ``Cookie`` header, and anything shaped like a JWT,
in the message and in the traceback, before any handler sees the record.

```python
from voxwire.redaction import redact

assert redact("GET /voice/ws/s1?tok%65n=abc HTTP/1.1") == "GET /voice/ws/s1?[redacted] HTTP/1.1"
assert redact("Authorization: Bearer abc") == "Authorization: [redacted]"
```
"""

from __future__ import annotations

import logging
import re
from typing import Final

__all__ = ["REDACTED", "RedactingFilter", "install_redaction", "redact", "redacting_logger"]

REDACTED: Final = "[redacted]"

_QUERY: Final = re.compile(r"\?\S+")
_CREDENTIAL_HEADER: Final = re.compile(
    r"(?im)^(\s*[<>]?\s*(?:proxy-)?(?:authorization|cookie):\s*).*$"
)
_JWT: Final = re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_WEBSOCKETS_LOGGERS: Final = ("websockets", "websockets.client", "websockets.server")


def redact(text: str) -> str:
    """``text`` without any query, credential header value or JWT (each ``[redacted]``)."""
    text = _CREDENTIAL_HEADER.sub(rf"\g<1>{REDACTED}", text)
    return _JWT.sub(REDACTED, _QUERY.sub(f"?{REDACTED}", text))


class RedactingFilter(logging.Filter):
    """Rewrites a record's message and traceback with :func:`redact`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


_FILTER: Final = RedactingFilter()


def redacting_logger(name: str) -> logging.Logger:
    """The logger ``name`` with the filter installed (once): hand it to ``websockets``."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(_FILTER)
    return logger


def install_redaction() -> None:
    """Install the filter on ``websockets``' own loggers (for connections made without a
    ``logger=``); idempotent."""
    for name in _WEBSOCKETS_LOGGERS:
        redacting_logger(name)
