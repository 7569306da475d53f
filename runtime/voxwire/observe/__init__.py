"""Observe a session: statistics computed from the protocol.

- :mod:`voxwire.observe.stats`: :class:`~voxwire.observe.stats.SessionStats`, one per session,
  sans-I/O (every input carries its time);
- :mod:`voxwire.observe.snapshot`: what it counted, frozen
  (:class:`~voxwire.observe.snapshot.Snapshot`);
- :mod:`voxwire.observe.endpoints`: ``/healthz``, ``/readyz`` and ``/metrics``, answered on
  every server's own port (:class:`~voxwire.observe.endpoints.Endpoints`);
- :mod:`voxwire.observe.marks`: the types of the tables the spec's ``statistics:`` generates
  (which messages end a turn, start a tool call, resume the session...).

Importing this package imports none of them: a session that observes nothing pays nothing.
docs/observability.md defines every figure; ``voxwire report`` draws them for a capture.
"""

__all__: list[str] = []
