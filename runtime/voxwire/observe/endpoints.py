"""The plain HTTP paths a voxwire server answers beside its WebSocket: health, readiness, metrics.

A balancer or an orchestrator probes them on the server's own port, before any upgrade:

- ``/healthz``: 200 while the process serves (it answers at all);
- ``/readyz``: 200 while it takes new sessions, 503 once it drains or closes (the balancer then
  sends new sessions elsewhere while this process still serves its own);
- ``/metrics``: the metrics in Prometheus' text format, where the server has them; 404 otherwise.

Each server holds one :class:`Endpoints` and asks it first for every request
(:meth:`Endpoints.answer`); any other path is the server's own to route.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

__all__ = ["HEALTH_PATH", "METRICS_PATH", "READY_PATH", "Endpoints", "MetricsText"]

HEALTH_PATH: Final = "/healthz"
READY_PATH: Final = "/readyz"
METRICS_PATH: Final = "/metrics"

MetricsText = Callable[[], tuple[bytes, str]]
"""What ``/metrics`` serves: the body and its content type, made at each scrape."""


class Endpoints:
    """A server's health, readiness and metrics paths.

    Attributes:
        ready: Whether the server takes new sessions (``/readyz``); a drain sets it false.
        metrics: What ``/metrics`` serves; ``None`` answers 404 there.
    """

    def __init__(self, *, metrics: MetricsText | None = None) -> None:
        self.ready = True
        self.metrics = metrics

    def answer(self, connection: ServerConnection, request: Request) -> Response | None:
        """The response to one of the paths above, or ``None`` for any other path."""
        path = request.path.partition("?")[0]
        if path == HEALTH_PATH:
            return connection.respond(HTTPStatus.OK, "ok\n")
        if path == READY_PATH:
            if self.ready:
                return connection.respond(HTTPStatus.OK, "ready\n")
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
        if path == METRICS_PATH:
            if self.metrics is None:
                return connection.respond(HTTPStatus.NOT_FOUND, "no metrics here\n")
            body, content_type = self.metrics()
            response = connection.respond(HTTPStatus.OK, "")
            response.body = body
            del response.headers["Content-Type"]
            del response.headers["Content-Length"]
            response.headers["Content-Type"] = content_type
            response.headers["Content-Length"] = str(len(body))
            return response
        return None
