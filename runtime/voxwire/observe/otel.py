"""OpenTelemetry for voxwire's servers (``pip install 'voxwire[otel]'``: the API only; the
application chooses the SDK and the exporter).

```python
from opentelemetry import metrics, trace
from voxwire.observe.otel import instrument

instrument(gateway)                          # the global tracer and meter
instrument(server, tracer=tracer, meter=meter)
```

:func:`instrument` attaches a :class:`Telemetry` to a ``Gateway``'s or an ``AgentServer``'s
:class:`~voxwire.observe.metrics.Metrics`:

- **metrics**: observable instruments that read the server's totals at each collection (those
  of ``/metrics``), and two histograms recorded as turns are answered and tool calls end (turn
  latency and tool duration, in seconds);
- **spans**, for each session that begins from then on: the session (from its start to its
  end) and, under it, each turn (from the end of the user's turn to its answer) with each tool
  call that began during it under the turn (else under the session), and each resume (from the
  link's loss to the resume); and one span while a connection is relayed to the process that
  holds its session.

docs/observability.md (OpenTelemetry) names every instrument, span and attribute. Every
attribute is the session id, the protocol and the role, and a tool's name, an outcome, a
direction or a code: never a token, a URL or its query. The span times are
the session's clock's, placed on the wall clock when the session began. Nothing else in
voxwire imports this module: without the extra, nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Final

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from voxwire.clock import Clock
from voxwire.observe.metrics import Metrics, Totals
from voxwire.observe.stats import OUTCOMES

__all__ = ["Telemetry", "instrument"]

_SCOPE: Final = "voxwire"
_FRESH_S: Final = 0.5
_FAILED: Final = OUTCOMES[1]
"""The tool outcome a span's status marks as an error."""
"""A collection reads the totals once: instruments collected within this share them."""


def instrument(
    server: Any, *, tracer: Tracer | None = None, meter: Meter | None = None
) -> Telemetry:
    """Trace and measure ``server`` (a ``Gateway`` or an ``AgentServer``: anything with a
    ``metrics``) on ``tracer`` and ``meter`` (the global ones by default)."""
    telemetry = Telemetry(tracer=tracer, meter=meter)
    telemetry.watch(server.metrics)
    return telemetry


class Telemetry:
    """Spans and metrics of the servers it watches, on one tracer and one meter."""

    def __init__(self, *, tracer: Tracer | None = None, meter: Meter | None = None) -> None:
        self.tracer = tracer or trace.get_tracer(_SCOPE)
        self.meter = meter or otel_metrics.get_meter(_SCOPE)
        self._watched: list[Metrics] = []
        self._read: dict[int, tuple[float, Totals]] = {}
        self.turn_latency = self.meter.create_histogram(
            "voxwire.turn.latency", unit="s", description="From a user's turn's end to its answer."
        )
        self.tool_duration = self.meter.create_histogram(
            "voxwire.tool.duration", unit="s", description="From a tool call to its outcome."
        )
        for name, description, read in _OBSERVED:
            make = (
                self.meter.create_observable_gauge
                if name == "voxwire.sessions.active"
                else self.meter.create_observable_counter
            )
            make(name, callbacks=[self._callback(read)], description=description)

    def watch(self, metrics: Metrics) -> None:
        """Trace the sessions of ``metrics``' server that begin from now on, and observe it."""
        metrics.tracing = self
        if metrics not in self._watched:
            self._watched.append(metrics)

    # -- tracing (voxwire.observe.metrics.Tracing) ----------------------------------------------

    def session(self, metrics: Metrics, session_id: str, clock: Clock) -> _SessionSpans:
        """The spans of a session that begins now."""
        return _SessionSpans(self, _attributes(metrics, session_id), clock)

    @contextlib.contextmanager
    def relay(self, metrics: Metrics, session_id: str) -> Iterator[None]:
        """A ``voxwire.relay`` span while the connection is carried."""
        with self.tracer.start_as_current_span(
            "voxwire.relay", attributes=_attributes(metrics, session_id)
        ):
            yield

    # -- metrics --------------------------------------------------------------------------------

    def _totals(self, metrics: Metrics) -> Totals:
        now = time.monotonic()
        read = self._read.get(id(metrics))
        if read is None or now - read[0] > _FRESH_S:
            read = self._read[id(metrics)] = (now, metrics.totals())
        return read[1]

    def _callback(self, read: Any) -> Any:
        def observe(options: CallbackOptions) -> list[Observation]:
            out = []
            for metrics in self._watched:
                base = {"voxwire.protocol": metrics.protocol, "voxwire.role": metrics.role}
                for extra, value in read(self._totals(metrics)):
                    out.append(Observation(value, {**base, **extra}))
            return out

        return observe


def _attributes(metrics: Metrics, session_id: str) -> dict[str, str]:
    return {
        "voxwire.session_id": session_id,
        "voxwire.protocol": metrics.protocol,
        "voxwire.role": metrics.role,
    }


def _by(key: str, counts: dict[str, int]) -> list[tuple[dict[str, str], int]]:
    return [({key: name}, n) for name, n in sorted(counts.items())]


_OBSERVED: Final[tuple[tuple[str, str, Any], ...]] = (
    ("voxwire.sessions.active", "Sessions held now.", lambda t: [({}, t.sessions_active)]),
    ("voxwire.sessions", "Sessions held.", lambda t: [({}, t.sessions_total)]),
    ("voxwire.messages", "Messages, by direction.", lambda t: _by("direction", t.messages)),
    ("voxwire.message.bytes", "Bytes, by direction.", lambda t: _by("direction", t.message_bytes)),
    ("voxwire.frames", "Audio frames, by direction.", lambda t: _by("direction", t.frames)),
    ("voxwire.link.losses", "Links lost.", lambda t: [({}, t.link_losses)]),
    ("voxwire.resumes", "Sessions resumed.", lambda t: [({}, t.resumes)]),
    ("voxwire.relays", "Connections relayed.", lambda t: [({}, t.relays)]),
    ("voxwire.refusals", "Connections refused, by code.", lambda t: _by("code", t.refusals)),
    ("voxwire.handler.errors", "Handler failures.", lambda t: [({}, t.handler_errors)]),
)


class _SessionSpans:
    """One session's spans (a :class:`~voxwire.observe.metrics.SessionTracing`)."""

    def __init__(self, telemetry: Telemetry, attributes: dict[str, str], clock: Clock) -> None:
        self._telemetry = telemetry
        self._attributes = attributes
        self._offset_ns = time.time_ns() - round(clock.now() * 1e9)
        self._session = telemetry.tracer.start_span(
            "voxwire.session", attributes=attributes, start_time=self._ns(clock.now())
        )
        self._turn: Span | None = None
        self._tools: dict[str, Span] = {}

    def _ns(self, t: float) -> int:
        return self._offset_ns + round(t * 1e9)

    def _child(self, name: str, parent: Span, t: float, **extra: str) -> Span:
        return self._telemetry.tracer.start_span(
            name,
            context=trace.set_span_in_context(parent),
            attributes={**self._attributes, **extra},
            start_time=self._ns(t),
        )

    def _end_turn(self, t: float, answered: bool) -> None:
        if self._turn is not None:
            if not answered:
                self._turn.set_status(Status(StatusCode.UNSET, "unanswered"))
                self._turn.set_attribute("voxwire.answered", False)
            self._turn.end(end_time=self._ns(t))
            self._turn = None

    def turn_ended(self, t: float) -> None:
        self._end_turn(t, answered=False)
        self._turn = self._child("voxwire.turn", self._session, t)

    def turn_answered(self, ended_at: float, t: float) -> None:
        self._telemetry.turn_latency.record(t - ended_at, self._attributes)
        if self._turn is not None:
            self._turn.set_attribute("voxwire.answered", True)
        self._end_turn(t, answered=True)

    def tool_started(self, key: str, name: str, t: float) -> None:
        parent = self._turn or self._session
        self._tools[key] = self._child("voxwire.tool_call", parent, t, **{"voxwire.tool": name})

    def tool_ended(self, key: str, outcome: str, started_at: float, t: float) -> None:
        self._telemetry.tool_duration.record(
            t - started_at, {**self._attributes, "voxwire.outcome": outcome}
        )
        span = self._tools.pop(key, None)
        if span is not None:
            span.set_attribute("voxwire.outcome", outcome)
            if outcome == _FAILED:
                span.set_status(Status(StatusCode.ERROR))
            span.end(end_time=self._ns(t))

    def resumed(self, lost_at: float | None, t: float) -> None:
        span = self._child("voxwire.resume", self._session, t if lost_at is None else lost_at)
        span.end(end_time=self._ns(t))

    def link(self, event: str, t: float) -> None:
        self._session.add_event(f"voxwire.link.{event}", timestamp=self._ns(t))
        if event != "open":
            self._end_turn(t, answered=False)

    def end(self, t: float) -> None:
        self._end_turn(t, answered=False)
        for span in self._tools.values():
            span.end(end_time=self._ns(t))
        self._tools.clear()
        self._session.end(end_time=self._ns(t))
