"""A server's metrics: its sessions' statistics summed at each scrape, and its own counters.

One :class:`Metrics` per server (``Gateway.metrics``, ``AgentServer.metrics``). Each session is
registered while it lives (:meth:`Metrics.opened`) and its final figures are added to the
server's totals when it ends (:meth:`Metrics.closed`); the server counts what no session sees
itself (connections refused, by code; connections relayed to another process). Nothing is
counted per message here: a scrape reads the sessions' statistics
(:mod:`voxwire.observe.stats`, which every role feeds anyway), so the metrics cost nothing
until they are read. :meth:`Metrics.exposition` writes Prometheus' text format (0.0.4), which
the server's ``/metrics`` serves (:mod:`voxwire.observe.endpoints`); docs/observability.md lists
every metric. :mod:`voxwire.observe.otel` reads the same :meth:`Metrics.totals`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from voxwire.clock import Clock
from voxwire.observe.snapshot import LATENCY_BOUNDS_MS, Snapshot
from voxwire.observe.stats import Listener, SessionStats

__all__ = ["CONTENT_TYPE", "METRICS", "Metrics", "SessionTracing", "Totals", "Tracing"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of Prometheus' text format."""

METRICS: Final = (
    ("voxwire_sessions_active", "gauge", "Sessions the server holds now."),
    ("voxwire_sessions_total", "counter", "Sessions the server has held."),
    ("voxwire_messages_total", "counter", "Protocol messages sent and received, by direction."),
    ("voxwire_message_bytes_total", "counter", "Bytes of the messages, by direction."),
    ("voxwire_frames_total", "counter", "Audio frames sent and received, by direction."),
    ("voxwire_frames_missing_total", "counter", "Audio frames the frame counter skipped."),
    ("voxwire_unreadable_total", "counter", "Received messages the session did not accept."),
    ("voxwire_link_losses_total", "counter", "Links lost (not closed) under a session."),
    ("voxwire_resumes_total", "counter", "Sessions resumed on a new link."),
    ("voxwire_events_lost_total", "counter", "Events reported lost (Brisvox events.lost)."),
    ("voxwire_turns_total", "counter", "User turns ended."),
    ("voxwire_turn_latency_seconds", "histogram", "From the end of a user's turn to its answer."),
    ("voxwire_tool_calls_total", "counter", "Tool calls ended, by outcome."),
    ("voxwire_tool_duration_seconds", "histogram", "From a tool call to its outcome."),
    ("voxwire_handler_errors_total", "counter", "Times an application handler raised."),
    ("voxwire_refusals_total", "counter", "Connections refused before a session, by code."),
    ("voxwire_relays_total", "counter", "Connections relayed to the process holding the session."),
)
"""Every metric: its name, its Prometheus type and what it counts. Every metric carries the
labels ``protocol`` and ``role``; ``direction`` (``sent``, ``received``), ``outcome`` and
``code`` where said."""

_BUCKETS: Final = len(LATENCY_BOUNDS_MS) + 1


@dataclass
class Totals:
    """Everything a server's metrics say, summed over its sessions, live and ended."""

    sessions_active: int = 0
    sessions_total: int = 0
    messages: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0})
    message_bytes: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0})
    frames: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0})
    frames_missing: dict[str, int] = field(default_factory=lambda: {"sent": 0, "received": 0})
    unreadable: int = 0
    link_losses: int = 0
    resumes: int = 0
    events_lost: int = 0
    turns: int = 0
    turn_latency: list[float] = field(default_factory=lambda: [0.0, 0.0] + [0] * _BUCKETS)
    """Sum in seconds, count, then the count in each bucket of ``LATENCY_BOUNDS_MS``."""
    tool_outcomes: dict[str, int] = field(default_factory=dict)
    tool_duration: list[float] = field(default_factory=lambda: [0.0, 0.0] + [0] * _BUCKETS)
    handler_errors: int = 0
    refusals: dict[str, int] = field(default_factory=dict)
    relays: int = 0

    def add(self, snapshot: Snapshot, own: str | None, handler_errors: int) -> None:
        """Add one session's figures (``own``: the sender the server is)."""
        for sender, direction in snapshot.directions.items():
            way = "sent" if sender == own else "received"
            self.messages[way] += direction.messages
            self.message_bytes[way] += direction.message_bytes
            self.frames[way] += direction.frames
            self.frames_missing[way] += direction.frames_missing
            if way == "received":
                self.unreadable += direction.unreadable
        self.link_losses += snapshot.link_losses
        self.resumes += snapshot.resumes
        self.events_lost += snapshot.events_lost
        self.turns += snapshot.turns
        for tally, durations in (
            (self.turn_latency, snapshot.turn_latency),
            (self.tool_duration, snapshot.tool_durations),
        ):
            tally[0] += durations.total
            tally[1] += durations.count
            for i, n in enumerate(durations.histogram):
                tally[2 + i] += n
        for outcome, n in snapshot.tool_outcomes.items():
            self.tool_outcomes[outcome] = self.tool_outcomes.get(outcome, 0) + n
        self.handler_errors += handler_errors


class SessionTracing(Listener, Protocol):
    """A session's traces: told of its moments (a :class:`~voxwire.observe.stats.Listener`),
    and of its end."""

    def end(self, t: float) -> None:
        """The session is over at ``t``."""


class Tracing(Protocol):
    """What traces a server's sessions and relays (:class:`voxwire.observe.otel.Telemetry`)."""

    def session(self, metrics: Metrics, session_id: str, clock: Clock) -> SessionTracing:
        """The traces of a session that begins now."""

    def relay(self, metrics: Metrics, session_id: str) -> contextlib.AbstractContextManager[None]:
        """The trace of a connection relayed to another process, while it is carried."""


@dataclass
class _Live:
    stats: SessionStats
    handler_errors: Callable[[], int]
    clock: Clock
    tracing: SessionTracing | None


class Metrics:
    """The metrics of one server of ``protocol`` in ``role`` (``gateway``, ``agent``)."""

    def __init__(self, protocol: str, role: str) -> None:
        self.protocol = protocol
        self.role = role
        self._live: dict[object, _Live] = {}
        self._ended = Totals()
        self.tracing: Tracing | None = None
        """What traces the sessions that begin from now on and the relays (OpenTelemetry:
        :func:`voxwire.observe.otel.instrument`); None traces nothing."""

    def opened(
        self,
        key: object,
        stats: SessionStats,
        handler_errors: Callable[[], int],
        *,
        session_id: str,
        clock: Clock,
    ) -> None:
        """A session (``key``: any object naming it) began; its statistics are read live."""
        if key not in self._live:
            tracing = None
            if self.tracing is not None:
                tracing = self.tracing.session(self, session_id, clock)
                stats.listener = tracing
            self._live[key] = _Live(stats, handler_errors, clock, tracing)
            self._ended.sessions_total += 1

    def closed(self, key: object) -> None:
        """The session ``key`` ended: its figures join the server's totals (once)."""
        live = self._live.pop(key, None)
        if live is not None:
            snapshot = live.stats.snapshot(detail=False)
            self._ended.add(snapshot, live.stats.own, live.handler_errors())
            if live.tracing is not None:
                live.stats.listener = None
                live.tracing.end(live.clock.now())

    def refused(self, code: str) -> None:
        """A connection was refused before a session took it, with ``code``."""
        self._ended.refusals[code] = self._ended.refusals.get(code, 0) + 1

    @contextlib.contextmanager
    def relaying(self, session_id: str) -> Iterator[None]:
        """A connection of ``session_id`` is relayed to the process that holds it (counted, and
        traced while it is carried)."""
        self._ended.relays += 1
        if self.tracing is None:
            yield
            return
        with self.tracing.relay(self, session_id):
            yield

    def totals(self) -> Totals:
        """The figures now: the ended sessions' and the live ones' as they are."""
        ended = self._ended
        now = Totals(
            sessions_active=len(self._live),
            sessions_total=ended.sessions_total,
            messages=dict(ended.messages),
            message_bytes=dict(ended.message_bytes),
            frames=dict(ended.frames),
            frames_missing=dict(ended.frames_missing),
            unreadable=ended.unreadable,
            link_losses=ended.link_losses,
            resumes=ended.resumes,
            events_lost=ended.events_lost,
            turns=ended.turns,
            turn_latency=list(ended.turn_latency),
            tool_outcomes=dict(ended.tool_outcomes),
            tool_duration=list(ended.tool_duration),
            handler_errors=ended.handler_errors,
            refusals=dict(ended.refusals),
            relays=ended.relays,
        )
        for live in list(self._live.values()):
            now.add(live.stats.snapshot(detail=False), live.stats.own, live.handler_errors())
        return now

    def exposition(self) -> tuple[bytes, str]:
        """The metrics in Prometheus' text format, and its content type (what ``/metrics``
        serves)."""
        return prometheus_text(self.totals(), self.protocol, self.role).encode(), CONTENT_TYPE


def prometheus_text(totals: Totals, protocol: str, role: str) -> str:
    """``totals`` in Prometheus' text format (0.0.4), every metric of :data:`METRICS` present."""
    base = f'protocol="{_escape(protocol)}",role="{_escape(role)}"'
    values: dict[str, list[tuple[str, float]]] = {
        "voxwire_sessions_active": [("", totals.sessions_active)],
        "voxwire_sessions_total": [("", totals.sessions_total)],
        "voxwire_messages_total": _by("direction", totals.messages),
        "voxwire_message_bytes_total": _by("direction", totals.message_bytes),
        "voxwire_frames_total": _by("direction", totals.frames),
        "voxwire_frames_missing_total": _by("direction", totals.frames_missing),
        "voxwire_unreadable_total": [("", totals.unreadable)],
        "voxwire_link_losses_total": [("", totals.link_losses)],
        "voxwire_resumes_total": [("", totals.resumes)],
        "voxwire_events_lost_total": [("", totals.events_lost)],
        "voxwire_turns_total": [("", totals.turns)],
        "voxwire_tool_calls_total": _by("outcome", totals.tool_outcomes),
        "voxwire_handler_errors_total": [("", totals.handler_errors)],
        "voxwire_refusals_total": _by("code", totals.refusals),
        "voxwire_relays_total": [("", totals.relays)],
    }
    lines: list[str] = []
    for name, kind, text in METRICS:
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        if kind == "histogram":
            tally = totals.turn_latency if name.startswith("voxwire_turn") else totals.tool_duration
            lines += _histogram(name, base, tally)
            continue
        for labels, value in values[name]:
            lines.append(f"{name}{{{base}{labels}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _by(label: str, counts: dict[str, int]) -> list[tuple[str, float]]:
    return [(f',{label}="{_escape(key)}"', n) for key, n in sorted(counts.items())]


def _histogram(name: str, base: str, tally: list[float]) -> list[str]:
    lines, running = [], 0.0
    for bound, n in zip((*LATENCY_BOUNDS_MS, None), tally[2:], strict=True):
        running += n
        le = "+Inf" if bound is None else _number(bound / 1000)
        lines.append(f'{name}_bucket{{{base},le="{le}"}} {_number(running)}')
    lines.append(f"{name}_sum{{{base}}} {_number(tally[0])}")
    lines.append(f"{name}_count{{{base}}} {_number(tally[1])}")
    return lines


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
