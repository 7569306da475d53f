"""The loggers the Brisvox adapters hand to websockets, with secrets redacted.

At DEBUG websockets logs the upgrade request: its path with the query and every header, the
bearer token included. These loggers rewrite such lines before any handler sees them.
"""

from __future__ import annotations

import logging
import re
from typing import Final

__all__ = ["websockets_logger"]

_AUTHORIZATION: Final = re.compile(r"(?i)(authorization:\s*).*")
_QUERY: Final = re.compile(r"\?\S*")
_REDACTED: Final = "[redacted]"


class _Redact(logging.Filter):
    """Drops the value of an Authorization header and the query of a request line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _QUERY.sub(f"?{_REDACTED}", _AUTHORIZATION.sub(rf"\g<1>{_REDACTED}", message))
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_FILTER: Final = _Redact()


def websockets_logger(name: str) -> logging.Logger:
    """The logger named ``name`` with the redacting filter installed (once)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
