"""Structure-aware fuzzing of every voxwire decoder: ``python -m fuzz`` (see docs/fuzzing.md).

Each decoder (the JSON decoder of each sender of each protocol, and OVP's frame decoder) is fed
mutations of the spec's examples and of the conformance vectors, and every answer is judged by
one oracle: only the protocol's ``ProtocolError``, with one of the protocol's codes, escapes; a
message that is accepted is written again by ``encode`` and reads back equal; the same bytes
give the same verdict as ``bytes``, ``str``, ``bytearray`` and ``memoryview``; and no input
takes longer than a bound. The ``validate`` target runs ``voxwire validate`` on mutated captures
and holds it to its own promise (:mod:`fuzz.captures`).
"""

from __future__ import annotations

from fuzz.oracle import Finding
from fuzz.run import Report, TargetReport, run
from fuzz.targets import DECODERS, TARGETS, Target

__all__ = ["DECODERS", "TARGETS", "Finding", "Report", "Target", "TargetReport", "run"]
