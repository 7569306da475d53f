"""The ``redis`` client for the stores, and its exceptions sorted, without requiring the extra.

``UNAVAILABLE``: Redis cannot be reached or did not answer in time; ``REFUSED``: it answered
with an error (a script's ``error_reply``). Without the ``redis`` package installed both are an
exception nothing raises, so the in-memory stores import this module freely.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REFUSED", "UNAVAILABLE", "connect"]


class _Never(Exception):
    """Raised by nothing: stands in for the client's exceptions when it is not installed."""


try:
    from redis.exceptions import ConnectionError as _ConnectionError
    from redis.exceptions import ResponseError as _ResponseError
    from redis.exceptions import TimeoutError as _TimeoutError
except ImportError:  # the redis extra is not installed
    UNAVAILABLE: tuple[type[BaseException], ...] = (_Never,)
    REFUSED: type[BaseException] = _Never
else:
    UNAVAILABLE = (_ConnectionError, _TimeoutError, OSError)
    REFUSED = _ResponseError


def connect(url: str, *, timeout: float = 1.0) -> Any:
    """A ``redis.asyncio.Redis`` for the stores: every call bounded by ``timeout`` seconds, and
    one immediate retry, which a connection Redis closed (a restart) needs; never a backoff
    that would make a resume wait. Needs the ``redis`` extra."""
    try:
        from redis.asyncio import Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
    except ImportError:
        raise ImportError(
            "voxwire's Redis stores need the redis extra: pip install 'voxwire[redis]'"
        ) from None
    return Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=list(UNAVAILABLE),
    )
