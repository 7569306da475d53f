"""The loggers the Brisvox adapters hand to websockets, with secrets redacted.

At DEBUG websockets logs the upgrade request: its path with the query and every header, the
bearer token included. :mod:`voxwire.redaction` rewrites such lines before any handler sees them.
"""

from __future__ import annotations

from voxwire.redaction import redacting_logger as websockets_logger

__all__ = ["websockets_logger"]
